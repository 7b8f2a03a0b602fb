"""A timing result's call records cover every call made in the kept iterations, also one that
the first kept iteration did not make (data-dependent control flow), so that every module that
ran has its times."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from torch import nn

from moduleprofiler.facts import TimingFacts
from moduleprofiler.modules import module_infos
from moduleprofiler.runner import PassRunner
from moduleprofiler.timing.forward import ModuleTiming
from moduleprofiler.timing.iteration import IterationTimes, iteration_of_own
from moduleprofiler.timing.overhead import HookCalibration
from moduleprofiler.timing.results import TimedCalls, timed_profile


class _Branchy(nn.Module):
    """``head``, then ``extra`` only while ``take_extra`` is set (the test sets it, as a
    layer-drop or routing decision would), then ``tail``."""

    def __init__(self) -> None:
        super().__init__()
        self.head, self.extra, self.tail = nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4)
        self.take_extra = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.head(x)
        if self.take_extra:
            x = self.extra(x)
        return self.tail(x)


def _iteration(model: _Branchy, take_extra: bool, own_ns: list[float]) -> IterationTimes:
    model.take_extra = take_extra
    runner = PassRunner(model, [])
    with torch.no_grad():
        runner.forward(lambda: model(torch.randn(2, 4)))
    index = {id(module): i for i, (_, module) in enumerate(model.named_modules())}
    return iteration_of_own(runner.calls, index, np.asarray(own_ns))


def _timing(iterations: list[IterationTimes], model: nn.Module) -> ModuleTiming:
    # what the pass hands its result: the kept iterations and the facts (hooks that cost
    # nothing, so the samples are the own times given)
    calibration = HookCalibration("cpu", attribution_ns=0.0, per_call_ns=0.0)
    return timed_profile(ModuleTiming, module_infos(model), TimedCalls(
        forward=iterations, forward_error=(0.0, 0.0)), TimingFacts(
        clock="cpu", device="cpu", calibration=dataclasses.asdict(calibration),
        iterations=len(iterations), hooked_ms=(1.0,) * len(iterations),
        hook_free_ms=(1.0,) * len(iterations)))


def test_a_call_first_made_in_a_later_iteration_gets_a_record_and_its_times() -> None:
    model = _Branchy()
    # own times (ns) in call order: without extra root, head, tail; with it root, head,
    # extra, tail
    iterations = [_iteration(model, False, [100.0, 1000.0, 3000.0]),
                  _iteration(model, True, [100.0, 1000.0, 2000.0, 3000.0]),
                  _iteration(model, True, [100.0, 1000.0, 4000.0, 3000.0])]
    timing = _timing(iterations, model)
    # the first iteration's calls in their order, then extra under the root that called it
    assert [(r.path, r.call_number, r.parent, r.depth) for r in timing.records] == [
        ("", 0, None, 0), ("head", 0, 0, 1), ("tail", 0, 0, 1), ("extra", 0, 0, 1)]
    extra = timing.calls("extra")[0].metrics
    samples = extra["forward_samples_ms"]
    assert math.isnan(samples[0]) and samples[1:] == (2000 / 1e6, 4000 / 1e6)
    modules = timing.to_df("module").set_index("module")
    # extra ran in two of three iterations: the median of 2000 and 4000 ns is 3000 ns
    assert modules.loc["extra", "time_median_ms"] == 3000 / 1e6
    assert modules.loc["extra", "time_p25_ms"] == 2500 / 1e6  # 2000 + (4000 - 2000) / 4
    # the root: 4100, 6100 and 8100 ns -> 6100 ns
    assert modules.loc["__root__", "time_median_ms"] == 6100 / 1e6
    assert "extra" not in timing.uncalled


def test_coverage_counts_a_call_made_in_some_iterations_by_its_share_of_them() -> None:
    model = _Branchy()
    # extra ran in two of three iterations; own times (ns) as in the test above
    iterations = [_iteration(model, False, [100.0, 1000.0, 3000.0]),
                  _iteration(model, True, [100.0, 1000.0, 2000.0, 3000.0]),
                  _iteration(model, True, [100.0, 1000.0, 4000.0, 3000.0])]
    timing = _timing(iterations, model)
    # root median 6100 ns; self medians: root 100, head 1000, tail 3000, extra 3000 over the
    # two iterations that called it, counted 2/3: 100 + 1000 + 3000 + 3000 * 2/3 = 6100
    # (its plain median would give 7100 / 6100 = 1.164)
    assert timing.coverage == pytest.approx(1.0)
    # leaves: head 1000 + tail 3000 + extra 3000 * 2/3 = 6000 of 6100
    assert timing.leaf_coverage == pytest.approx(6000 / 6100)


def test_iterations_with_the_same_calls_give_the_first_iterations_records() -> None:
    model = _Branchy()
    iterations = [_iteration(model, True, [100.0, 1000.0, 2000.0, 3000.0]) for _ in range(3)]
    timing = _timing(iterations, model)
    assert [(r.path, r.parent) for r in timing.records] == [
        ("", None), ("head", 0), ("extra", 0), ("tail", 0)]
    assert timing.calls("extra")[0].metrics["forward_samples_ms"] == (2000 / 1e6,) * 3


def test_samples_name_an_unknown_phase() -> None:
    model = _Branchy()
    timing = _timing([_iteration(model, False, [100.0, 1000.0, 3000.0])], model)
    # head's per-iteration samples: one iteration, 1000 ns
    assert timing.samples("head").tolist() == [1000 / 1e6]
    with pytest.raises(ValueError, match="phase"):
        timing.samples("head", phase="backward")  # a forward timing has no backward
