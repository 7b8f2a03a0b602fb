"""The warnings a timing call issues: each points at the line the user wrote (not into the
package), one per cause, and short."""

from __future__ import annotations

import random
import time
import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from moduleprofiler.compat.timing import inference_time_dict
from moduleprofiler.core import Profiler
from moduleprofiler.timing import (
    TimingOptions,
    TrainingProfiler,
    benchmark,
    time_modules,
    train_step_times,
)

SHORT = 200
"""Characters a warning may take: one line and a short hint."""


class Nap(nn.Module):
    """Sleeps a random 0.1-2 ms per call: noisy samples without burning the shared CPU."""

    def __init__(self) -> None:
        super().__init__()
        self.random = random.Random(0)

    def forward(self, x: Tensor) -> Tensor:
        time.sleep(self.random.uniform(1e-4, 2e-3))
        return x


def _train_in_place() -> None:
    model = nn.Sequential(nn.Linear(4, 4), Nap())
    with TrainingProfiler(model) as prof:
        for _ in range(3):
            model(torch.randn(2, 4)).sum().backward()
            prof.step()
    prof.result()


# an unreachable CI target on a short budget (the budget's note) over noisy samples (the
# noise's), each call written on a line of this file
BUDGET: dict[str, Any] = {"target_ci": 1e-9, "max_seconds": 0.3, "progress": False}
CALLS: dict[str, Callable[[], object]] = {
    "time_modules": lambda: time_modules(Nap(), torch.zeros(1), warmup_seconds=0, **BUDGET),
    "Profiler.time_modules": lambda: Profiler().time_modules(Nap(), torch.zeros(1),
                                                             TimingOptions(**BUDGET)),
    "train_step_times": lambda: train_step_times(nn.Sequential(nn.Linear(4, 4), Nap()),
                                                 torch.randn(2, 4), **BUDGET),
    "benchmark": lambda: benchmark(Nap(), torch.zeros(1), warmup_seconds=0, **BUDGET),
    "compat inference_time_dict": lambda: inference_time_dict(Nap(), torch.zeros(1),
                                                              num_iters=8, drop_first=2),
    "TrainingProfiler": _train_in_place,
}


@pytest.mark.parametrize("name", list(CALLS))
def test_every_warning_of_a_timing_call_points_at_the_callers_line(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # a loaded machine: every pass has something to say
    monkeypatch.setattr("moduleprofiler.timing.environment.loadavg", lambda: 1000.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        CALLS[name]()
    assert caught, "the loaded machine must be warned about"
    places = {(w.filename, w.lineno) for w in caught}
    assert {filename for filename, _ in places} == {__file__}, places
    messages = [str(w.message) for w in caught]
    assert len(set(messages)) == len(messages), messages  # none twice
    # one warning per cause: the load and the spread samples it causes are one
    assert sum("load average" in m or "noisy" in m for m in messages) == 1, messages
    assert all("\n" not in m and len(m) <= SHORT for m in messages), messages

