"""The one-row model summary."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pandas as pd
import torch
from torch import nn

from moduleprofiler import ModuleProfiler
from moduleprofiler.memory import measure_memory, model_summary
from moduleprofiler.summary_row import SUMMARY_COLUMNS


def _model_and_input() -> tuple[nn.Module, torch.Tensor]:
    return nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 2)), torch.randn(3, 5)


def test_summary_without_memory_or_latency_leaves_them_unknown() -> None:
    model, x = _model_and_input()
    profile = ModuleProfiler().profile(model, x)
    row = model_summary(profile)
    assert list(row.columns) == list(SUMMARY_COLUMNS) and len(row) == 1
    assert row.loc[0, "params"] == (5 * 7 + 7) + (7 * 2 + 2)
    assert row.loc[0, "macs"] == 3 * 5 * 7 + 3 * 7 * 2
    assert row.loc[0, "flops"] == 2 * row.loc[0, "macs"]
    assert pd.isna(row.loc[0, "model_size_bytes"]) and pd.isna(row.loc[0, "training_peak_bytes"])
    assert math.isnan(row.loc[0, "latency_ms"]) and math.isnan(row.loc[0, "throughput"])


def test_summary_with_memory_and_duck_typed_latency() -> None:
    model, x = _model_and_input()
    profile = ModuleProfiler().profile(model, x)
    memory = measure_memory(model, x, train=True)
    latency = SimpleNamespace(latency_ms=1.5, throughput=2000.0)  # like LatencyResult
    row = model_summary(profile, memory, latency)
    assert row.loc[0, "model_size_bytes"] == ((5 * 7 + 7) + (7 * 2 + 2)) * 4
    assert row.loc[0, "peak_activation_bytes"] == memory.peak_activation_bytes > 0
    assert memory.training is not None
    assert row.loc[0, "training_peak_bytes"] == memory.training.peak_bytes
    assert row.loc[0, "saved_bytes"] == memory.training.saved_bytes
    assert (row.loc[0, "latency_ms"], row.loc[0, "throughput"]) == (1.5, 2000.0)


def test_a_latency_of_the_shape_before_0_2_still_gives_its_median() -> None:
    # an object shaped like LatencyResult before 0.2 held the median as median_ms
    model, x = _model_and_input()
    profile = ModuleProfiler().profile(model, x)
    row = model_summary(profile, latency=SimpleNamespace(median_ms=1.5, throughput=2000.0))
    assert (row.loc[0, "latency_ms"], row.loc[0, "throughput"]) == (1.5, 2000.0)


def test_median_in_seconds_as_torch_utils_benchmark_reports_it() -> None:
    model, x = _model_and_input()
    profile = ModuleProfiler().profile(model, x)
    row = model_summary(profile, latency=SimpleNamespace(median=0.002))
    assert row.loc[0, "latency_ms"] == 2.0
    assert math.isnan(row.loc[0, "throughput"])


def test_summary_says_when_its_counts_are_lower_bounds() -> None:
    class Unpriced(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

    model, x = nn.Sequential(nn.Linear(5, 7), Unpriced()), torch.randn(3, 5)
    exact = model_summary(ModuleProfiler().profile(model, x)).loc[0]
    assert bool(exact["complete"]) and exact["macs"] == 3 * 5 * 7
    # operators off, the multiply is unknown: the MACs are the Linear's alone, a lower bound
    partial = model_summary(ModuleProfiler().profile(model, x, operators=False)).loc[0]
    assert not bool(partial["complete"]) and partial["macs"] == 3 * 5 * 7


def test_summary_of_a_pass_that_counted_nothing_leaves_the_counts_unknown() -> None:
    model, x = _model_and_input()
    timing = ModuleProfiler().time_modules(model, x, num_iters=2, drop_first=0,
                                           warmup_seconds=0)
    row = timing.summary()
    assert pd.isna(row.loc[0, "macs"]) and pd.isna(row.loc[0, "flops"])
    assert not bool(row.loc[0, "complete"])
    assert row.loc[0, "params"] == (5 * 7 + 7) + (7 * 2 + 2)


def test_a_memory_reports_own_summary_shows_its_measurements() -> None:
    model, x = nn.Linear(4, 4), torch.randn(3, 4)
    row = measure_memory(model, x).summary().loc[0]
    # parameters 4 * 4 + 4 = 20 floats, 80 bytes; the inference pass starts from them and the
    # 3 x 4 input (48 bytes), and the output adds 3 x 4 x 4 = 48 bytes: peak 80 + 48 + 48
    assert row["model_size_bytes"] == 80
    assert row["inference_peak_bytes"] == 176 and row["peak_activation_bytes"] == 48
    assert pd.isna(row["training_peak_bytes"])  # no training pass: unknown, not 0
    assert pd.isna(row["macs"])  # the memory pass counts nothing


def test_a_memory_or_latency_of_another_kind_is_refused_by_name() -> None:
    import pytest

    model, x = _model_and_input()
    profile = ModuleProfiler().profile(model, x)
    # a number as the memory report was an AttributeError ('int' object has no attribute
    # 'model_size_bytes'); a latency of no known kind was a silent NaN
    with pytest.raises(TypeError, match=r"memory must be the result of measure_memory\(\) or "
                                        "None, got int 5"):
        profile.summary(memory=5)
    with pytest.raises(TypeError, match=r"latency must be the result of benchmark.*got str "
                                        "'fast'"):
        profile.summary(latency="fast")
    with pytest.raises(TypeError, match=r"latency must be .* got bool True"):
        profile.summary(latency=True)
    assert profile.summary(latency=4).loc[0, "latency_ms"] == 4.0  # a number of ms is one
