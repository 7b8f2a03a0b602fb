"""Bad arguments are refused at the boundary with a typed error naming the argument; formula
results that are not counts are refused naming the module and the formula; work that cannot
be hooked (TorchScript children) is still counted, with a note."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from moduleprofiler import (
    FormulaError,
    Listener,
    ModuleProfiler,
    Profiler,
    TimingOptions,
    memory,
    timing,
)
from moduleprofiler.errors import RegistryError
from moduleprofiler.operators import register_operator
from moduleprofiler.utils import realtime_factor
from tests.fixtures.state import assert_unchanged, snapshot

X = torch.randn(2, 4)
FAST = {"num_iters": 3, "drop_first": 1}


def model() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 3), nn.ReLU())


def entry_points(module: Any, pred_fn: Any = None) -> dict[str, Callable[[], Any]]:
    """Every public pass of a profiler, of the front door and of the engines' own functions
    (which are the one place that checks them), called with ``module`` and ``pred_fn``."""
    p, front = ModuleProfiler(), Profiler()
    fast = TimingOptions(**FAST)
    return {
        "Profiler.time_modules": lambda: front.time_modules(module, X, fast, pred_fn=pred_fn),
        "Profiler.benchmark": lambda: front.benchmark(module, X, fast, pred_fn=pred_fn),
        "Profiler.train_step_times": lambda: front.train_step_times(module, X, fast,
                                                                    pred_fn=pred_fn),
        "timing.time_modules": lambda: timing.time_modules(module, X, pred_fn=pred_fn, **FAST),
        "timing.benchmark": lambda: timing.benchmark(module, X, pred_fn=pred_fn, **FAST),
        "timing.train_step_times": lambda: timing.train_step_times(module, X, pred_fn=pred_fn,
                                                                   **FAST),
        "memory.measure_memory": lambda: memory.measure_memory(module, X, pred_fn=pred_fn),
        "profile": lambda: p.profile(module, X, pred_fn=pred_fn),
        "trace_io_sizes": lambda: p.trace_io_sizes(module, X, pred_fn=pred_fn),
        "estimate_ops": lambda: p.estimate_ops(module, X, pred_fn=pred_fn),
        "estimate_ops_df": lambda: p.estimate_ops_df(module, X, pred_fn=pred_fn),
        "estimate_inference_time": lambda: p.estimate_inference_time(
            module, X, pred_fn=pred_fn, **FAST),
        "estimate_total_inference_time": lambda: p.estimate_total_inference_time(
            module, X, pred_fn=pred_fn, **FAST),
        "time_modules": lambda: p.time_modules(module, X, pred_fn=pred_fn, **FAST),
        "benchmark": lambda: p.benchmark(module, X, pred_fn=pred_fn, **FAST),
        "train_step_times": lambda: p.train_step_times(module, X, pred_fn=pred_fn, **FAST),
        "measure_memory": lambda: p.measure_memory(module, X, pred_fn=pred_fn),
    }


NOT_MODULES = {"function": lambda x: x, "None": None, "tensor": torch.zeros(2)}


@pytest.mark.parametrize("kind", sorted(NOT_MODULES))
@pytest.mark.parametrize("entry", sorted(entry_points(None)))
def test_a_module_that_is_not_an_nn_module_is_refused(entry: str, kind: str) -> None:
    with pytest.raises(TypeError, match=r"module must be a torch\.nn\.Module, got"):
        entry_points(NOT_MODULES[kind])[entry]()


@pytest.mark.parametrize("kind", sorted(NOT_MODULES))
def test_count_params_and_parameter_memory_refuse_non_modules(kind: str) -> None:
    with pytest.raises(TypeError, match=r"module must be a torch\.nn\.Module"):
        ModuleProfiler().count_params(NOT_MODULES[kind])
    with pytest.raises(TypeError, match=r"module must be a torch\.nn\.Module"):
        ModuleProfiler().parameter_memory_df(NOT_MODULES[kind])


def test_a_function_given_as_module_gets_a_hint() -> None:
    with pytest.raises(TypeError, match=r"the function <lambda>.*pred_fn"):
        ModuleProfiler().profile(lambda x: x, X)  # type: ignore[arg-type]


def test_an_exported_program_given_as_module_gets_its_own_hint() -> None:
    program = torch.export.export(nn.Linear(4, 2), (torch.randn(3, 4),))
    with pytest.raises(TypeError, match=r"got ExportedProgram.*torch\.export\.unflatten"
                                        r"\(program\)") as info:
        ModuleProfiler().profile(program, torch.randn(3, 4))  # type: ignore[arg-type]
    assert "pred_fn" not in str(info.value)


@pytest.mark.parametrize("entry", sorted(entry_points(None)))
def test_a_pred_fn_that_is_not_callable_is_refused(entry: str) -> None:
    net = model()
    before = snapshot(net)
    with pytest.raises(TypeError, match=r"pred_fn must be a function that calls the module or "
                                        r"None, got str 'forward'"):
        entry_points(net, pred_fn="forward")[entry]()
    assert_unchanged(net, before)


def test_a_loss_fn_that_is_not_callable_is_refused() -> None:
    p = ModuleProfiler()
    for call in (lambda: p.profile(model(), X, backward=True, loss_fn=0.5),
                 lambda: p.measure_memory(model(), X, train=True, loss_fn=0.5),
                 lambda: p.train_step_times(model(), X, loss_fn=0.5, **FAST)):
        with pytest.raises(TypeError, match=r"loss_fn must be a function from the model's "
                                            r"output to a scalar tensor or None, got float 0\.5"):
            call()


def test_flags_must_be_booleans() -> None:
    # "False" is a non-empty string, so it would silently mean True
    with pytest.raises(TypeError, match="eval must be True or False, got str 'False'"):
        ModuleProfiler().profile(model(), X, eval="False")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="backward must be True or False"):
        ModuleProfiler().profile(model(), X, backward=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="percent must be True or False"):
        ModuleProfiler().count_params(model(), percent="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="eval must be True or False"):
        ModuleProfiler().time_modules(model(), X, eval=None, **FAST)
    with pytest.raises(TypeError, match="eval must be True or False"):
        timing.benchmark(model(), X, eval=None, **FAST)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="restore must be True or False"):
        timing.train_step_times(model(), X, restore="no", **FAST)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="keep_output must be True or False"):
        memory.measure_memory(model(), X, keep_output=None)  # type: ignore[arg-type]


def test_listeners_must_be_listener_instances() -> None:
    p = ModuleProfiler()
    with pytest.raises(TypeError, match=r"got one Listener: pass listeners=\[listener\]"):
        p.profile(model(), X, listeners=Listener())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"listeners\[0\] .* \(an instance, not the class\)"):
        p.profile(model(), X, listeners=[Listener])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"listeners\[1\] must be a moduleprofiler.Listener"):
        p.profile(model(), X, listeners=[Listener(), print])  # type: ignore[list-item]
    assert p.profile(model(), X, listeners=(Listener(),)).total_ops > 0


def test_measure_memory_options_are_checked() -> None:
    p = ModuleProfiler()
    with pytest.raises(ValueError, match="emulate must be one of 'cuda', None; got str 'gpu'"):
        p.measure_memory(model(), X, emulate="gpu")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"device must be a str, a torch\.device or None"):
        p.measure_memory(model(), X, device=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="device='gpu0' is not a device torch knows"):
        p.measure_memory(model(), X, device="gpu0")
    with pytest.raises(TypeError, match=r"device must be a str, a torch\.device or None"):
        memory.measure_memory(model(), X, device=3)  # type: ignore[arg-type]


@pytest.mark.parametrize("verb", ["time_modules", "train_step_times", "benchmark"])
def test_a_timed_pass_names_a_device_torch_does_not_know(verb: str) -> None:
    with pytest.raises(ValueError, match="device='gpu0' is not a device torch knows"):
        getattr(ModuleProfiler(), verb)(model(), X, device="gpu0")


# -- the constructor's maps ----------------------------------------------------------------------
def ops(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> int:
    return 1


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"ops_fn_map": [(nn.Linear, ops)]}, TypeError,
     "ops_fn_map must be a mapping .* got list"),
    ({"macs_fn_map": ops}, TypeError, "macs_fn_map must be a mapping .* got the function ops"),
    ({"io_size_fn_map": "default"}, TypeError, "io_size_fn_map must be a mapping"),
    ({"ops_fn_map": {"Linear": ops}}, ValueError,
     "ops_fn_map has the string key 'Linear': string keys are 'default', 'excluded' or a "
     "dotted class name"),
    ({"ops_fn_map": {nn.Linear(2, 2): ops}}, ValueError, r"\(use its class\)"),
    ({"ops_fn_map": {int: ops}}, ValueError, "int, which is not a subclass of torch.nn.Module"),
    ({"ops_fn_map": {nn.Linear: 42}}, TypeError,
     r"ops_fn_map\[Linear\] must be a function \(module, inputs, output\), got int 42"),
    ({"operator_fn_map": {"mm": ops}}, ValueError,
     "operator_fn_map keys are operators such as torch.ops.aten.mm"),
    ({"operator_fn_map": {torch.ops.aten.mm: (1, 0)}}, TypeError,
     r"operator_fn_map\[aten.mm\] must be a function"),
    ({"exclude_from_ops": nn.Linear}, TypeError,
     "exclude_from_ops must be a list of module classes or module instances"),
    ({"exclude_from_ops": [nn.ReLU, "Linear"]}, TypeError,
     r"exclude_from_ops\[1\] is str 'Linear'"),
    ({"exclude_from_ops": [int]}, TypeError, r"exclude_from_ops\[0\] is the class int"),
    # the base class excluded every module, the root too: the pass counted nothing
    ({"exclude_from_ops": [nn.ReLU, nn.Module]}, RegistryError,
     r"exclude_from_ops\[1\] is torch.nn.Module, the base class of every module"),
    ({"verbose": "yes"}, TypeError, "verbose must be True or False"),
    ({"ts_fmt": None}, TypeError, "ts_fmt must be a str, got None"),
])
def test_constructor_checks_its_maps_and_options(kwargs: dict[str, Any], error: type,
                                                  message: str) -> None:
    with pytest.raises(error, match=message):
        ModuleProfiler(**kwargs)


def test_legacy_maps_with_default_keys_and_none_values_are_accepted() -> None:
    profiler = ModuleProfiler(ops_fn_map={nn.Linear: ops, "default": lambda m, i, o: None,
                                          "excluded": lambda m, i, o: None, nn.ReLU: None},
                              io_size_fn_map={"default": lambda m, i, o: (None, None)},
                              operator_fn_map={torch.ops.aten.relu: None})
    # one Linear call, ops 1 by the map above; ReLU's None entry means "no formula": its
    # operator (relu) is free in this operator map, so it counts 0
    assert profiler.profile(model(), X).total_ops == 1


def test_an_exclusion_of_the_base_class_added_after_construction_is_refused() -> None:
    profiler = ModuleProfiler()
    profiler.exclude_from_ops.append(nn.Module)
    with pytest.raises(RegistryError, match=r"exclude_from_ops\[0\] is torch.nn.Module"):
        profiler.profile(model(), X)


def test_maps_edited_after_construction_are_checked_by_the_next_pass() -> None:
    profiler = ModuleProfiler()
    profiler.ops_fn_map["Linear"] = ops  # a plain class name is never matched: refused
    with pytest.raises(ValueError, match="ops_fn_map has the string key 'Linear'"):
        profiler.profile(model(), X)
    del profiler.ops_fn_map["Linear"]
    profiler.macs_fn_map = None  # type: ignore[assignment]
    with pytest.raises(TypeError, match="macs_fn_map must be a mapping"):
        profiler.estimate_ops(model(), X)
    profiler.macs_fn_map = {}
    profiler.exclude_from_ops.append("ReLU")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"exclude_from_ops\[0\] is str 'ReLU'"):
        profiler.profile(model(), X)


# -- formula results ------------------------------------------------------------------------------
class Scale(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def scale_model() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 3), Scale())


@pytest.mark.parametrize(("value", "why"), [
    (2.5, "returned float 2.5: a count must be a whole number"),
    (-6, "returned int -6: a count cannot be negative"),
    (float("nan"), "returned float nan: a count must be finite"),
    (float("inf"), "returned float inf: a count must be finite"),
    (True, "returned bool True: a count is a number, not a bool"),
    (torch.ones(2), r"returned a Tensor of shape \(2,\): a count is one number"),
    ("six", "returned str 'six': a count is an int"),
    (np.float32(0.5), "returned float32 .*0.5.*: a count must be a whole number"),
])
def test_a_formula_result_that_is_not_a_count_is_refused(value: Any, why: str) -> None:
    def scale_ops(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> Any:
        return value

    profiler = ModuleProfiler()
    profiler.ops_fn_map[Scale] = scale_ops
    net = scale_model()
    before = snapshot(net)
    with pytest.raises(FormulaError, match="ops formula 'scale_ops' for module '1' "
                                           rf"\(Scale\) {why}") as info:
        profiler.profile(net, X)
    assert info.value.path == "1"
    assert_unchanged(net, before)


@pytest.mark.parametrize("value", [6, 6.0, torch.tensor(6), torch.tensor([6.0]), np.int64(6)])
def test_whole_numbers_in_any_form_are_counts(value: Any) -> None:
    profiler = ModuleProfiler()
    profiler.ops_fn_map[Scale] = lambda module, inputs, output: value
    profile = profiler.profile(scale_model(), X)
    # Linear: 2 rows * 3 outputs * (2 * 4) = 48; Scale: 6 as an int
    assert profile.calls("1")[0].self_ops == 6 and type(profile.calls("1")[0].self_ops) is int
    assert profile.total_ops == 54


def test_a_macs_formula_result_is_checked_too() -> None:
    profiler = ModuleProfiler()
    profiler.macs_fn_map[nn.Linear] = lambda module, inputs, output: -1
    with pytest.raises(FormulaError, match=r"macs formula '<lambda>' for module '0' \(Linear\) "
                                           "returned int -1"):
        profiler.profile(scale_model(), X)


def test_an_operator_formula_result_is_checked() -> None:
    profiler = ModuleProfiler()
    profiler.operator_fn_map[torch.ops.aten.mul] = lambda args, kwargs, out: (1.5, 0)
    with pytest.raises(FormulaError, match=r"operator formula for aten.mul.Tensor \(ops\) for "
                                           r"module '1' \(Scale\) returned float 1.5"):
        profiler.profile(scale_model(), X)  # Scale has no module formula: its mul is counted
    profiler.operator_fn_map[torch.ops.aten.mul] = lambda args, kwargs, out: (6, None)
    with pytest.raises(FormulaError, match="returned None for macs in module '1'"):
        profiler.profile(scale_model(), X)
    net = nn.Linear(4, 3)
    with pytest.raises(FormulaError, match=r"operator formula for aten\.mul\.Tensor returned "
                                           r"None for macs outside every module call"):
        profiler.profile(net, X, pred_fn=lambda x: net(x) * 2)  # the mul runs in pred_fn


@pytest.mark.parametrize(("value", "kind"), [
    (6, "int 6"), (None, "None"), ((6, 0, 0), r"tuple \(6, 0, 0\)"),
])
def test_an_operator_result_that_is_not_a_pair_is_refused_saying_what_it_returned(
        value: Any, kind: str) -> None:
    # the message said "raised TypeError: cannot unpack non-iterable int object"
    profiler = ModuleProfiler()
    profiler.operator_fn_map[torch.ops.aten.mul] = lambda args, kwargs, out: value
    with pytest.raises(FormulaError, match=rf"operator formula for aten\.mul\.Tensor in module "
                                           rf"'1' \(Scale\) returned {kind}: an operator "
                                           r"formula returns \(ops, macs\)") as info:
        profiler.profile(scale_model(), X)
    assert info.value.path == "1"
    profiler.operator_fn_map[torch.ops.aten.mul] = lambda args, kwargs, out: [6, 0]
    assert profiler.profile(scale_model(), X).calls("1")[0].self_ops == 6  # a list of two


@pytest.mark.parametrize(("value", "kind"), [
    (5, "int 5"), (None, "None"), (((2, 4),), r"tuple \(\(2, 4\),\)"),
    ("ab", "str 'ab'"),
])
def test_an_io_size_result_that_is_not_a_pair_is_refused(value: Any, kind: str) -> None:
    def linear_io(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> Any:
        return value

    profiler = ModuleProfiler()
    profiler.io_size_fn_map[nn.Linear] = linear_io
    net = model()
    before = snapshot(net)
    with pytest.raises(FormulaError, match=rf"io-size function 'linear_io' for module '0' "
                                           rf"\(Linear\) returned {kind}: an io-size function "
                                           r"returns a pair \(input_size, output_size\)") as info:
        profiler.trace_io_sizes(net, X)
    assert info.value.path == "0"
    assert_unchanged(net, before)
    # a pair, as a tuple or a list, is the io sizes as given
    profiler.io_size_fn_map[nn.Linear] = lambda module, inputs, output: ["in", "out"]
    sizes = profiler.trace_io_sizes(net, X)["0"]
    assert (sizes["input_size"], sizes["output_size"]) == ("in", "out")


def test_a_backward_operator_formula_result_is_checked() -> None:
    profiler = ModuleProfiler()
    profiler.operator_fn_map[torch.ops.aten.mm] = lambda args, kwargs, out: (-1, 0)
    with pytest.raises(FormulaError, match=r"backward operator formula for aten.mm.default "
                                           r"\(ops\) for module '0' \(Linear\) returned int -1"):
        profiler.profile(nn.Sequential(nn.Linear(4, 3)), X, backward=True)


# -- TorchScript children -------------------------------------------------------------------------
def test_a_scripted_child_is_counted_in_its_eager_parent() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.script is deprecated
        scripted = torch.jit.script(nn.Linear(8, 3))
    net = nn.Sequential(nn.Linear(4, 8), scripted)
    before = snapshot(net)
    profile = ModuleProfiler().profile(net, X)
    # 0: 2 rows * 8 outputs * (2 * 4) = 128 ops, 2 * 8 * 4 = 64 MACs (its own formula)
    # 1: no hooks, its addmm runs inside the Sequential's call: 2 * 3 * (2 * 8) = 96 ops,
    #    2 * 3 * 8 = 48 MACs, counted by operator accounting in the parent
    assert {r.path: (r.self_ops, r.self_macs) for r in profile.records} == {
        "": (96, 48), "0": (128, 64)}
    assert profile.records[0].ops_source == "operator"
    assert profile.total_ops == 224 and profile.total_macs == 112 and profile.complete
    assert profile.unhooked == ("1",)
    assert "1" not in profile.uncalled
    assert ("note: modules that carry no hooks (TorchScript, or run inside compiled code): 1; "
            "their work is counted in the module that calls them"
            ) in profile.tree().to_text(width=0)
    assert_unchanged(net, before)


def test_a_scripted_child_without_operator_accounting_leaves_its_parent_unknown() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        net = nn.Sequential(nn.Linear(4, 8), torch.jit.script(nn.Linear(8, 3)))
    profile = ModuleProfiler().profile(net, X, operators=False)
    assert profile.records[0].self_ops is None  # the scripted work is not claimed to be 0
    assert profile.total_ops == 128 and profile.lower_bounds == ("ops", "macs", "flops")


def test_realtime_factor_refuses_a_zero_hop_or_time() -> None:
    with pytest.raises(ValueError, match="hop_size"):
        realtime_factor(2.0, 16000, 160, hop_size=0)
    with pytest.raises(ValueError, match="inference_time"):
        realtime_factor(0.0, 16000, 160)


def test_register_operator_refuses_what_is_not_a_function() -> None:
    with pytest.raises(TypeError, match="register_operator decorates a function"):
        register_operator(torch.ops.aten.special_zeta)(42)  # type: ignore[type-var]
