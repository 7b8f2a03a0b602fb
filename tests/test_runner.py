"""The pass runner: event order, hooks released, the operator observer's switching, autograd
node ownership, and the lean per-call helpers giving the same values as the general ones."""

from __future__ import annotations

import inspect
import re
from typing import Any

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler, ProfilingError
from moduleprofiler.call import Call
from moduleprofiler.inputs import formula_inputs
from moduleprofiler.runner import Listener, PassContext, PassRunner
from moduleprofiler.shapes import dtypes_of, shape_tree
from moduleprofiler.storage import new_storage_bytes


def _dispatch_depth() -> int:
    return int(torch._C._len_torch_dispatch_stack())


def _hook_tables(module: nn.Module) -> list[int]:
    return [len(module._forward_pre_hooks), len(module._forward_pre_hooks_with_kwargs),
            len(module._forward_hooks), len(module._forward_hooks_with_kwargs),
            len(module._forward_hooks_always_called)]


class Recorder(Listener):
    """Writes down every event, and observes the operators of the modules it is given."""

    def __init__(self, observed: tuple[type, ...] = ()) -> None:
        self.events: list[tuple[str, str]] = []
        self.observed = observed

    def start(self, runner: PassRunner) -> None:
        self.events.append(("start", ""))

    def observe(self, module: nn.Module) -> bool:
        return isinstance(module, self.observed)

    def enter(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.events.append(("enter", call.path))

    def exit(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any],
             output: Any) -> None:
        self.events.append(("exit", call.path))

    def operator(self, call: Call | None, func: Any, args: tuple[Any, ...],
                 kwargs: dict[str, Any], out: Any) -> None:
        self.events.append(("op", f"{call.path if call else None}:{func.overloadpacket}"))

    def finish(self, runner: PassRunner) -> None:
        self.events.append(("finish", ""))


class Block(nn.Module):
    """Own work between two children: ``a`` (covered) runs, then the block adds, then ``b``."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(3, 3)
        self.b = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x) + 1)


def test_events_in_call_order_and_exits_in_reverse_listener_order() -> None:
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    first, second = Recorder(), Recorder()
    runner = PassRunner(model, [first, second])
    order: list[str] = []
    first.exit = lambda call, *rest: order.append(f"first:{call.path}")  # type: ignore[method-assign]
    second.exit = lambda call, *rest: order.append(f"second:{call.path}")  # type: ignore[method-assign]
    with torch.no_grad():
        runner.forward(lambda: model(torch.ones(1, 2)))
    runner.finish()
    assert first.events == [("start", ""), ("enter", ""), ("enter", "0"), ("enter", "1"),
                            ("finish", "")]
    # the last listener is the innermost: it exits first
    assert order == ["second:0", "first:0", "second:1", "first:1", "second:", "first:"]
    calls = [(c.index, c.parent, c.depth, c.path, c.call_number) for c in runner.calls]
    assert calls == [(0, None, 0, "", 0), (1, 0, 1, "0", 0), (2, 0, 1, "1", 0)]


def test_listeners_read_the_passs_operator_formulas_from_its_context() -> None:
    """A listener learns the pass's operator table from ``runner.context``, not by looking
    for the counting listener: a profile hands its profiler's ``operator_fn_map`` to every
    listener, and a bare runner hands none."""
    seen: list[Any] = []

    class Reader(Listener):
        def start(self, runner: PassRunner) -> None:
            seen.append(runner.context.operators)

    def mine(args: Any, kwargs: Any, out: Any) -> tuple[int, int]:
        return 1000, 10

    profiler = ModuleProfiler()
    profiler.operator_fn_map[torch.ops.aten.addmm] = mine
    profiler.profile(nn.Linear(2, 2), torch.ones(1, 2), listeners=[Reader()])
    assert seen[0][torch.ops.aten.addmm] is mine
    model = nn.Linear(2, 2)
    PassRunner(model, [Reader()]).forward(lambda: model(torch.ones(1, 2)))
    assert seen[1] is None
    table = {torch.ops.aten.addmm.default: None}
    PassRunner(model, [Reader()], context=PassContext(operators=table)).forward(
        lambda: model(torch.ones(1, 2)))
    assert seen[2] is table


def test_reused_module_gets_call_numbers() -> None:
    relu = nn.ReLU()
    model = nn.Sequential(nn.Linear(2, 2), relu, nn.Linear(2, 2), relu)
    runner = PassRunner(model, [Recorder()])
    runner.forward(lambda: model(torch.ones(1, 2)))
    assert [(c.path, c.call_number) for c in runner.calls] == [
        ("", 0), ("0", 0), ("1", 0), ("2", 0), ("1", 1)]


class _NoFastKernel(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError("no fast kernel")


class _BadBatch(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        raise ValueError("a bad batch")


class _Fallback(nn.Module):
    """Tries ``fast``, falls back to ``slow`` when it raises (caught inside the model), then
    runs ``last``."""

    def __init__(self, last: nn.Module) -> None:
        super().__init__()
        self.fast, self.slow, self.last = _NoFastKernel(), nn.Linear(2, 2), last

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        try:
            x = self.fast(x)
        except NotImplementedError:
            x = self.slow(x)
        return self.last(x)


def test_the_error_names_the_module_that_raised_not_one_whose_exception_was_caught() -> None:
    runner = PassRunner(model := _Fallback(_BadBatch()), [Recorder()])
    with pytest.raises(ProfilingError, match=r"^forward of module 'last' \(_BadBatch\) raised "
                                             r"ValueError: a bad batch"):
        runner.forward(lambda: model(torch.ones(1, 2)))
    assert runner.failed_path == "fast" and runner.raised_path() == "last"
    # the model caught the only exception: the forward finished, nothing escaped it
    runner = PassRunner(model := _Fallback(nn.ReLU()), [Recorder()])
    runner.forward(lambda: model(torch.ones(1, 2)))
    assert runner.failed_path == "fast" and runner.raised_path() is None


class _BackwardRecorder(Recorder):
    def backward_operator(self, owner: Call | None, func: Any, args: tuple[Any, ...],
                          kwargs: dict[str, Any], out: Any) -> None:
        self.events.append(("backward", owner.path if owner else ""))


def test_a_pass_run_meanwhile_is_not_heard_and_a_backward_leaves_the_forward_heard() -> None:
    model = nn.Linear(2, 2)
    watching = PassRunner(model, [Recorder()])  # a TrainingProfiler's, installed for long
    with watching.installed():
        watching.run(lambda: model(torch.ones(1, 2)))
        # another pass inside the block: its forward and backward are its own calls only
        other = PassRunner(model, [_BackwardRecorder()])
        output = other.forward(lambda: model(torch.ones(1, 2)))
        other.backward(output, lambda out: out.sum())
        assert [(c.path, c.call_number) for c in other.calls] == [("", 0)]
        # the watching runner's own backward hooks, installed and released inside its block
        watching.run(lambda: model(torch.ones(1, 2)))
    assert [(c.path, c.call_number) for c in watching.calls] == [("", 0), ("", 1)]
    backward = PassRunner(model, [_BackwardRecorder()])
    with backward.installed():
        output = backward.run(lambda: model(torch.ones(1, 2)))
        backward.backward(output, lambda out: out.sum())  # installs and releases hooks again
        backward.run(lambda: model(torch.ones(1, 2)))  # still heard after it
    assert [(c.path, c.call_number) for c in backward.calls] == [("", 0), ("", 1)]


def test_hooks_released_after_the_forward_and_after_an_exception() -> None:
    class Fails(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("boom")

    model = nn.Sequential(nn.Linear(2, 2), Fails())
    user = model[0].register_forward_hook(lambda *args: None)
    before = {name: _hook_tables(module) for name, module in model.named_modules()}
    runner = PassRunner(model, [Recorder(observed=(nn.Sequential,))])
    with pytest.raises(ProfilingError, match="'1' \\(Fails\\)"):
        runner.forward(lambda: model(torch.ones(1, 2)))
    assert runner.failed_path == "1"
    assert {name: _hook_tables(module) for name, module in model.named_modules()} == before
    assert _dispatch_depth() == 0
    ModuleProfiler().profile(model[0], torch.ones(1, 2))
    assert {name: _hook_tables(module) for name, module in model.named_modules()} == before
    user.remove()


def test_pre_hook_takes_keyword_arguments_only_for_a_listener_that_reads_them() -> None:
    class Scaled(nn.Module):
        def forward(self, x: torch.Tensor, *, scale: float = 1.0) -> torch.Tensor:
            return x * scale

    class Exits(Listener):
        """Reads nothing at a call's start."""

        def exit(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any],
                 output: Any) -> None:
            call.values["kwargs"] = dict(kwargs)

    class Enters(Exits):
        def enter(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
            call.values["entered"] = dict(kwargs)

    model = Scaled()
    for listener, tables in ((Exits(), [1, 0, 1, 1, 1]), (Enters(), [1, 1, 1, 1, 1])):
        runner = PassRunner(model, [listener])
        seen: list[list[int]] = []
        with runner.installed():
            seen.append(_hook_tables(model))
            output = model(torch.ones(2), scale=3.0)
        assert seen == [tables]
        assert output.tolist() == [3.0, 3.0]
        assert runner.calls[0].values["kwargs"] == {"scale": 3.0}
        assert runner.calls[0].values.get("entered", {"scale": 3.0}) == {"scale": 3.0}
        assert _hook_tables(model) == [0, 0, 0, 0, 0]


def test_user_hooks_run_before_ours_as_if_registered_through_torch() -> None:
    model = nn.Sequential(nn.Linear(2, 2))
    seen: list[tuple[int, ...]] = []

    def double(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
        return (args[0].repeat(2, 1),)  # the runner sees the arguments after user hooks

    model[0].register_forward_pre_hook(double)
    recorder = Recorder()
    recorder.enter = lambda call, args, kwargs: seen.append(tuple(args[0].shape))  # type: ignore[method-assign]
    PassRunner(model, [recorder]).forward(lambda: model(torch.ones(1, 2)))
    assert seen == [(1, 2), (2, 2)]


def test_a_module_overriding_hook_registration_is_hooked_through_its_methods() -> None:
    registered: list[str] = []

    class Guarded(nn.Linear):
        def register_forward_pre_hook(self, *args: Any, **kwargs: Any) -> Any:
            registered.append("pre")
            return super().register_forward_pre_hook(*args, **kwargs)

        def register_forward_hook(self, *args: Any, **kwargs: Any) -> Any:
            registered.append("post")
            return super().register_forward_hook(*args, **kwargs)

    model = nn.Sequential(Guarded(2, 2))
    profile = ModuleProfiler().profile(model, torch.ones(1, 2))
    assert registered == ["pre", "post"]
    assert [r.path for r in profile.records] == ["", "0"]
    assert _hook_tables(model[0]) == [0, 0, 0, 0, 0]


def test_observer_on_only_inside_observed_calls() -> None:
    model = Block()
    recorder = Recorder(observed=(Block,))
    runner = PassRunner(model, [recorder])
    depths: list[int] = []

    def exit_(call: Call, args: tuple[Any, ...], kwargs: dict[str, Any], output: Any) -> None:
        depths.append(_dispatch_depth())
        output.sum()  # a listener's own tensor work

    recorder.exit = exit_  # type: ignore[method-assign]
    with torch.no_grad():
        runner.forward(lambda: model(torch.ones(1, 3)))
    ops = [event for kind, event in recorder.events if kind == "op"]
    # the Linear's own operators are not observed; the block's add is, after the Linear
    # returned; the listener's exit work is never reported: the mode is off at the children's
    # exits and on the stack but muted at the block's
    assert ops == [":aten.add"]
    assert depths == [0, 0, 1]
    assert _dispatch_depth() == 0


def test_observer_switches_only_when_the_state_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    import moduleprofiler.dispatch as dispatch

    pushes: list[int] = []
    original = dispatch._push_mode
    monkeypatch.setattr(dispatch, "_push_mode", lambda mode: (pushes.append(1), original(mode)))
    relu = nn.ReLU()
    model = nn.Sequential(Block(), Block(), relu, relu)
    recorder = Recorder(observed=(Block,))
    with torch.no_grad():
        PassRunner(model, [recorder]).forward(lambda: model(torch.ones(1, 3)))
    ops = [event for kind, event in recorder.events if kind == "op"]
    assert ops == ["0:aten.add", "1:aten.add"]
    # entered once (``__enter__``, not counted here), pushed back after each child of an
    # observed block (two per block), when the second block starts and at the end (leaving the
    # mode pops it); the Sequential's own calls, its ReLU calls and the exits into it change
    # nothing, so they switch nothing
    assert len(pushes) == 6
    assert _dispatch_depth() == 0


def test_owner_of_node() -> None:
    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(3, 3)
            self.act = nn.ReLU(inplace=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.linear(x)
            y = self.act(y)  # in place: the node is created inside act's call
            y = self.linear(y)  # the same module again: a second call
            return y * 2  # created by Net itself, outside every child

    class Nodes(Listener):
        wants_nodes = True

        def __init__(self) -> None:
            self.nodes: list[tuple[str, int, Any]] = []

        def exit(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any],
                 output: Any) -> None:
            self.nodes.append((call.path, call.call_number, output.grad_fn))

    model = Net()
    listener = Nodes()
    runner = PassRunner(model, [listener])
    x = torch.ones(1, 3, requires_grad=True)
    out = runner.forward(lambda: model(x))
    outside = out.sum()  # created after every call
    by_call = {(call.path, call.call_number): call for call in runner.calls}
    for path, number, node in listener.nodes:
        assert runner.owner_of_node(node) is by_call[(path, number)]
    assert runner.owner_of_node(outside.grad_fn) is None
    assert runner.owner_of_node(None) is None
    assert [(path, number) for path, number, _ in listener.nodes] == [
        ("linear", 0), ("act", 0), ("linear", 1), ("", 0)]


# -- the hot path's helpers against the general ones ------------------------------------------
def test_formula_inputs_bind_once_per_call_pattern() -> None:
    class Varargs(nn.Module):
        def forward(self, x: Any, *rest: Any, y: Any = 3, z: Any, **extra: Any) -> Any:
            return x

    class PositionalOnly(nn.Module):
        def forward(self, a: Any, b: Any = 2, /, c: Any = 4, *, d: Any = 5) -> Any:
            return a

    def reference(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        signature = inspect.signature(type(module).forward)
        try:
            bound = signature.bind(module, *args, **kwargs)
        except TypeError:
            return args + tuple(kwargs.values())
        parameters = list(signature.parameters.values())[1:]
        last = max((i for i, p in enumerate(parameters) if p.name in bound.arguments),
                   default=-1)
        merged: list[Any] = []
        for parameter in parameters[: last + 1]:
            if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
                merged.extend(bound.arguments.get(parameter.name, ()))
            elif parameter.kind is not inspect.Parameter.VAR_KEYWORD:
                merged.append(bound.arguments.get(
                    parameter.name, None if parameter.default is inspect.Parameter.empty
                    else parameter.default))
        return tuple(merged)

    t = torch.ones(2, 1, 4)
    mha = nn.MultiheadAttention(4, 2)
    cases = [
        (mha, (t, t, t), {"need_weights": False}), (mha, (t,), {"key": t, "value": t}),
        (mha, (), {"query": t, "key": t, "value": t, "attn_mask": None}),
        (nn.Linear(4, 4), (), {"input": t}), (nn.Linear(4, 4), (t,), {"input": t}),
        (nn.Linear(4, 4), (t,), {"bogus": 1}), (Varargs(), (1, 2, 3), {"z": 9}),
        (Varargs(), (1,), {"z": 9, "q": 1}), (Varargs(), (1,), {"q": 1}),
        (PositionalOnly(), (1,), {"c": 3}), (PositionalOnly(), (1, 2), {"d": 7}),
        (PositionalOnly(), (), {"a": 1}),
    ]
    for module, args, kwargs in cases * 2:  # the second time from the cached plan
        got, expected = formula_inputs(module, args, kwargs), reference(module, args, kwargs)
        assert len(got) == len(expected)
        assert all(a is b for a, b in zip(got, expected)), (type(module).__name__, args, kwargs)
    assert formula_inputs(mha, (t,), {}) == (t,)


def test_output_bytes_of_one_tensor() -> None:
    x = torch.ones(4, 4)
    weight = nn.Parameter(torch.ones(4))
    fresh = x + 1
    assert new_storage_bytes(fresh, (x,), [weight]) == fresh.untyped_storage().nbytes()
    assert new_storage_bytes(x, (x,), []) == 0  # in place: the input itself
    assert new_storage_bytes(x[1:].view(-1), (x,), []) == 0  # a view of the input
    assert new_storage_bytes(weight.detach(), (x,), [weight]) == 0  # the module's own weight
    assert new_storage_bytes(x[0], ((1, [x]),), {}, []) == 0  # nested in the arguments
    assert new_storage_bytes(fresh, (3, None, "s"), {"k": x}, []) == fresh.nbytes
    meta = torch.empty(8, device="meta")
    assert new_storage_bytes(meta, (meta[:2],), []) == 0
    assert new_storage_bytes(meta * 2, (meta,), []) == 32


def test_one_tensor_calls_record_what_the_general_path_computes() -> None:
    class Keyword(nn.Module):
        def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
            return x * scale

    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(inplace=True), Keyword())
    x = torch.ones(2, 3)
    records = ModuleProfiler().profile(model, x).records
    for record in records[1:]:  # the children: one tensor in, one out
        assert record.input_shapes == shape_tree((torch.ones(record.input_size),))
        assert record.input_dtypes == dtypes_of((x,)) == ("float32",)
        assert record.output_shapes == record.output_size == (2, 4)
        assert type(record.input_shapes) is tuple and type(record.output_shapes) is tuple
    assert [r.output_bytes for r in records] == [32, 32, 0, 32]


def test_one_tensor_calls_returning_their_own_weight_or_buffer_allocate_nothing() -> None:
    class OwnWeight(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(3))
            self.register_buffer("scale", torch.ones(3))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.sum() > 0:
                return self.weight.detach()  # the parameter's storage
            return self.scale[:2]  # a view of the buffer's storage

    model = OwnWeight()
    assert ModuleProfiler().profile(model, torch.ones(3)).records[0].output_bytes == 0
    assert ModuleProfiler().profile(model, -torch.ones(3)).records[0].output_bytes == 0
    # a fresh 2 x 3 float32 output: 24 bytes
    assert ModuleProfiler().profile(nn.ReLU(), torch.ones(2, 3)).records[0].output_bytes == 24


def test_observes_all_answers_both_questions() -> None:
    class Everything(Listener):
        observes_all = True

    # the default listener wants no operator; one that observes all wants every one
    assert not Listener().observe(nn.ReLU()) and not Listener().observe_outside()
    assert Everything().observe(nn.ReLU()) and Everything().observe_outside()


class _Checkpointing(nn.Module):
    """``b(checkpoint(a, x))`` with ``a`` a block of two linears around a ReLU."""

    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.a = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))
        self.b = nn.Linear(4, 2)
        self.reentrant = reentrant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.utils.checkpoint.checkpoint(self.a, x,
                                                        use_reentrant=self.reentrant))


@pytest.mark.parametrize("reentrant", [True, False])
def test_a_checkpoints_recomputation_in_the_backward_is_no_new_call(reentrant: bool) -> None:
    """With the hooks still installed (a training loop under a live profiler), the backward
    reruns the checkpointed block: those module calls are the backward's work, never new forward
    calls, and no listener hears of them."""
    model = _Checkpointing(reentrant)
    recorder = Recorder()
    runner = PassRunner(model, [recorder])
    x = torch.randn(3, 4, requires_grad=True)
    with runner.installed():
        out = runner.run(lambda: model(x))
        forward_events = list(recorder.events)
        out.sum().backward()
    runner.finish()
    assert [call.path for call in runner.calls] == ["", "a", "a.0", "a.1", "a.2", "b"]
    # the recorder heard the forward's six enters, then nothing before the pass's end
    assert recorder.events == [*forward_events, ("finish", "")]
    assert [path for kind, path in forward_events if kind == "enter"] == [
        "", "a", "a.0", "a.1", "a.2", "b"]
    # both kinds rerun a and its three children (the non-reentrant one stops its rerun by
    # raising inside it once it holds what the backward needs: the hooks unwind all the same)
    assert runner.reruns.count == 4
    assert x.grad is not None and all(p.grad is not None for p in model.parameters())


class _Raises(Listener):
    """Raises at the start or the end of every ``nn.Linear`` call."""

    def __init__(self, moment: str) -> None:
        self.moment = moment

    def enter(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self.moment == "start" and isinstance(call.module, nn.Linear):
            raise KeyError("listener bug")

    def exit(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any],
             output: Any) -> None:
        if self.moment == "end" and isinstance(call.module, nn.Linear):
            raise KeyError("listener bug")


@pytest.mark.parametrize("moment", ["start", "end"])
def test_a_listener_that_raises_is_named_with_the_call_it_raised_in(moment: str) -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU())
    with pytest.raises(ProfilingError) as raised:
        ModuleProfiler().profile(model, torch.randn(2, 3), listeners=[_Raises(moment)])
    # the Linear's call, not its caller's forward (the Sequential's exit hook sees the
    # exception next)
    assert str(raised.value) == (
        f"listener _Raises raised KeyError at the {moment} of the call of module '0' "
        "(Linear): 'listener bug'")
    assert raised.value.path == "0"
    assert isinstance(raised.value.__cause__, KeyError)
    assert all(_hook_tables(module) == [0] * 5 for module in model.modules())


def test_a_model_too_deep_for_the_hooked_stack_says_how_to_profile_it() -> None:
    import sys

    from moduleprofiler import Profiler
    from moduleprofiler.errors import ProfilingError

    # 200 Sequentials around a Linear: the bare forward fits Python's default limit of 1,000
    # frames, the hooked one does not on Python 3.11; the error named the module and
    # RecursionError alone
    model: nn.Module = nn.Linear(4, 4)
    for _ in range(200):
        model = nn.Sequential(model)
    x = torch.randn(2, 4)
    limit = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(1_000)
        model(x)
        try:
            Profiler().profile(model, x)
        except ProfilingError as error:
            assert re.search(r"raised RecursionError: .*the model nests 200 modules deep.*"
                             r"limit is 1000: raise it \(sys.setrecursionlimit\(4000\)\)",
                             str(error), re.S), str(error)
            fits = False
        else:
            fits = True
        # the advice works: the Linear's 2 rows x 4 x 4 = 32 MACs (the Sequentials add none)
        sys.setrecursionlimit(4_000)
        assert Profiler().profile(model, x).total_macs == 2 * 4 * 4
    finally:
        sys.setrecursionlimit(limit)
    if fits:  # Python 3.12 counts the frames otherwise (the GPU machine's): nothing to say
        pytest.skip(f"Python {sys.version.split()[0]} runs the hooked forward within the limit "
                    "that the bare one fits")
