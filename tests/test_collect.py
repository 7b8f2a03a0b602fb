"""The collector: per-call records, structure, errors, and leaving the model untouched."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import torch
from torch import nn

from moduleprofiler import FormulaError, ModuleProfiler, ProfilingError
from moduleprofiler.call import Call
from moduleprofiler.collect import build_record
from moduleprofiler.records import CallRecord, ModuleInfo
from tests.fixtures.models import (
    ODD_MODELS,
    Boom,
    DictOutput,
    NeverCalled,
    RaisesInside,
    SharedTwice,
    StructuredOutputs,
    TiedWeights,
    Unknown,
    WithUnknownLeaf,
)
from tests.fixtures.state import assert_unchanged, snapshot


@pytest.mark.parametrize("name", sorted(ODD_MODELS))
@pytest.mark.parametrize("eval_mode", [True, False])
def test_model_state_is_untouched(name: str, eval_mode: bool) -> None:
    model, example = ODD_MODELS[name]()
    # give every parameter a grad so that "grads untouched" is actually exercised
    for parameter in model.parameters():
        parameter.grad = torch.full_like(parameter, 0.5)
    before = snapshot(model)
    if name == "raises_inside":
        with pytest.raises(ProfilingError):
            ModuleProfiler().profile(model, example, eval=eval_mode)
    else:
        ModuleProfiler().profile(model, example, eval=eval_mode)
    assert_unchanged(model, before)


def test_frozen_batchnorm_keeps_its_own_flag() -> None:
    model, example = ODD_MODELS["frozen_bn_in_training"]()
    ModuleProfiler().profile(model, example, eval=True)
    # root.train() would have set bn back to training; each flag is restored individually
    assert model.training and model.conv.training and not model.bn.training


def test_eval_true_runs_in_eval_mode_and_false_keeps_training() -> None:
    seen: list[bool] = []

    class Probe(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            seen.append(self.training)
            return x

    model = Probe().train()
    ModuleProfiler().profile(model, torch.zeros(1), eval=True)
    ModuleProfiler().profile(model, torch.zeros(1), eval=False)
    assert seen == [False, True]
    assert model.training


def test_runs_under_no_grad() -> None:
    grad_enabled: list[bool] = []

    class Probe(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            grad_enabled.append(torch.is_grad_enabled())
            return x

    ModuleProfiler().profile(Probe(), torch.zeros(1))
    assert grad_enabled == [False]
    assert torch.is_grad_enabled()


def test_shared_module_gives_one_record_per_call() -> None:
    model = SharedTwice()
    profile = ModuleProfiler().profile(model, torch.randn(2, 4))
    shared = profile.calls("shared")
    assert [record.call_number for record in shared] == [0, 1]
    # both calls are children of the root call, in execution order: shared, shared, head
    assert [record.path for record in profile.records] == ["", "shared", "shared", "head"]
    assert all(record.parent == 0 for record in profile.records[1:])


def test_never_called_module_is_listed_not_crashing() -> None:
    profile = ModuleProfiler().profile(NeverCalled(), torch.randn(2, 3))
    assert profile.uncalled == ("unused",)
    assert profile.calls("unused") == ()


def test_records_carry_parent_and_depth_from_the_runtime_stack() -> None:
    model = nn.Sequential(nn.Sequential(nn.ReLU()), nn.ReLU())
    profile = ModuleProfiler().profile(model, torch.randn(1, 2))
    summary = [(r.index, r.parent, r.depth, r.path) for r in profile.records]
    assert summary == [(0, None, 0, ""), (1, 0, 1, "0"), (2, 1, 2, "0.0"), (3, 0, 1, "1")]


def test_forward_error_names_the_failing_module_and_chains_the_cause() -> None:
    model = RaisesInside()
    with pytest.raises(ProfilingError) as info:
        ModuleProfiler().profile(model, torch.randn(2, 3))
    error = info.value
    assert error.path == "block.1"
    assert "'block.1' (Boom)" in str(error)
    assert isinstance(error.__cause__, ValueError)
    assert str(error.__cause__) == "boom"


def test_root_forward_error_names_the_root() -> None:
    with pytest.raises(ProfilingError, match="__root__") as info:
        ModuleProfiler().profile(Boom(), torch.randn(1))
    assert info.value.path == ""


def test_model_called_inside_an_except_block_is_not_mistaken_for_a_failure() -> None:
    model = nn.Linear(2, 2)
    try:
        raise KeyError("outer")
    except KeyError:
        profile = ModuleProfiler().profile(model, torch.randn(1, 2))
    assert len(profile.records) == 1


def test_unknown_type_is_none_and_listed_without_operator_accounting() -> None:
    profile = ModuleProfiler().profile(WithUnknownLeaf(), torch.randn(2, 3), operators=False)
    custom = profile.calls("custom")[0]
    assert custom.self_ops is None and custom.ops_source == "unknown"
    assert "custom" in profile.unsupported
    assert "Unknown" in profile.unsupported_types
    assert not profile.complete


def test_formula_that_raises_gives_formula_error_naming_the_module() -> None:
    def broken(module: nn.Module, inputs: tuple, output: object) -> int:
        raise ZeroDivisionError("bad formula")

    profiler = ModuleProfiler()
    profiler.ops_fn_map[Unknown] = broken
    model = WithUnknownLeaf()
    before = snapshot(model)
    with pytest.raises(FormulaError, match="'custom'") as info:
        profiler.profile(model, torch.randn(2, 3))
    assert isinstance(info.value.__cause__, ZeroDivisionError)
    assert_unchanged(model, before)


def test_formula_returning_a_non_number_is_rejected() -> None:
    profiler = ModuleProfiler()
    profiler.ops_fn_map[Unknown] = lambda module, inputs, output: "many"
    with pytest.raises(FormulaError, match="returned str"):
        profiler.profile(WithUnknownLeaf(), torch.randn(2, 3))


def test_exclude_from_ops_takes_classes_and_instances() -> None:
    model = SharedTwice()
    by_class = ModuleProfiler(exclude_from_ops=[nn.Linear]).profile(model, torch.randn(2, 4))
    assert {r.ops_source for r in by_class.records if r.path} == {"excluded"}
    by_instance = ModuleProfiler(exclude_from_ops=[model.head]).profile(model, torch.randn(2, 4))
    assert by_instance.calls("head")[0].ops_source == "excluded"
    assert by_instance.calls("shared")[0].ops_source != "excluded"
    assert by_instance.excluded == ("head",)
    # excluded is deliberate, not unknown
    assert "head" not in by_instance.unsupported


def test_the_maps_excluded_function_prices_excluded_modules() -> None:
    net = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    x = torch.randn(2, 4)
    profiler = ModuleProfiler(exclude_from_ops=[nn.Linear])
    assert profiler.estimate_ops(net, x)["0"]["ops"] is None  # the default: unknown
    # 0.0.4's map contract: excluded modules get ops_fn_map["excluded"] (it was never called)
    profiler.ops_fn_map["excluded"] = lambda module, inputs, output: 0
    profile = profiler.profile(net, x)
    record = profile.calls("0")[0]
    assert (record.self_ops, record.ops_source) == (0, "excluded")
    assert profile.total_ops == 2 * 3  # the ReLU's 6 elements, the Linear's 0
    assert profiler.estimate_ops(net, x)["0"]["ops"] == 0
    profiler.ops_fn_map["excluded"] = lambda module, inputs, output: -1
    with pytest.raises(FormulaError, match=r"ops formula '<lambda>' for module '0' \(Linear\) "
                                           "returned int -1"):
        profiler.profile(net, x)


def test_exclude_from_ops_rejects_other_things() -> None:
    with pytest.raises(TypeError, match="exclude_from_ops"):
        ModuleProfiler(exclude_from_ops=["Linear"]).profile(nn.Linear(1, 1), torch.zeros(1))  # type: ignore[list-item]


def test_shapes_are_traced_through_dicts_none_and_nesting() -> None:
    profile = ModuleProfiler().profile(DictOutput(), torch.randn(2, 3))
    root = profile.records[0]
    assert root.output_shapes == {
        "y": (2, 2), "none": None, "nested": ((2, 2), [(1, 2), None]), "count": None,
    }
    assert root.output_dtypes == ("float32",)


def test_shapes_are_traced_through_namedtuples_and_dataclasses() -> None:
    profile = ModuleProfiler().profile(StructuredOutputs(), torch.randn(2, 4))
    assert profile.calls("split")[0].output_shapes == ((2, 2), (2, 2))
    assert profile.records[0].output_shapes == {"logits": (2, 5), "hidden": ((2, 2),)}


def test_kwargs_are_seen_by_records_and_formulas() -> None:
    model, example = ODD_MODELS["kwargs_only"]()
    profile = ModuleProfiler().profile(model, example)
    root = profile.records[0]
    assert root.input_shapes == ({"x": (2, 3), "scale": None},)
    proj = profile.calls("proj")[0]
    # called as proj(input=x): the legacy input_size still finds the tensor
    assert proj.input_size == (2, 3)


def test_tuple_input_is_unpacked_and_non_tensor_args_are_fine() -> None:
    model, example = ODD_MODELS["non_tensor_args"]()
    profile = ModuleProfiler().profile(model, example)
    assert len(profile.calls("lin")) == 2
    assert profile.records[0].input_shapes == ((2, 3), None, None)
    assert profile.calls("nothing")[0].output_shapes is None


def test_pred_fn_replaces_the_call() -> None:
    model = nn.Linear(3, 2)
    profile = ModuleProfiler().profile(model, torch.randn(4, 3), pred_fn=lambda x: model(x * 2))
    assert profile.records[0].output_shapes == (4, 2)


def test_tied_weights_are_counted_once_in_the_total() -> None:
    profile = ModuleProfiler().profile(TiedWeights(), torch.tensor([[1, 2]]))
    # one 10 x 4 weight shared by embed and head: 40 parameters, not 80
    assert profile.total_params == 40
    assert profile.module("head").params == 40


def test_not_a_module_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match=r"torch\.nn\.Module"):
        ModuleProfiler().profile(lambda x: x, torch.zeros(1))  # type: ignore[arg-type]


def test_lazy_modules_are_counted_after_they_materialise() -> None:
    model = nn.Sequential(nn.LazyLinear(4), nn.ReLU())
    profile = ModuleProfiler().profile(model, torch.randn(2, 3))
    # LazyLinear(4) on 3 features becomes Linear(3, 4): 3 * 4 + 4 = 16 parameters
    assert profile.total_params == 16
    assert profile.calls("0")[0].params == 16
    assert profile.module("").params == 16


def test_output_bytes_count_new_memory_only() -> None:
    class Views(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 8)
            self.relu = nn.ReLU(inplace=True)
            self.flat = nn.Flatten(0)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.flat(self.relu(self.lin(x)))

    profile = ModuleProfiler().profile(Views(), torch.randn(3, 4))
    # Linear allocates a new 3 x 8 float32 result: 24 * 4 = 96 bytes
    assert profile.calls("lin")[0].output_bytes == 96
    # in-place ReLU and the Flatten view reuse their input's memory: 0 bytes
    assert profile.calls("relu")[0].output_bytes == 0
    assert profile.calls("flat")[0].output_bytes == 0
    # the root's output is a view of memory allocated inside it: new relative to its input
    assert profile.records[0].output_bytes == 96


def test_operators_are_counted_inside_children_of_formula_containers() -> None:
    class Residual(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.lin(x)

    # nn.Sequential has a formula (0 own ops); the Residual blocks inside it do not, so their
    # own residual add is counted from the aten.add operator: 2 * 4 = 8 adds per block
    model = nn.Sequential(Residual(), Residual())
    profile = ModuleProfiler().profile(model, torch.randn(2, 4))
    blocks = [r for r in profile.records if r.type_name == "Residual"]
    assert [(r.self_ops, r.ops_source) for r in blocks] == [(8, "operator"), (8, "operator")]
    # Linear(4, 4) on 2 rows: 2 * 4 * (2 * 4) = 64 ops each; total 2 * (64 + 8) = 144
    assert profile.total_ops == 144 and profile.complete


def test_compiled_module_is_profiled_through_its_original_with_paths_unchanged() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    compiled = torch.compile(model)
    profile = ModuleProfiler().profile(compiled, torch.randn(2, 4))
    assert [r.path for r in profile.records] == ["", "0", "1"]
    # Linear(4, 4) on 2 rows: 2 * 4 * 8 = 64; ReLU 8
    assert profile.total_ops == 72
    assert "0" in ModuleProfiler().count_params(compiled)


@pytest.mark.parametrize("where", ["model", "submodule"])
def test_a_model_compiled_in_place_is_counted_eagerly_and_its_compile_left_alone(
        where: str) -> None:
    """The pass's hooks would run inside the user's compiled code: Dynamo would trace them,
    break the graph at each and compile the pieces (the counting code's functions too)."""
    # compiled code of earlier tests (nn.Sequential.forward's, Linear's) counts towards
    # Dynamo's recompile limit, past which it runs eagerly and compiles nothing
    torch._dynamo.reset()
    graphs: list[int] = []

    def backend(graph: torch.fx.GraphModule, example_inputs: list[torch.Tensor]
                ) -> Callable[..., object]:
        graphs.append(len(graph.graph.nodes))
        return graph.forward

    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    (model if where == "model" else model[0]).compile(backend=backend)
    x = torch.randn(2, 4)
    model(x)
    if not graphs:  # a torch whose Dynamo is off here (seen on one GPU host's torch 2.11)
        pytest.skip("torch.compile compiles nothing in this environment")
    assert len(graphs) == 1  # the user's own compile
    profile = ModuleProfiler().profile(model, x, backward=True)
    # Linear(4, 4) on 2 rows: 2 * 4 * 8 = 64; ReLU 8
    assert profile.total_ops == 72 and [r.path for r in profile.records] == ["", "0", "1"]
    # backward: weight gradient 2 * 4 * 4 = 32 MACs (the input needs none)
    assert profile.total_backward_macs == 32
    assert len(graphs) == 1  # nothing compiled for the pass
    model(x)
    assert len(graphs) == 1  # and the user's compiled graph still serves their calls


def test_a_model_partly_on_the_meta_device_fails_with_a_hint() -> None:
    """accelerate's ``init_empty_weights()`` puts parameters on meta and leaves buffers on the
    CPU: the model cannot run on either device, and the error says why."""
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4))
    model[1].to_empty(device="cpu")  # the buffers (and weight) where init_empty_weights has them
    model[1].weight, model[1].bias = (nn.Parameter(torch.empty(4, device="meta"))
                                      for _ in range(2))
    with pytest.raises(ProfilingError, match=r"module '1' \(BatchNorm1d\).*hint: the model "
                                             r"holds .* on the meta device and others on cpu"):
        ModuleProfiler().profile(model, torch.randn(2, 4, device="meta"))


def test_torchscript_module_gives_a_clear_error() -> None:
    scripted = torch.jit.script(nn.Sequential(nn.Linear(4, 4)))
    with pytest.raises(ProfilingError, match="TorchScript"):
        ModuleProfiler().profile(scripted, torch.randn(2, 4))
    assert ModuleProfiler().count_params(scripted)["__root__"]["trainable_params"] == 20


def test_strict_raises_when_an_operator_has_no_formula() -> None:
    class Odd(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            # no operator formula: a recurrence of n steps per element, n read from the data
            return torch.special.chebyshev_polynomial_t(x, 3)

    profile = ModuleProfiler().profile(Odd(), torch.rand(3) + 2)
    assert profile.unsupported_ops == {"aten.special_chebyshev_polynomial_t": 1}
    assert not profile.complete
    assert "" in profile.unsupported
    with pytest.raises(ProfilingError, match="special_chebyshev_polynomial_t"):
        ModuleProfiler().profile(Odd(), torch.rand(3) + 2, strict=True)


def test_records_are_the_constructor_s_records_and_stay_immutable() -> None:
    """Records are filled slot by slot for speed: each must equal the one the dataclass's own
    constructor builds from the same call, optional fields defaulted and extra columns in
    ``metrics``, and must stay frozen."""
    info = ModuleInfo(path="a.b", type_name="Conv2d", depth=2, params=7, self_params=5,
                      trainable_params=7, buffers=0, is_leaf=True)
    call = Call(3, 1, 2, nn.Identity(), "a.b", 1, None)
    counted = dict(input_shapes=((1, 2),), input_dtypes=("float32",), output_shapes=(1, 2),
                   output_dtypes=("float32",), output_bytes=8, input_size=(1, 2),
                   output_size=(1, 2), self_ops=4, self_macs=2, ops_source="formula",
                   ops=4, macs=2, complete=True)
    position = dict(index=3, parent=1, depth=2, path="a.b", type_name="Conv2d",
                    call_number=1, params=7, self_params=5)
    call.values.update(counted, self_backward_ops=6, my_column=1.5)
    record = build_record(call, info)
    assert record == CallRecord(**position, **counted, self_backward_ops=6,
                                metrics={"my_column": 1.5})
    assert type(record) is CallRecord  # filled as a subclass, handed out as the class itself
    assert record.self_backward_macs is None  # an optional field no listener wrote: its default
    with pytest.raises(dataclasses.FrozenInstanceError):
        record.self_ops = 5  # type: ignore[misc]
    del call.values["ops"]  # a required field missing: the constructor's own error
    with pytest.raises(TypeError, match="ops"):
        build_record(call, info)


def test_records_of_one_pass_with_different_value_layouts() -> None:
    """One pass's record builder remembers each layout of ``values`` (its keys in order): a
    call with the counting fields only, one with an extra column, the first layout again, and
    one missing a required field each get what the constructor gives."""
    info = ModuleInfo(path="a", type_name="Linear", depth=1, params=3, self_params=3,
                      trainable_params=3, buffers=0, is_leaf=True)
    counted = dict(input_shapes=((1, 2),), input_dtypes=("float32",), output_shapes=(1, 2),
                   output_dtypes=("float32",), output_bytes=8, input_size=(1, 2),
                   output_size=(1, 2), self_ops=4, self_macs=2, ops_source="formula",
                   ops=4, macs=2, complete=True)
    layouts: dict[tuple[str, ...], bool] = {}
    calls = [Call(i, None, 0, nn.Identity(), "a", i, None) for i in range(4)]
    calls[0].values.update(counted)
    calls[1].values.update(counted, my_column=2.5)
    calls[2].values.update(counted)
    calls[3].values.update(counted)
    del calls[3].values["macs"]
    records = [build_record(call, info, layouts) for call in calls[:3]]
    position = dict(parent=None, depth=0, path="a", type_name="Linear", params=3,
                    self_params=3)
    assert records == [
        CallRecord(index=0, call_number=0, **position, **counted),
        CallRecord(index=1, call_number=1, **position, **counted,
                   metrics={"my_column": 2.5}),
        CallRecord(index=2, call_number=2, **position, **counted)]
    assert len(layouts) == 2  # the first layout was worked out once
    with pytest.raises(TypeError, match="macs"):
        build_record(calls[3], info, layouts)


def test_a_profile_leaves_no_reference_cycle_behind() -> None:
    """The pass's runner, its calls and their values are freed when ``profile()`` returns,
    without the garbage collector (which a pass would otherwise leave hundreds of objects to,
    and which then runs inside the next forward)."""
    import gc
    import weakref

    from moduleprofiler.runner import Listener, PassRunner

    runners: list[weakref.ref[PassRunner]] = []

    class Watch(Listener):
        def start(self, runner: PassRunner) -> None:
            runners.append(weakref.ref(runner))

    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    enabled = gc.isenabled()
    gc.disable()
    try:
        profile = ModuleProfiler().profile(model, torch.ones(1, 2), listeners=[Watch()])
        assert runners and runners[0]() is None
    finally:
        if enabled:
            gc.enable()
    # Linear(2, 2) on one row: 2 * (2 * 2 - 1) + 2 = 8; ReLU 2
    assert profile.total_ops == 10
