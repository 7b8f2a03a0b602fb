"""Live profiling of real training steps."""

from __future__ import annotations

import warnings

import pandas as pd
import pytest
import torch
from torch import nn

from moduleprofiler import Profiler
from moduleprofiler.timing import TimingWarning, TrainingProfiler, benchmark, time_modules, track
from tests.timing.helpers import Spin, module_row, no_hooks_left, training_flags


def _model() -> nn.Module:
    return nn.Sequential(Spin(40, 150, param=True), nn.ReLU(inplace=True), Spin(40, 250))


def test_start_stop_window_and_alternation():
    model = _model()
    flags = training_flags(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    hooked_steps = []
    with TrainingProfiler(model, start_step=2, stop_step=8) as prof:
        for _ in range(10):
            hooked_steps.append(not no_hooks_left(model))
            loss = model(torch.randn(8)).sum()  # kept alive into the next step on purpose
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            prof.step()
    assert hooked_steps == [False, False] + [True] * 6 + [False, False]
    assert no_hooks_left(model) and training_flags(model) == flags
    timing = prof.result()
    # 6 profiled steps: 3 with gradient hooks, 3 with forward hooks only
    assert timing.iterations == 3 and timing.samples("", phase="backward").size == 3
    assert timing.separate_passes
    first = module_row(timing, "0")["backward_time_median_ms"]
    # the first layer's backward is its 150 us spin (its input needs no grad), not ~0
    assert 0.97 * 0.15 <= first <= 0.15 * 1.5 + 0.1
    assert module_row(timing, "2")["backward_time_median_ms"] >= 0.97 * 0.25
    assert module_row(timing, "2")["time_median_ms"] >= 0.97 * 0.04
    text = prof.layerwise_summary()
    for name in ("__root__ (Sequential)", "0 (Spin)", "1 (ReLU)", "2 (Spin)", "time median",
                 "backward time median"):
        assert name in text
    frame = timing.to_df("module")
    assert list(frame["module"]) == ["__root__", "0", "1", "2"]
    assert frame["backward_time_median_ms"].iloc[3] >= 0.97 * 0.25
    # to_df() of a result is one row per call; the profiler's, per module under that name,
    # goes in 0.3.0
    with pytest.warns(DeprecationWarning, match=r"TrainingProfiler.to_df\(\) is deprecated "
                                                r"and will be removed in moduleprofiler 0.3.0; "
                                                r"use result\(\).to_df\(\"module\"\)"):
        assert prof.to_df().equals(frame)


def test_without_step_calls_the_block_is_one_step():
    model = _model()
    with track(model) as prof:
        model(torch.randn(4)).sum().backward()
        summary = prof.layerwise_summary()  # inside the block, as with nnprofiler
    assert "2 (Spin)" in summary
    timing = prof.result()
    assert timing.samples("", phase="backward").size == 1 and timing.iterations == 1
    assert not timing.separate_passes
    assert module_row(timing, "2")["backward_time_median_ms"] >= 0.97 * 0.25
    assert no_hooks_left(model)


def test_exception_inside_the_block_removes_hooks():
    model = _model()
    with pytest.raises(RuntimeError, match="stop"), TrainingProfiler(model) as prof:
        model(torch.randn(4)).sum().backward()
        assert prof.active
        raise RuntimeError("stop")
    assert no_hooks_left(model) and not prof.active


def test_a_step_whose_forward_raised_and_was_caught_is_dropped_and_named():
    class FailsOnce(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.calls = 0

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.calls += 1
            if self.calls == 3:
                raise RuntimeError("a bad batch")
            return x * 2

    model = nn.Sequential(nn.Linear(4, 4), FailsOnce(), nn.Linear(4, 4))
    with TrainingProfiler(model, alternate=False) as prof:
        for _ in range(5):
            try:  # the user's loop skips the bad batch and trains on
                model(torch.randn(2, 4)).sum().backward()
            except RuntimeError:
                pass
            prof.step()
    with pytest.warns(TimingWarning, match=r"1 profiled step\(s\) dropped: their forward "
                                           r"raised \(in module '1'\)"):
        timing = prof.result()
    # 4 whole steps; the third, half run (the root's and the failing module's time missing,
    # the first Linear's there), is left out of every module's samples
    assert timing.samples("", phase="backward").size == 4
    assert timing.samples("0", phase="backward").size == 4
    assert timing.dropped == 1
    assert no_hooks_left(model)


def test_a_step_whose_model_caught_a_modules_exception_itself_is_kept():
    class NoFastKernel(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise NotImplementedError("no fast kernel")

    class Fallback(nn.Module):  # a fast path that falls back when it is not available
        def __init__(self) -> None:
            super().__init__()
            self.fast, self.slow = NoFastKernel(), nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            try:
                return self.fast(x)
            except NotImplementedError:
                return self.slow(x)

    model = Fallback()
    with TrainingProfiler(model) as prof:
        for _ in range(4):
            model(torch.randn(2, 4)).sum().backward()  # every forward finishes
            prof.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error", TimingWarning)  # no step dropped, none "not profiled"
        warnings.filterwarnings("ignore", "load average", TimingWarning)
        timing = prof.result()
    # 4 whole steps: 2 with gradient hooks, 2 with forward hooks only
    assert timing.dropped == 0 and timing.iterations == 2
    assert timing.samples("slow").size == 2 and timing.samples("", phase="backward").size == 2
    assert no_hooks_left(model)


def test_a_paused_profiler_times_nothing_between_steps():
    # a validation loop between two training steps (where Lightning and the Trainer run
    # theirs) is no step's: with step(pause=True) the hooks are off until resume()
    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    hooked_between = []
    with TrainingProfiler(model, start_step=0, stop_step=4) as prof:
        for _ in range(4):
            prof.resume()
            model(torch.randn(8)).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
            prof.step(pause=True)
            hooked_between.append(not no_hooks_left(model))
            with torch.no_grad():
                model.eval()
                for _ in range(3):  # three evaluation batches
                    model(torch.randn(8))
                model.train()
    assert hooked_between == [False] * 4 and no_hooks_left(model)
    timing = prof.result()
    # one call of each module a step: the evaluation's three calls were never timed
    assert [(r.path, r.call_number) for r in timing.records] \
        == [("", 0), ("0", 0), ("1", 0), ("2", 0)]
    # 4 steps: 2 with gradient hooks, 2 with forward hooks only, each whole
    assert timing.iterations == 2 and timing.samples("", phase="backward").size == 2
    assert module_row(timing, "2")["time_median_ms"] >= 0.97 * 0.04
    with pytest.raises(TypeError, match="pause must be a bool"):
        prof.step(pause=1)  # type: ignore[arg-type]


def test_a_pass_run_inside_a_step_is_not_recorded_as_the_steps_calls():
    # a profile(), a benchmark() or a time_modules() run between a step's backward and its
    # step() call is the package's own pass: its forwards (a benchmark's 10 + its warm-up,
    # time_modules' hooked and hook-free ones) are no calls of the training step
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    x = torch.randn(2, 4)
    quick = {"num_iters": 4, "drop_first": 1, "warmup_seconds": 0.0, "progress": False}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TimingWarning)
        with TrainingProfiler(model) as prof:
            for step in range(4):
                model(x).sum().backward()
                if step == 0:  # a backward-hook step
                    Profiler().profile(model, x)
                    benchmark(model, x, **quick)
                if step == 1:  # a forward-hook step
                    time_modules(model, x, **quick)
                prof.step()
        timing = prof.result()
    assert no_hooks_left(model)
    # one call of each module a step, as the steps made them
    assert [(r.path, r.call_number) for r in timing.records] \
        == [("", 0), ("0", 0), ("1", 0)]
    assert timing.to_df("module")["calls"].tolist() == [1, 1, 1]
    # 4 steps: 2 with gradient hooks, 2 with forward hooks only
    assert timing.iterations == 2 and timing.samples("", phase="backward").size == 2


def test_validation_and_empty_result():
    with pytest.raises(ValueError, match="start_step"):
        TrainingProfiler(nn.Linear(2, 2), start_step=3, stop_step=3)
    model = nn.Linear(2, 2)
    with TrainingProfiler(model, start_step=5) as prof:
        model(torch.randn(1, 2)).sum().backward()
        prof.step()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert any("no step was profiled" in w for w in prof.result().warnings)
        text = prof.layerwise_summary()  # asks for the result again: no second warning
    assert "nan" not in text  # the coverage of no step is left out, not printed as nan
    empty = [w for w in caught if "no step was profiled" in str(w.message)]
    assert [w.category for w in empty] == [TimingWarning]
    assert empty[0].filename == __file__


def test_report_is_the_layerwise_summary_by_the_name_every_timing_result_uses():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with TrainingProfiler(model) as prof:
        model(torch.randn(2, 4)).sum().backward()
    assert prof.report() == prof.layerwise_summary()
    result = prof.result()
    assert result.report() == result.layerwise_summary() == str(result)
    assert "backward time median" in prof.report()
    # summary() means on a timing what it means on every profile: the one-row model table
    assert isinstance(result.summary(), pd.DataFrame) and len(result.summary()) == 1
    assert result.module("0").type_name == "Linear"  # the module's facts (times: to_df)
    assert module_row(result, "0")["backward_time_median_ms"] > 0
    with pytest.warns(DeprecationWarning, match=r"TrainingProfiler\.summary\(\) is deprecated"):
        assert prof.summary() == prof.report()


def _dynamo_counters() -> tuple[int, int]:
    """Dynamo's graph breaks and compiled graphs so far."""
    counters = torch._dynamo.utils.counters
    return sum(counters["graph_break"].values()), counters["stats"]["unique_graphs"]


def _train(model: nn.Module, prof: TrainingProfiler, steps: int) -> None:
    for _ in range(steps):
        model(torch.randn(4, 8)).sum().backward()
        prof.step()


def test_a_compiled_model_keeps_its_compiled_program_and_is_timed_whole():
    torch._dynamo.reset()
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
    compiled = torch.compile(model, backend="eager")  # Dynamo's tracing, no code generation
    breaks, graphs = _dynamo_counters()
    with pytest.warns(TimingWarning, match=r"inside code torch.compile compiled "
                                           r"\('_orig_mod' and every module in it\)"), \
            TrainingProfiler(compiled, start_step=0, stop_step=4) as prof:
        _train(compiled, prof, 5)  # hooks installed before the first (compiling) call
    # hooks inside the compiled module would have been traced: a graph break at each module
    # and the model compiled in pieces; none is, and the one graph is compiled once
    assert _dynamo_counters() == (breaks, graphs + 1)
    timing = prof.result()
    assert timing.unhooked == ("_orig_mod", "_orig_mod.0", "_orig_mod.1", "_orig_mod.2")
    # the wrapper's own call (eager) is timed, forward and backward, in every kept step
    assert [r.path for r in timing.records] == [""]
    assert timing.samples("", phase="backward").size == 2
    assert "not hooked" in prof.layerwise_summary()
    assert no_hooks_left(compiled)


def test_a_model_compiled_in_place_is_not_hooked_and_says_so():
    torch._dynamo.reset()
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
    model.compile(backend="eager")
    breaks, graphs = _dynamo_counters()
    with pytest.warns(TimingWarning, match=r"own call runs inside compiled code \(model"), \
            TrainingProfiler(model, start_step=0) as prof:
        _train(model, prof, 3)
    # no graph break, at most one graph (torch 2.11 on CUDA had it compiled already)
    after_breaks, after_graphs = _dynamo_counters()
    assert after_breaks == breaks and after_graphs - graphs <= 1
    timing = prof.result()
    assert timing.records == () and timing.unhooked == ("", "0", "1")
    assert not any("no step was profiled" in w for w in timing.warnings)
    text = prof.layerwise_summary()
    # nothing was counted or timed: no count total reads 0
    assert "total: params 144" in text and "MACs" not in text  # 8 * 16 + 16 = 144
    assert no_hooks_left(model)


def test_a_compiled_submodule_is_timed_as_one_call_of_the_eager_model():
    torch._dynamo.reset()
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Sequential(nn.Linear(16, 2)))
    model[2] = torch.compile(model[2], backend="eager")
    breaks, graphs = _dynamo_counters()
    with pytest.warns(TimingWarning, match=r"\('2._orig_mod' and every module in it\)"), \
            TrainingProfiler(model, start_step=0, stop_step=2) as prof:
        _train(model, prof, 3)
    assert _dynamo_counters() == (breaks, graphs + 1)
    timing = prof.result()
    assert [r.path for r in timing.records] == ["", "0", "1", "2"]
    assert timing.unhooked == ("2._orig_mod", "2._orig_mod.0")


def test_methods_compiled_on_the_instance_leave_what_they_call_unhooked():
    torch._dynamo.reset()
    # a forward compiled on the instance: the module's own call stays eager (and timed), what
    # it calls is compiled; a compiled training step (as Lightning compiles a LightningModule
    # given to fit) calls the module itself: nothing of it is hooked
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
    model.forward = torch.compile(model.forward, backend="eager")
    breaks, _ = _dynamo_counters()
    with pytest.warns(TimingWarning, match=r"\('0', '1' and every module in it\)"), \
            TrainingProfiler(model, start_step=0, stop_step=2) as prof:
        _train(model, prof, 3)
    assert _dynamo_counters()[0] == breaks  # no graph break
    assert prof.result().unhooked == ("0", "1")
    assert [r.path for r in prof.result().records] == [""]

    stepped = nn.Sequential(nn.Linear(8, 2))
    stepped.training_step = torch.compile(lambda x: stepped(x).sum(), backend="eager")
    with pytest.warns(TimingWarning, match="own call runs inside compiled code"), \
            TrainingProfiler(stepped, start_step=0) as prof:
        stepped.training_step(torch.randn(4, 8)).backward()
    assert _dynamo_counters()[0] == breaks
    assert prof.result().unhooked == ("", "0")


@pytest.mark.parametrize(("arguments", "error", "named"), [
    ({"start_step": 1.5}, TypeError, "start_step"),
    ({"start_step": "1"}, TypeError, "start_step"),
    ({"stop_step": 2.0}, TypeError, "stop_step"),
    ({"alternate": "no"}, TypeError, "alternate"),
    ({"confidence": 2}, ValueError, "confidence"),
    ({"confidence": "0.9"}, TypeError, "confidence"),
    ({"start_step": -1}, ValueError, "start_step"),
])
def test_bad_arguments_fail_before_the_first_step(arguments, error, named):
    # a float start_step used to fail inside the user's loop at step() (a bare "list indices
    # must be integers"), a confidence of 2 only at result(), alternate="no" counted as True
    with pytest.raises(error, match=named):
        TrainingProfiler(nn.Linear(2, 2), **arguments)
