"""The roofline figure: one point per module with data, the roofs of the device, the names of
the modules that take the most time, saved as PNG/SVG/PDF; a clear error without matplotlib."""

from __future__ import annotations

import dataclasses
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

pytest.importorskip("matplotlib")

from moduleprofiler import ModuleProfiler
from moduleprofiler.efficiency import (
    DevicePeaks,
    EfficiencyWarning,
    TrafficListener,
    plot_roofline,
    with_efficiency,
)
from moduleprofiler.timing import time_modules, train_step_times

# 2 TFLOP/s fp32, 4 bf16; 100 GB/s: ridges at 20 and 40 FLOP/byte
TOY = DevicePeaks("toy", {"fp32": 2.0, "bf16": 4.0}, bandwidth_gbs=100.0)


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 32))


@pytest.fixture(scope="module")
def timed() -> Any:
    torch.manual_seed(0)
    model, x = mlp(), torch.randn(16, 64)
    profile = ModuleProfiler().profile(model, x, listeners=[TrafficListener()])
    timing = time_modules(model, x, num_iters=4, drop_first=1, warmup_seconds=0,
                          measure_overhead=False)
    return profile.with_timing(timing)


def points(figure: Any) -> int:
    return sum(len(collection.get_offsets()) for collection in figure.axes[0].collections)


def lines(figure: Any) -> dict[str, Any]:
    return {line.get_label(): line for line in figure.axes[0].lines}


def quiet(*args: Any, **kwargs: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EfficiencyWarning)
        return plot_roofline(*args, **kwargs)


def test_one_point_per_module_with_data_under_the_roofs(timed: Any) -> None:
    figure = quiet(timed, TOY, top=2)
    # the two Linears and the ReLU have FLOPs, bytes and time; the root has no own work
    assert points(figure) == 3
    title = figure.axes[0].get_title()
    assert "3 modules" in title and "1 more" in title
    roofs = lines(figure)
    assert set(roofs) == {"memory 100 GB/s", "fp32 peak 2 TFLOP/s"}  # only the dtype used
    slope, ceiling = roofs["memory 100 GB/s"], roofs["fp32 peak 2 TFLOP/s"]
    # the slope ends at the ridge: 2e12 FLOP/s / 100e9 B/s = 20 FLOP/byte
    assert slope.get_xdata()[-1] == pytest.approx(20.0)
    assert slope.get_ydata()[-1] == pytest.approx(2e12)
    assert list(ceiling.get_ydata()) == [2e12, 2e12] and ceiling.get_xdata()[0] == 20.0
    # each point sits at the module's intensity and achieved FLOP/s
    efficient = with_efficiency(timed, TOY)
    expected = sorted((m["intensity"], m["achieved_tflops"] * 1e12)
                      for m in efficient.module_metrics.values()
                      if m.get("intensity") and m.get("achieved_tflops"))
    drawn = sorted(tuple(map(float, xy)) for c in figure.axes[0].collections
                   for xy in c.get_offsets())
    assert [v for xy in drawn for v in xy] == pytest.approx([v for xy in expected for v in xy])
    # Linear 0: 16 x 128 x (2 x 64 - 1 + 1) FLOPs over 4 x (128 + 16 x 64 + 64 x 128 +
    # 16 x 128) bytes
    assert any(x == pytest.approx(262_144 / 45_568) for x, _ in expected)
    # the two modules with the most self time are named, with their types
    names = [text.get_text() for text in figure.axes[0].texts]
    assert len(names) == 2 and all("(Linear)" in n or "(ReLU)" in n for n in names)


def test_a_fixed_dtype_draws_its_ceiling(timed: Any) -> None:
    figure = quiet(timed, TOY, dtype="bf16")
    assert "bf16 peak 4 TFLOP/s" in lines(figure)
    assert lines(figure)["memory 100 GB/s"].get_xdata()[-1] == pytest.approx(40.0)


@pytest.mark.parametrize("suffix", [".png", ".svg", ".pdf"])
def test_saves_each_format(timed: Any, tmp_path: Path, suffix: str) -> None:
    target = tmp_path / f"roofline{suffix}"
    quiet(timed, TOY, path=target)
    assert target.stat().st_size > 1000


def test_backward_phase_uses_the_backward_columns() -> None:
    model, x = mlp(), torch.randn(16, 64)
    profile = ModuleProfiler().profile(model, x, backward=True, listeners=[TrafficListener()])
    steps = train_step_times(model, x, num_iters=3, drop_first=1, measure_overhead=False)
    figure = quiet(profile.with_timing(steps), TOY, phase="backward")
    assert points(figure) == 3  # both Linears' and the ReLU's backward
    assert "backward" in figure.axes[0].get_ylabel()


def test_draws_into_given_axes(timed: Any) -> None:
    from matplotlib.figure import Figure

    figure = Figure()
    _left, right = figure.subplots(1, 2)
    assert quiet(timed, TOY, ax=right) is figure
    assert points(figure) == 0 and len(right.collections) > 0  # axes[0] is the left one


def test_errors_name_the_argument(timed: Any) -> None:
    with pytest.raises(ValueError, match="phase"):
        quiet(timed, TOY, phase="sideways")
    with pytest.raises(ValueError, match="argument path"):
        quiet(timed, TOY, path="roofline.jpg")
    with pytest.raises(ValueError, match="top"):
        quiet(timed, TOY, top=-1)
    with pytest.raises(ValueError, match="dtype"):
        quiet(timed, TOY, dtype="int64")
    untimed = ModuleProfiler().profile(mlp(), torch.randn(2, 64), listeners=[TrafficListener()])
    with pytest.raises(ValueError, match=r"profile\.merge\(timing\)"):
        quiet(untimed, TOY)
    plain = ModuleProfiler().profile(mlp(), torch.randn(2, 64))
    with pytest.raises(ValueError, match="TrafficListener"):
        quiet(plain, TOY)


def test_without_matplotlib_the_error_names_the_extra(timed: Any,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r'pip install matplotlib .*pip install "\.\[plot\]"'):
        quiet(timed, TOY)


def test_long_names_stay_inside_the_axes() -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    model = nn.Sequential()
    model.add_module("a_very_long_projection_layer_name_number_zero", nn.Linear(256, 256))
    model.add_module("another_extremely_long_activation_name_one", nn.ReLU())
    model.add_module("the_last_long_output_projection_layer_two", nn.Linear(256, 256))
    profile = ModuleProfiler().profile(model, torch.randn(64, 256),
                                       listeners=[TrafficListener()])
    # a self time of 0.1 ms per call, as a timing merged in would give
    timed = dataclasses.replace(profile, records=tuple(
        dataclasses.replace(r, metrics={**r.metrics, "self_forward_ms": 0.1})
        for r in profile.records))
    figure = quiet(timed, TOY)
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    axes = figure.axes[0].get_window_extent(canvas.get_renderer())
    names = figure.axes[0].texts
    assert len(names) == 3
    # the Linears' names, at the rightmost points, were written rightwards past the axes'
    # right edge
    for name in names:
        box = name.get_window_extent(canvas.get_renderer())
        assert axes.x0 <= box.x0 and box.x1 <= axes.x1, name.get_text()


def test_a_module_in_a_dtype_without_a_peak_is_drawn_and_said() -> None:
    # a bfloat16 layer on a device with an fp32 peak only has no compute roof and no label:
    # the title counted it ("2 modules") but no point was drawn for it
    class Mixed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(64, 64)
            self.b = nn.Linear(64, 64).to(torch.bfloat16)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.b(self.a(x).to(torch.bfloat16))

    torch.manual_seed(0)
    model, x = Mixed(), torch.randn(16, 64)
    profile = ModuleProfiler().profile(model, x, listeners=[TrafficListener()]).with_timing(
        time_modules(model, x, num_iters=3, drop_first=1, warmup_seconds=0,
                     measure_overhead=False))
    fp32_only = DevicePeaks("fp32 only", {"fp32": 2.0}, bandwidth_gbs=100.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", EfficiencyWarning)
        figure = plot_roofline(profile, fp32_only)
    axes = figure.axes[0]
    assert axes.get_title().startswith("Roofline on fp32 only: 2 modules")
    assert points(figure) == 2  # a and b; the root's own work is a cast, no FLOPs
    labels = axes.get_legend_handles_labels()[1]
    assert "no bf16 peak (1)" in labels and len(labels) == 4  # memory, fp32, a's bound, b
