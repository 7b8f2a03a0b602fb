"""The collector is paused while a pass runs and is recorded, and resumed as it was
(:mod:`moduleprofiler.garbage`)."""

from __future__ import annotations

import gc

import pytest
import torch
from torch import Tensor, nn

from moduleprofiler import Profiler, ProfilingError
from moduleprofiler.garbage import collector_paused


class SeesCollector(nn.Module):
    """Notes whether the collector runs during its forward; raises when told to."""

    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.fail = fail
        self.seen: list[bool] = []

    def forward(self, x: Tensor) -> Tensor:
        self.seen.append(gc.isenabled())
        if self.fail:
            raise RuntimeError("boom")
        return self.fc(x)


def test_a_pass_runs_with_the_collector_paused_and_resumes_it() -> None:
    model = SeesCollector()
    assert gc.isenabled()
    profile = Profiler().profile(model, torch.randn(1, 2))
    assert model.seen == [False]  # paused for the pass
    assert gc.isenabled()  # and running again after it
    assert profile.total_macs == 4  # Linear(2, 2) on one row: 2 x 2 MACs


def test_the_collector_resumes_after_a_forward_that_raises() -> None:
    model = SeesCollector(fail=True)
    with pytest.raises(ProfilingError, match="boom"):
        Profiler().profile(model, torch.randn(1, 2))
    assert model.seen == [False] and gc.isenabled()


def test_a_collector_the_caller_paused_stays_paused() -> None:
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # not switched on behind the caller's back
        Profiler().profile(SeesCollector(), torch.randn(1, 2))
        assert not gc.isenabled()
    finally:
        gc.enable()
