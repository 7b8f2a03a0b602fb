"""One vocabulary: every column any result shows is a registered column (it has one name,
one unit, one own/inclusive rule and a line in docs/glossary.md), and no frame holds one
quantity under two names."""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations

import pandas as pd
import pytest
import torch
from torch import nn

from moduleprofiler import Profiler, TimingOptions
from moduleprofiler.export.columns import registered_columns
from moduleprofiler.records import ProfileData

QUICK = TimingOptions(num_iters=4, drop_first=1, warmup_seconds=0.0, progress=False,
                      measure_overhead=False)


def _model() -> nn.Module:
    # deep enough that the training forward's live memory (activations saved for backward)
    # differs from inference's in some row: two quantities, two names
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                         nn.Sequential(nn.Linear(64, 4)))


RESULTS: dict[str, Callable[[], ProfileData]] = {
    "profile": lambda: Profiler().profile(_model(), torch.randn(32, 8)),
    "profile_backward": lambda: Profiler().profile(_model(), torch.randn(32, 8),
                                                   backward=True),
    "time_modules": lambda: Profiler().time_modules(_model(), torch.randn(32, 8), QUICK),
    "train_step_times": lambda: Profiler().train_step_times(_model(), torch.randn(32, 8),
                                                            QUICK),
    "measure_memory": lambda: Profiler().measure_memory(_model(), torch.randn(32, 8),
                                                        train=True),
    "predict": lambda: Profiler().predict(_model(), torch.randn(32, 8), "H100 SXM"),
}


@pytest.fixture(scope="module", params=list(RESULTS))
def result(request: pytest.FixtureRequest) -> ProfileData:
    return RESULTS[request.param]()


def _frames(result: ProfileData) -> dict[str, pd.DataFrame]:
    return {aggregate: result.to_df(aggregate)  # type: ignore[attr-defined]
            for aggregate in ("call", "module", "type")}


def test_every_column_is_registered(result: ProfileData) -> None:
    registered = {spec.name for spec in registered_columns()}
    for aggregate, frame in _frames(result).items():
        unknown = [name for name in frame.columns if name not in registered]
        assert unknown == [], (aggregate, unknown)


def test_no_quantity_under_two_names(result: ProfileData) -> None:
    # two measured columns (times, bytes) equal in every row of a module frame are one
    # quantity shown twice (forward_ms beside time_median_ms was)
    frame = _frames(result)["module"]
    measured = [name for name in frame.columns
                if name.endswith(("_ms", "_bytes")) and frame[name].notna().any()
                and pd.api.types.is_numeric_dtype(frame[name])]
    twins = [(a, b) for a, b in combinations(measured, 2)
             if frame[a].astype(float).equals(frame[b].astype(float))
             and frame[a].fillna(0).astype(float).abs().sum() > 0]
    assert twins == []
