"""Timing a torch.compile'd model: the compiled clock books the compiled program's kernels to
modules (on the CPU, Inductor's kernel ranges stand in for the GPU's kernel records); under
another clock the eager original is timed, and the result says so."""

from __future__ import annotations

import gc
import types

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from moduleprofiler.codepaths import CodePathWarning
from moduleprofiler.core import Profiler
from moduleprofiler.errors import ProfilingError
from moduleprofiler.timing import TimingOptions, time_modules, train_step_times
from moduleprofiler.timing.clocks.compiled import CompiledClock, CompiledProgram
from tests.timing.helpers import no_hooks_left, residual_model

FAST = {"num_iters": 4, "drop_first": 1, "warmup_seconds": 0.0, "progress": False,
        "measure_overhead": False}


@pytest.fixture(scope="module")
def timed():
    model = residual_model()
    compiled = torch.compile(model)  # which marks the model itself (_is_torch_compile)
    before = {path: dict(vars(sub)) for path, sub in model.named_modules()}
    x = torch.randn(8, 16)
    clock = CompiledClock(torch.device("cpu"), CompiledProgram.of(compiled, x))
    timing = time_modules(compiled, x, clock=clock, **FAST)
    return model, before, clock, timing


def test_a_compiled_model_is_timed_compiled_per_module(timed):
    model, _, clock, timing = timed
    assert timing.clock == "compiled-kernels"
    # the records are the original module's calls: its paths, not "_orig_mod."'s
    assert tuple(info.path for info in timing.modules) == tuple(p for p, _ in
                                                                model.named_modules())
    frame = timing.to_df("module").set_index("module")
    # each Linear is one extern matrix product (addmm) of its own
    assert frame.loc["0.fc", "device_launches"] == 1
    assert frame.loc["2.fc", "device_launches"] == 1
    assert frame.loc["0.fc", "self_device_ms"] > 0 and frame.loc["2.fc", "self_device_ms"] > 0
    # Inductor fuses the first block's ReLU and residual add with the LayerNorm after it:
    # that kernel is the root's (their deepest common ancestor), and nothing is 0.act's or 1's
    assert frame.loc["0.act", "device_ms"] == 0 and frame.loc["1", "device_ms"] == 0
    crossing = [row for row in clock.fused_across() if {"0.act", "1"} <= set(row.fused_across)]
    assert len(crossing) == 1 and crossing[0].module == ""
    assert frame.loc["__root__", "self_device_ms"] > 0
    # one graph, no break: no hook was installed on what was compiled
    assert clock.graphs == 1 and not clock.break_reasons
    # each product's device kernel (on a CPU its host range) is named, over every traced
    # block the clock merged
    products = [row for row in clock.kernels() if row.name == "extern_kernels.addmm"]
    assert [row.device_kernels for row in products] == [("aten::addmm",)] * 2
    # every kernel of the compiled graph is booked to a module
    assert clock.coverage == pytest.approx(1.0)
    assert timing.timing.device_booked_ms == pytest.approx(timing.timing.device_total_ms)
    # the root's device time holds every module's own, iteration by iteration
    paths = [path for path, _ in model.named_modules()]
    own = [timing.samples(path, exclusive=True) for path in paths
           if timing.samples(path, exclusive=True).size]
    assert timing.samples("") == pytest.approx(sum(own))
    assert timing.iterations >= 2
    # the span from a module's first kernel to its last is not read: unknown, not zero
    assert "device_idle_share" not in frame or frame["device_idle_share"].isna().all()
    assert any("compiled program's kernels" in note for note in timing.warnings)


def test_the_models_latency_is_its_compiled_programs(timed):
    # summary()'s latency_ms was the eager module's hook-free median, beside device times
    # that are the compiled program's: the compiled model's latency is its compiled program's
    _, _, clock, timing = timed
    assert clock.plain  # the compiled program's iterations with no hook and no profiler
    compiled_ms = float(np.median([m["end"] - m["start"] for m in clock.plain])) / 1e6
    assert compiled_ms > 0
    assert timing.timing.compiled.latency_ms == pytest.approx(compiled_ms)
    assert timing.summary()["latency_ms"].iloc[0] == pytest.approx(compiled_ms)
    again = type(timing).from_json(timing.to_json())
    assert again.summary()["latency_ms"].iloc[0] == pytest.approx(compiled_ms)


def test_the_model_is_left_as_it_was(timed):
    model, before, _, _ = timed
    assert {path: dict(vars(sub)) for path, sub in model.named_modules()} == before
    assert model.training and not any(sub._forward_hooks or sub._forward_pre_hooks
                                      for sub in model.modules())


def test_a_clock_kept_after_its_pass_keeps_no_runner_alive(timed):
    # the clock's primer closed over the pass's runner (and so its listeners and the model's
    # hooked modules): a clock the user kept held them all after the pass was over
    from moduleprofiler.runner import PassRunner

    _, _, clock, _ = timed
    gc.collect()
    assert [obj for obj in _reachable(clock) if isinstance(obj, PassRunner)] == []


def _reachable(root: object, limit: int = 20_000) -> list[object]:
    """Every object reachable from ``root`` (classes and modules not followed)."""
    seen, queue, out = {id(root)}, [root], [root]
    while queue and len(out) < limit:
        obj = queue.pop()
        for ref in gc.get_referents(obj):
            if id(ref) in seen or isinstance(ref, (type, types.ModuleType)):
                continue
            seen.add(id(ref))
            out.append(ref)
            queue.append(ref)
    return out


def test_auto_and_profiler_time_a_compiled_wrapper_compiled():
    timing = Profiler().time_modules(torch.compile(residual_model()), torch.randn(8, 16),
                                     TimingOptions(**FAST))
    assert timing.clock == "compiled-kernels"
    assert timing.to_df("module").set_index("module").loc["2.fc", "device_launches"] == 1


def test_a_model_compiled_in_place_is_timed_compiled():
    model = residual_model()
    model.compile()
    own_compiled_call = model._compiled_call_impl
    timing = time_modules(model, torch.randn(8, 16), **FAST)
    assert timing.clock == "compiled-kernels"
    frame = timing.to_df("module").set_index("module")
    assert frame.loc["0.fc", "device_launches"] == 1
    assert model._compiled_call_impl is own_compiled_call
    assert not model._forward_hooks


def test_another_clock_times_the_eager_original_and_says_so():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    # torch.compile compiles lazily, on the first call: wrapping costs nothing here, and the
    # timing never calls the compiled graph
    compiled = torch.compile(model)
    with pytest.warns(CodePathWarning, match="original module run eagerly"):
        timing = time_modules(compiled, torch.randn(2, 4), clock="cpu", **FAST)
    assert timing.clock == "cpu-wall"
    # the eager original's tree: its paths, not the wrapper's "_orig_mod." ones
    assert tuple(info.path for info in timing.modules) == ("", "0", "1")
    assert any("torch.compile" in note for note in timing.warnings)
    assert not compiled._forward_hooks and not model[0]._forward_hooks


def test_the_compiled_clock_needs_a_compiled_model():
    with pytest.raises(ValueError, match="nothing in this model is compiled"):
        time_modules(nn.Linear(4, 4), torch.randn(2, 4), clock="compiled", **FAST)


def test_under_another_clock_a_submodule_compiled_in_place_is_refused_naming_it():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    model[0].compile()
    with pytest.raises(ValueError, match=r"'0' was compiled in place.*clock='auto'"):
        time_modules(model, torch.randn(2, 4), clock="cpu", **FAST)


@pytest.mark.parametrize("form", ["wrapper", "in place"])
def test_compiled_submodules_are_timed_compiled_and_the_rest_eagerly(form):
    model = residual_model()
    if form == "wrapper":
        model[2] = torch.compile(model[2])
        part = "2._orig_mod"
    else:
        model[2].compile()
        part = "2"
    before = {path: dict(vars(sub)) for path, sub in model.named_modules()}
    x = torch.randn(8, 16)
    clock = CompiledClock(torch.device("cpu"), CompiledProgram.of(model, x))
    timing = time_modules(model, x, clock=clock, **FAST)
    assert timing.clock == "compiled-kernels"
    assert tuple(info.path for info in timing.modules) == tuple(p for p, _ in
                                                                model.named_modules())
    frame = timing.to_df("module").set_index("module")
    # the compiled block: its Linear one extern addmm; its ReLU and residual add one fused
    # kernel, booked to the block (their deepest common ancestor)
    assert frame.loc[f"{part}.fc", "device_launches"] == 1
    assert frame.loc[part, "self_fused_kernels"] == 1
    assert frame.loc[part, "fused_across"] == f"{part}, {part}.act"
    assert frame.loc[f"{part}.act", "device_ms"] == 0
    # the eager block: one operator each for its Linear (aten::linear), its ReLU, and its own
    # residual add; the eager LayerNorm one (aten::layer_norm)
    assert frame.loc["0.fc", "device_launches"] == 1 and frame.loc["0.act", "device_launches"] == 1
    assert frame.loc["0", "device_launches"] == 3 and frame.loc["0", "self_device_ms"] > 0
    assert frame.loc["1", "device_launches"] == 1 and frame.loc["1", "device_ms"] > 0
    # the root: 3 (eager block) + 1 (LayerNorm) + 2 (compiled block) = 6
    assert frame.loc["__root__", "device_launches"] == 6
    assert clock.graphs == 1 and clock.coverage == pytest.approx(1.0)
    assert timing.timing.device_booked_ms == pytest.approx(timing.timing.device_total_ms)
    assert any("compiled submodules ('2')" in note for note in timing.warnings)
    assert {path: dict(vars(sub)) for path, sub in model.named_modules()} == before
    assert no_hooks_left(model)


def test_a_partly_compiled_models_latency_is_its_program_with_no_range():
    # the program the clock traces runs its eager modules inside range hooks: the latency's
    # iterations run the same program without them, and not the user's own compiled code
    # (which the pass would compile for its grad mode, in the user's cache)
    from torch._dynamo.utils import counters

    model = residual_model()
    model[2] = torch.compile(model[2])  # never called by the user
    ranged, plain = [], []

    def seen(module, args):
        if module is not model[0]:  # a shadow's call
            hooks = [hook.__qualname__ for hook in module._forward_pre_hooks.values()]
            (ranged if any("_ranged" in name for name in hooks) else plain).append(module)

    model[0].register_forward_pre_hook(seen)
    x = torch.randn(8, 16)
    before = counters["stats"]["unique_graphs"]
    clock = CompiledClock(torch.device("cpu"), CompiledProgram.of(model, x))
    timing = time_modules(model, x, clock=clock, **FAST)
    assert clock.plain and timing.timing.compiled.latency_ms is not None
    # the ranged program ran the first compiled call, the first traced iteration (not kept)
    # and the kept traced ones; the latency's kept iterations (and warm-up) the plain one
    assert len(ranged) == 2 + len(clock.traced)
    assert len(plain) >= len(clock.plain)
    assert counters["stats"]["unique_graphs"] - before == len(clock.program.recorder.graphs)


def test_auto_times_a_model_with_a_compiled_submodule_compiled():
    model = residual_model()
    model[0].compile()
    timing = time_modules(model, torch.randn(8, 16), **FAST)
    assert timing.clock == "compiled-kernels"
    assert timing.to_df("module").set_index("module").loc["0.fc", "device_launches"] == 1


def test_a_compiled_submodule_inside_a_compiled_model_books_its_own_modules():
    # torch.compile(model) whose block 2 is a torch.compile wrapper: its paths are
    # 2._orig_mod.fc... (named_modules()); its kernels were all booked to the wrapper 2
    model = residual_model()
    model[2] = torch.compile(model[2])
    timing = time_modules(torch.compile(model), torch.randn(8, 16), **FAST)
    frame = timing.to_df("module").set_index("module")
    # 2's Linear is one extern matrix product (addmm) of its own, as when compiled alone
    assert frame.loc["2._orig_mod.fc", "device_launches"] == 1
    assert frame.loc["2._orig_mod.fc", "self_device_ms"] > 0
    assert frame.loc["2", "self_device_ms"] == 0


def test_the_hooked_calls_run_a_compiled_submodule_inside_a_compiled_model_eagerly():
    # they called the user's compiled submodule, whose graphs Dynamo compiled again for the
    # hooks, beside the clock's own
    from torch._dynamo.utils import counters

    model = residual_model()
    model[2] = torch.compile(model[2])
    compiled, x = torch.compile(model), torch.randn(8, 16)
    compiled(x)  # the user's own graphs
    before = counters["stats"]["unique_graphs"]
    clock = CompiledClock(torch.device("cpu"), CompiledProgram.of(compiled, x))
    timing = time_modules(compiled, x, clock=clock, **FAST)
    assert counters["stats"]["unique_graphs"] - before == len(clock.program.recorder.graphs)
    assert timing.to_df("module").set_index("module").loc["2._orig_mod.fc", "host_ms"] > 0


def test_a_model_compiled_with_dynamic_shapes_is_timed_as_compiled(monkeypatch):
    # torch.compile(model, dynamic=True) runs kernels made for any batch size: the clock's
    # compile is the same program (it compiled static ones for the input's sizes before)
    from moduleprofiler.timing.compiled import capture

    traced = []
    record = capture.GraphRecorder.__call__

    def spy(self, gm, example_inputs):
        traced.append([node.meta["example_value"] for node in gm.graph.nodes
                       if node.op == "placeholder"])
        return record(self, gm, example_inputs)

    monkeypatch.setattr(capture.GraphRecorder, "__call__", spy)
    model = residual_model()
    compiled = torch.compile(model, dynamic=True)
    x = torch.randn(8, 16)
    clock = CompiledClock(torch.device("cpu"), CompiledProgram.of(compiled, x))
    timing = time_modules(compiled, x, clock=clock, **FAST)
    # Dynamo may trace the frame more than once (a restarted analysis); each graph it
    # compiled takes the batch size as a symbol, not 8
    assert traced
    for placeholders in traced:
        assert any(isinstance(value, torch.SymInt) for value in placeholders)
        inputs = [value for value in placeholders if isinstance(value, torch.Tensor)
                  and not isinstance(value, nn.Parameter) and value.dim() == 2]
        assert inputs and all(isinstance(value.shape[0], torch.SymInt) for value in inputs)
    # booked as a static one is: each Linear's product its own, every kernel to a module
    frame = timing.to_df("module").set_index("module")
    assert frame.loc["0.fc", "device_launches"] == 1 and frame.loc["2.fc", "device_launches"] == 1
    assert clock.coverage == pytest.approx(1.0) and clock.graphs == 1


class _Logs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 16)

    def forward(self, x):
        x = self.a(x)
        print(end="")  # Dynamo cannot trace print: the graph breaks here
        return self.b(self.b(x))  # b is called twice


@pytest.fixture(scope="module")
def broken():
    # after the graph break in the child, Dynamo runs the rest of nn.Sequential's forward
    # eagerly: the ReLU's operator runs outside every compiled graph
    model = nn.Sequential(_Logs(), nn.ReLU())
    compiled = torch.compile(model)
    x = torch.randn(8, 16)
    clock = CompiledClock(torch.device("cpu"), CompiledProgram.of(compiled, x))
    return clock, time_modules(compiled, x, clock=clock, **FAST)


def test_work_run_outside_the_compiled_graphs_is_said_not_dropped(broken):
    # it was booked nowhere, counted nowhere: "device time booked to modules: 100.0 %"
    clock, timing = broken
    assert clock.graphs == 2
    # the Linears' products, in the two graphs, are theirs; every graph kernel is booked
    frame = timing.to_df("module").set_index("module")
    assert frame.loc["0.a", "device_launches"] == 1 and frame.loc["0.b", "device_launches"] == 2
    assert clock.coverage == pytest.approx(1.0)
    # the ReLU's aten::relu is the time outside: the total holds it, the modules do not
    assert clock.booking.outside_ns > 0
    assert timing.timing.device_booked_ms < timing.timing.device_total_ms
    assert any("ran outside the compiled graphs" in note for note in timing.warnings)


def test_a_module_called_twice_has_its_kernel_time_on_its_first_call_and_none_on_the_next(
        broken):
    # a compiled graph knows modules, not calls: both products are the first call's; the
    # second call's device time is unknown (it read 0 ms), its host time its own
    _, timing = broken
    calls = timing.to_df().set_index(["module", "call_number"])
    first, second = calls.loc[("0.b", 0)], calls.loc[("0.b", 1)]
    assert first["device_ms"] > 0 and pd.isna(second["device_ms"])
    assert pd.isna(second["self_device_ms"]) and second["host_ms"] > 0
    module = timing.to_df("module").set_index("module").loc["0.b"]
    assert module["device_ms"] == pytest.approx(first["device_ms"])
    assert module["calls"] == 2


class _WrongWidth(nn.Module):
    """Its second Linear takes 31 features where the first gives 32: its forward raises."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(32, 32)
        self.inner = nn.Linear(31, 8)

    def forward(self, x):
        return self.inner(self.fc(x))


@pytest.mark.parametrize("form", ["wrapper", "in place", "submodule"])
def test_a_compiled_forward_that_raises_names_the_module(form):
    # the eager call that gives the call tree runs before the clock's compile: the error is
    # the runner's, naming the module, not Dynamo's from inside the clock's own trace
    model = _WrongWidth()
    if form == "wrapper":
        timed, path = torch.compile(model), "inner"
    elif form == "in place":
        model.compile()
        timed, path = model, "inner"
    else:
        timed, path = nn.Sequential(nn.ReLU(), torch.compile(model)), "1._orig_mod.inner"
    with pytest.raises(ProfilingError, match=rf"module '{path}' \(Linear\) raised "
                       "RuntimeError: mat1 and mat2 shapes cannot be multiplied"):
        time_modules(timed, torch.randn(16, 32), **FAST)
    assert no_hooks_left(timed)


@pytest.fixture(scope="module")
def trained():
    model = residual_model()
    compiled = torch.compile(model)
    x = torch.randn(8, 16)
    clock = CompiledClock(torch.device("cpu"), CompiledProgram.of(compiled, x), backward=True)
    timing = train_step_times(compiled, x, clock=clock, **FAST)
    return model, clock, timing


def test_a_compiled_training_steps_backward_is_booked_to_modules(trained):
    model, clock, timing = trained
    assert timing.clock == "compiled-kernels"
    frame = timing.to_df("module").set_index("module")
    backward = [row for row in clock.kernels() if row.backward]
    by_module: dict[str, int] = {}
    for row in backward:
        by_module[row.module] = by_module.get(row.module, 0) + 1
    # the backward graph's 7 kernels: 2.act's ReLU gradient; 2.fc's weight, bias and input
    # gradients (mm, sum, addmm); the LayerNorm's with the first block's ReLU and residual
    # gradients, fused (the root's); 0.fc's weight and bias gradients (mm, sum)
    assert by_module == {"2.act": 1, "2.fc": 3, "": 1, "0.fc": 2}
    for path in ("0.fc", "2.fc", "2.act"):
        assert frame.loc[path, "self_backward_device_ms"] > 0
    # the first block's ReLU and the LayerNorm have no backward kernel of their own
    assert frame.loc["0.act", "backward_device_ms"] == 0
    assert frame.loc["1", "backward_device_ms"] == 0
    # every backward kernel booked, the root's backward time holding every module's own
    assert clock.backward_coverage == pytest.approx(1.0)
    assert clock.coverage == pytest.approx(1.0)
    own = [timing.samples(path, exclusive=True, phase="backward")
           for path, _ in model.named_modules()
           if timing.samples(path, exclusive=True, phase="backward").size]
    assert timing.samples("", phase="backward") == pytest.approx(sum(own))
    # the forward is booked as in time_modules: each Linear one addmm
    assert frame.loc["0.fc", "device_launches"] == 1 and frame.loc["2.fc", "device_launches"] == 1
    assert "backward graph's kernel" in " ".join(timing.warnings)


def test_a_compiled_training_timing_keeps_the_compiled_graphs_and_fused_kernels(trained):
    # as a compiled forward's timing does: the one graph the step ran (no break), and per
    # module the forward's kernels that fuse work of several modules, the clock's own
    _, clock, timing = trained
    assert timing.timing.compiled == clock.facts()
    assert len(timing.timing.compiled.regions) == 1 and not timing.timing.compiled.breaks
    # the step's latency is the compiled step's (forward, loss and compiled backward), each
    # timed from its first mark to its last
    steps = [max(marks.values()) - marks["start"] for marks in clock.plain]
    assert steps and timing.timing.compiled.latency_ms == pytest.approx(
        float(np.median(steps)) / 1e6)
    # the forward's fused kernels: the first block's residual add and ReLU with the
    # LayerNorm (the root's, their deepest common ancestor), the last block's add and ReLU
    frame = timing.to_df("module").set_index("module")
    fused = frame.dropna(subset=["self_fused_kernels"])
    assert dict(fused["self_fused_kernels"]) == {"__root__": 1, "2": 1}
    assert dict(fused["fused_across"]) == {"__root__": "0, 0.act, 1", "2": "2, 2.act"}


def test_auto_times_a_compiled_training_step_compiled():
    # before the compiled backward was booked, a compiled model's training step was timed
    # eagerly, with a CodePathWarning
    timing = train_step_times(torch.compile(residual_model()), torch.randn(8, 16), **FAST)
    assert timing.clock == "compiled-kernels"
    frame = timing.to_df("module").set_index("module")
    assert frame.loc["2.fc", "self_backward_device_ms"] > 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_the_kernel_records_are_booked_to_modules():
    model = residual_model().cuda()
    x = torch.randn(64, 16, device="cuda")
    compiled = torch.compile(model)
    clock = CompiledClock(torch.device("cuda"), CompiledProgram.of(compiled, x))
    timing = time_modules(compiled, x, clock=clock, **FAST)
    frame = timing.to_df("module").set_index("module")
    assert timing.clock == "compiled-kernels" and clock.graphs == 1
    # each Linear is one extern matrix product: one GEMM kernel (or a few) of its own
    assert frame.loc["0.fc", "device_launches"] >= 1 and frame.loc["0.fc", "device_ms"] > 0
    assert frame.loc["1", "device_ms"] == 0  # the LayerNorm is fused into the root's kernel
    assert clock.coverage == pytest.approx(1.0)
    own = [timing.samples(path, exclusive=True) for path, _ in model.named_modules()
           if timing.samples(path, exclusive=True).size]
    assert timing.samples("") == pytest.approx(sum(own))


def test_a_normal_adaptive_run_flags_no_compiled_device_time():
    timing = time_modules(torch.compile(residual_model()), torch.randn(8, 16), min_iters=20,
                          target_ci=1.0, max_seconds=None, warmup_seconds=0.0,
                          progress=False, measure_overhead=False)
    assert timing.clock == "compiled-kernels" and timing.stop_reason == "target_ci"
    # the compiled block traces half of each round: its own minimum is half of min_iters
    assert timing.timing.min_traced_samples == 10
    assert len(timing.samples("0.fc")) >= 10
    frame = timing.to_df("module").set_index("module")
    flags = frame.loc[frame["device_ms"].notna(), "device_low_confidence"]
    assert len(flags) >= 5 and not flags.any()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_a_compiled_submodule_and_the_eager_rest_are_booked():
    model = residual_model().cuda()
    model[2] = torch.compile(model[2])
    x = torch.randn(64, 16, device="cuda")
    clock = CompiledClock(torch.device("cuda"), CompiledProgram.of(model, x))
    timing = time_modules(model, x, clock=clock, **FAST)
    frame = timing.to_df("module").set_index("module")
    # the compiled block's Linear: its GEMM kernel(s); the eager LayerNorm: its own kernel(s)
    assert frame.loc["2._orig_mod.fc", "device_launches"] >= 1
    assert frame.loc["1", "device_launches"] >= 1 and frame.loc["1", "device_ms"] > 0
    assert clock.coverage == pytest.approx(1.0)
    own = [timing.samples(path, exclusive=True) for path, _ in model.named_modules()
           if timing.samples(path, exclusive=True).size]
    assert timing.samples("") == pytest.approx(sum(own))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_a_cuda_graph_replay_is_booked_to_modules():
    model = residual_model().cuda()
    x = torch.randn(64, 16, device="cuda")
    compiled = torch.compile(model, mode="reduce-overhead")
    clock = CompiledClock(torch.device("cuda"), CompiledProgram.of(compiled, x))
    timing = time_modules(compiled, x, clock=clock, **FAST)
    frame = timing.to_df("module").set_index("module")
    # each Linear's GEMM ran in the replay, with no operator's range: booked in device order
    assert frame.loc["0.fc", "device_launches"] >= 1 and frame.loc["0.fc", "device_ms"] > 0
    assert frame.loc["2.fc", "device_launches"] >= 1 and frame.loc["2.fc", "device_ms"] > 0
    assert clock.coverage == pytest.approx(1.0)
    assert any(note.startswith("CUDA graphs:") for note in timing.warnings)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_each_kernel_row_carries_its_launch_configurations():
    model = residual_model().cuda()
    x = torch.randn(64, 16, device="cuda")
    compiled = torch.compile(model)
    clock = CompiledClock(torch.device("cuda"), CompiledProgram.of(compiled, x))
    time_modules(compiled, x, clock=clock, **FAST)
    rows = clock.kernels()
    generated = [row for row in rows if row.name.startswith("triton_")]
    assert generated
    for row in generated:
        # a generated kernel is one device kernel of its own name, launched with one grid
        assert [name for name, _ in row.launch_configs] == [row.name]
        assert row.launch_configs[0][1].startswith("grid ")
        assert "block " in row.launch_configs[0][1]
    # the configured kernels are among the device kernels booked to the row
    for row in rows:
        configured = {name for name, _ in row.launch_configs}
        assert configured <= set(row.device_kernels)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_a_compiled_training_steps_backward_is_booked_to_modules():
    model = residual_model().cuda()
    x = torch.randn(64, 16, device="cuda")
    compiled = torch.compile(model)
    clock = CompiledClock(torch.device("cuda"), CompiledProgram.of(compiled, x), backward=True)
    timing = train_step_times(compiled, x, clock=clock, **FAST)
    frame = timing.to_df("module").set_index("module")
    # the backward runs on the autograd engine's device thread: its graph's kernels are
    # still the step's, each Linear's weight gradient a GEMM of its own
    for path in ("0.fc", "2.fc"):
        assert frame.loc[path, "self_backward_device_ms"] > 0
    assert clock.backward_coverage == pytest.approx(1.0)
    assert clock.coverage == pytest.approx(1.0)


def test_a_training_step_of_a_model_with_compiled_submodules_is_not_booked_half():
    # the eager modules' backward kernels would be booked to no module: refused when asked
    # for, and "auto" times the model as before
    model = residual_model()
    model[2] = torch.compile(model[2])
    with pytest.raises(ValueError, match="eager modules' backward kernels are not booked"):
        train_step_times(model, torch.randn(8, 16), clock="compiled", **FAST)
    assert train_step_times(model, torch.randn(8, 16), **FAST).clock != "compiled-kernels"
