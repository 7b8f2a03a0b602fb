"""A measured profile scaled from one device to another, the ratio column and the figure."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler, Profile
from moduleprofiler.prediction import Calibration, HostCosts, plot_prediction

HOST = HostCosts("test cpu", {"view": 1.0, "unary": 4.0, "gemm": 11.0, "module_call": 2.0,
                              "cpu_op": 1.0})


def _device(name: str, gemm_us: float) -> Calibration:
    return Calibration(name, "test", 132, "x", "today", {"bf16": {"gemm": [[64, 64, 64, gemm_us]],
                       "mem_unary": [[1e3, 2.0], [1e9, 500.0]]}}, HOST)


def _measured(model: nn.Module, x: torch.Tensor, device_ms: float | None) -> Profile:
    counted = ModuleProfiler().profile(model, x)
    metrics = {} if device_ms is None else {"device_ms": device_ms}
    return dataclasses.replace(counted, records=tuple(
        dataclasses.replace(r, metrics={**r.metrics, **metrics}) for r in counted.records))


def test_a_measured_module_is_scaled_by_the_ratio_of_the_two_predictions() -> None:
    model, x = nn.Linear(64, 64), torch.randn(64, 64)
    # the Linear's only kernel is the 64 x 64 x 64 GEMM: 3 us on the source, 6 us on the
    # target (each its own measured shape), so the module scales by 6 / 3 = 2
    predicted = ModuleProfiler().predict(model, x, device=_device("A100 80GB SXM", 6.0),
                                         dtype="bf16", measured=_measured(model, x, 0.010),
                                         measured_on=_device("H100 SXM", 3.0))
    module = predicted.to_df("module").iloc[0]
    assert module["scaled_device_ms"] == pytest.approx(0.020, rel=0.01)
    assert module["device_ms"] == pytest.approx(0.010)  # the measured column, beside
    # per call: predicted 6 us over the measured 10 us
    assert predicted.to_df("call").iloc[0]["predicted_to_measured"] == pytest.approx(
        0.6, rel=0.01)
    assert predicted.predicted_for.startswith("A100 80GB SXM")


def test_a_measurement_without_device_time_or_device_is_refused() -> None:
    model, x = nn.Linear(64, 64), torch.randn(64, 64)
    with pytest.raises(ValueError, match="measured: the profile has no 'device_ms'"):
        ModuleProfiler().predict(model, x, dtype="bf16", measured=_measured(model, x, None),
                                 measured_on="H100 SXM")
    with pytest.raises(ValueError, match="measured_on"):
        ModuleProfiler().predict(model, x, dtype="bf16", measured=_measured(model, x, 0.01))


def test_the_figure_puts_every_module_with_both_times(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    model, x = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 64)), torch.randn(64, 64)
    predicted = ModuleProfiler().predict(model, x, device=_device("H100 SXM", 3.0),
                                         dtype="bf16").merge(_measured(model, x, 0.004))
    figure = plot_prediction(predicted, path=tmp_path / "p.png")  # type: ignore[arg-type]
    ax = figure.axes[0]
    # three modules (the Sequential and two Linears), each with both times
    assert len(ax.collections[-1].get_offsets()) == 3
    assert ax.get_xlabel() == "measured device time (ms)"
    assert "over 3 modules" in ax.get_title()
    assert (tmp_path / "p.png").stat().st_size > 0
