"""Figures (``profile.plot``) rendered with matplotlib's Agg backend: their size, their
labels, the values of their bars, tick labels that never overlap in a 6.4 x 4.8 in figure,
the files they save, and the clear error without matplotlib."""

from __future__ import annotations

import os
import struct
import sys
from itertools import combinations
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from moduleprofiler import ModuleProfiler, Profile
from tests.export import real_profiles
from tests.export.profiles import tiny

pytest.importorskip("matplotlib")
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure


def drawn(figure: Figure) -> Any:
    """Draw ``figure`` with Agg; its renderer."""
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    return canvas.get_renderer()


def tick_labels(axis: Any) -> list[str]:
    return [label.get_text() for label in axis.get_ticklabels() if label.get_text()]


def bars(figure: Figure) -> list[Any]:
    return list(figure.axes[0].patches)


def test_ops_by_type_match_an_independent_flop_count() -> None:
    figure = real_profiles.resnet18().plot("type", "flops", top=None)
    values = [bar.get_width() for bar in bars(figure)]
    labels = tick_labels(figure.axes[0].yaxis)
    assert labels[0] == "Conv2d" and "Linear" in labels
    # FlopCounterMode counts 2 x MACs of the convolutions and of fc's matrix product (the
    # convolutions have no bias; fc's bias is ignored by both)
    from torchvision.models import resnet18

    with FlopCounterMode(display=False) as counter:
        resnet18(weights=None)(torch.randn(1, 3, 224, 224))
    assert sum(values) == counter.get_total_flops()
    # fc: 1 row x 512 inputs x 1000 outputs = 512,000 MACs = 1,024,000 FLOPs
    assert values[labels.index("Linear")] == 1_024_000
    # the 7 other types (BatchNorm2d, ReLU, MaxPool2d, the containers...) do no MAC: no bar
    assert labels == ["Conv2d", "Linear"]
    assert figure.axes[0].get_title() == ("FLOPs (2·MACs) by module type\n"
                                          "(7 types with none, left out)")


def test_zero_rows_are_left_out_and_counted() -> None:
    # GPT-2 small, 16 tokens: of its 10 module types only Conv1D (the projections) and
    # GPT2Attention (its two matrix products) do MACs; the other 8 drew empty bars
    figure = real_profiles.gpt2().plot("type", "flops")
    assert tick_labels(figure.axes[0].yaxis) == ["Conv1D", "GPT2Attention"]
    # attention's products per layer: 2 x 12 heads x 16 x 16 x 64 MACs = 393,216 MACs,
    # x 12 layers x 2 = 9,437,184 FLOPs
    assert [bar.get_width() for bar in bars(figure)][1] == 2 * 12 * 2 * 12 * 16 * 16 * 64
    assert figure.axes[0].get_title() == ("FLOPs (2·MACs) by module type\n"
                                          "(8 types with none, left out)")
    # by top-level module: resnet18's bn1, relu, maxpool and avgpool do no MAC: 6 bars of 10
    by_module = real_profiles.resnet18().plot("module", "macs")
    assert tick_labels(by_module.axes[0].yaxis) == [
        "layer1 (Sequential)", "layer2 (Sequential)", "layer3 (Sequential)",
        "layer4 (Sequential)", "conv1 (Conv2d)", "fc (Linear)"]
    assert by_module.axes[0].get_title().endswith("(4 modules with none, left out)")


def test_ops_by_top_level_module() -> None:
    figure = real_profiles.resnet18().plot("module")
    labels = tick_labels(figure.axes[0].yaxis)
    values = dict(zip(labels, (bar.get_width() for bar in bars(figure))))
    assert len(labels) == 10  # the 10 children of the root, none merged into "other"
    assert labels[0] == "layer1 (Sequential)"  # the largest first
    # fc: 1000 x (2 x 512 - 1) multiplies and adds, plus 1000 bias adds = 1,024,000 ops
    assert values["fc (Linear)"] == 1_024_000
    assert figure.axes[0].get_xlabel() == "ops (with children)"
    top3 = real_profiles.resnet18().plot("module", "params", top=3)
    # relu, maxpool and avgpool hold no parameter: 7 bars, the 3 largest and "other (4)"
    assert tick_labels(top3.axes[0].yaxis)[-1] == "other (4)"


def test_layers_in_execution_order() -> None:
    figure = real_profiles.resnet18().plot("layer")
    heights = [bar.get_height() for bar in bars(figure)]
    # modules that call no other: stem conv1, bn1, relu, maxpool (4); 8 basic blocks x conv1,
    # bn1, relu, conv2, bn2 (40); 3 downsample convolutions and norms (6); avgpool, fc (2);
    # plus the 8 blocks themselves, whose residual add is their own work: 60 layers
    assert len(heights) == 60
    labels = tick_labels(figure.axes[0].xaxis)
    assert labels[:2] == ["conv1", "maxpool"]  # every third name fits under 60 bars
    # conv1: 64 x 112 x 112 outputs x (2 x 3 x 7 x 7 - 1) = 235,225,088 ops; fc last
    assert heights[0] == 64 * 112 * 112 * (2 * 3 * 7 * 7 - 1) and heights[-1] == 1_024_000
    # layer1.0, right after maxpool: its residual add, 64 x 56 x 56 = 200,704 ops
    assert heights[4] == 64 * 56 * 56
    assert sum(heights) == real_profiles.resnet18().total_ops  # no own work left out
    # a block has no parameters of its own: by parameters, only the 52 modules that call none
    assert len(bars(real_profiles.resnet18().plot("layer", "params"))) == 52


def test_time_vs_flops_needs_timing_and_plots_it() -> None:
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    x = torch.randn(8, 64)
    profiler = ModuleProfiler()
    profile = profiler.profile(model, x)
    with pytest.raises(ValueError, match="with_timing"):
        profile.plot("time_vs_flops")
    with pytest.raises(ValueError, match="with_timing"):
        profile.plot("type", "time")
    timed = profile.with_timing(profiler.time_modules(model, x, num_iters=5, drop_first=1,
                                                      warmup_seconds=0.0))
    figure = timed.plot("time_vs_flops")
    points = figure.axes[0].collections[0].get_offsets()
    # 8 rows x 64 x 256 = 131,072 MACs and 8 x 256 x 10 = 20,480 MACs; the ReLU has none
    assert sorted(float(x) for x, _ in points) == [2 * 20_480, 2 * 131_072]
    assert all(float(y) > 0 for _, y in points)
    assert "1 more with no FLOPs or no time" in figure.axes[0].get_title()
    by_type = timed.plot("type", "time")
    assert {"Linear", "ReLU"} <= set(tick_labels(by_type.axes[0].yaxis))  # and the root


def test_time_vs_flops_without_a_point_still_draws() -> None:
    # a ReLU has no FLOPs and a timing result alone has no counts: no point on the log axes,
    # which matplotlib cannot draw; the figure must still show (and save) with its title
    relu, x = nn.ReLU(), torch.randn(3, 4)
    profiler = ModuleProfiler()
    timing = profiler.time_modules(relu, x, num_iters=3, drop_first=1, warmup_seconds=0.0,
                                   progress=False)
    for timed in (profiler.profile(relu, x).with_timing(timing), timing):
        figure = timed.plot("time_vs_flops")
        drawn(figure)
        assert len(figure.axes[0].collections[0].get_offsets()) == 0
        assert figure.axes[0].get_title() == (
            "Time vs FLOPs per layer (0 layers)\n(1 more with no FLOPs or no time, not drawn)")


def test_unknown_values_are_not_drawn_as_zero() -> None:
    figure = tiny().plot("type")
    assert "Custom" not in tick_labels(figure.axes[0].yaxis)
    assert "unknown, not drawn" in figure.axes[0].get_title()


class _MatrixExp(nn.Module):
    """An operator without a formula: the counts of every module around it are lower bounds."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.matrix_exp(x)


def test_a_bar_that_is_a_lower_bound_says_so() -> None:
    from moduleprofiler.export.figures import plot_summary

    model = nn.Sequential(nn.Sequential(nn.Linear(4, 4), _MatrixExp()), nn.Linear(4, 4))
    partial = ModuleProfiler().profile(model, torch.randn(4, 4))
    figure = partial.plot("module", "macs")
    # each Linear: 4 x 4 x 4 = 64 MACs; the first block's 64 bounds its MACs from below
    assert [float(bar.get_width()) for bar in bars(figure)] == [64, 64]
    assert tick_labels(figure.axes[0].yaxis) == ["\u2265 0 (Sequential)", "1 (Linear)"]
    assert figure.axes[0].get_title() == (
        "MACs by top-level module\n(\u2265: a lower bound, work without a formula)")
    # a summary: the partial model's MACs and FLOPs panels mark it, its params panel not
    exact = ModuleProfiler().profile(nn.Linear(4, 4), torch.randn(4, 4))
    summary = plot_summary({"partial": partial, "exact": exact})
    assert [tick_labels(ax.yaxis) for ax in summary.axes] == [
        ["partial", "exact"], ["\u2265 partial", "exact"], ["\u2265 partial", "exact"]]
    assert [ax.get_xlabel() for ax in summary.axes] == [
        "params", "MACs (\u2265: a lower bound, work without a formula)",
        "FLOPs (2·MACs) (\u2265: a lower bound, work without a formula)"]
    # 2 Linear(4, 4): 2 x 20 = 40 parameters; MACs 64 + 64 = 128 (a lower bound), FLOPs 256
    assert [float(bar.get_width()) for bar in summary.axes[1].patches] == [128, 64]


CHARTS = [("resnet18", "type", "ops"), ("resnet18", "module", "params"),
          ("resnet18", "layer", "ops"), ("gpt2", "type", "macs"), ("gpt2", "module", "ops"),
          ("gpt2", "layer", "flops"), ("vit_b_16", "layer", "params")]


@pytest.mark.parametrize(("model", "kind", "metric"), CHARTS)
def test_tick_labels_never_overlap(model: str, kind: str, metric: str) -> None:
    profile: Profile = getattr(real_profiles, model)()
    figure = profile.plot(kind, metric)  # type: ignore[arg-type]
    renderer = drawn(figure)
    assert tuple(figure.get_size_inches()) == (6.4, 4.8)
    ax = figure.axes[0]
    assert ax.get_title() and (ax.get_xlabel() or ax.get_ylabel())
    page = figure.bbox
    for axis in (ax.xaxis, ax.yaxis):
        low, high = sorted(axis.get_view_interval())
        # matplotlib keeps labels for ticks beyond the axis ends, but does not draw them
        labels = [label for location, label in zip(axis.get_ticklocs(), axis.get_ticklabels())
                  if label.get_visible() and label.get_text() and low <= location <= high]
        assert len(labels) >= 2
        boxes = [label.get_window_extent(renderer) for label in labels]
        for first, second in combinations(boxes, 2):
            assert not first.overlaps(second), (model, kind, first, second)
        for box in boxes:  # nothing cut off at the edge of the figure
            assert box.x0 >= page.x0 - 1 and box.x1 <= page.x1 + 1
            assert box.y0 >= page.y0 - 1 and box.y1 <= page.y1 + 1


def test_save_png_svg_pdf(tmp_path: Path) -> None:
    profile = real_profiles.resnet18()
    profile.plot("module", path=tmp_path / "ops.png")
    profile.plot("module", path=tmp_path / "ops.svg")
    profile.plot("module", path=tmp_path / "ops.pdf")
    png = (tmp_path / "ops.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", png[16:24]) == (1280, 960)  # 6.4 x 4.8 in at 200 dpi
    svg = (tmp_path / "ops.svg").read_text()
    assert 'width="460.8pt" height="345.6pt"' in svg  # 6.4 x 72, 4.8 x 72
    assert (tmp_path / "ops.pdf").read_bytes()[:5] == b"%PDF-"
    with pytest.raises(ValueError, match="path"):
        profile.plot("module", path=tmp_path / "ops.jpg")


def test_bad_arguments_are_named() -> None:
    profile = tiny()
    with pytest.raises(ValueError, match="kind"):
        profile.plot("pie")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="top"):
        profile.plot("type", top=0)
    with pytest.raises(ValueError, match="depth"):
        profile.plot("module", depth=-1)
    with pytest.raises(KeyError, match="unknown column"):
        profile.plot("type", "bogus")


def test_draws_into_given_axes() -> None:
    figure = Figure(figsize=(8, 3))
    left, right = figure.subplots(1, 2)
    assert tiny().plot("module", ax=left) is figure
    assert len(right.patches) == 0 and len(left.patches) > 0


def test_without_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r'pip install matplotlib .*pip install "\.\[plot\]"'):
        tiny().plot()
    from moduleprofiler.export.figures import plot_summary

    with pytest.raises(ImportError, match=r'plot_summary needs matplotlib: pip install '
                                          r'matplotlib .*pip install "\.\[plot\]"'):
        plot_summary([tiny()])
    page = tiny().to_html() or ""  # the HTML report draws its charts itself
    assert page.count('<figure class="chart"') >= 2


DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"


@pytest.mark.skipif(not os.environ.get("UPDATE_SCREENSHOT"),
                    reason="set UPDATE_SCREENSHOT=1 to refresh docs/img/figure-gpt2-layers.png")
def test_docs_figures() -> None:
    real_profiles.gpt2().plot("layer", "flops", path=DOCS_IMG / "figure-gpt2-layers.png")


def test_summary_figure_one_panel_per_quantity(tmp_path: Path) -> None:
    from moduleprofiler.export.figures import plot_summary

    small = ModuleProfiler().profile(nn.Linear(5, 7), torch.randn(2, 5))
    big = ModuleProfiler().profile(nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3)),
                                   torch.randn(2, 5))
    figure = plot_summary({"small": small, "big": big}, path=tmp_path / "models.svg")
    assert [ax.get_xlabel() for ax in figure.axes] == ["params", "MACs", "FLOPs (2·MACs)"]
    for ax in figure.axes:  # one bar per model, in the table's order, same colour everywhere
        assert tick_labels(ax.yaxis) == ["small", "big"]
        assert [bar.get_facecolor() for bar in ax.patches] == \
            [bar.get_facecolor() for bar in figure.axes[0].patches]
    widths = [[float(bar.get_width()) for bar in ax.patches] for ax in figure.axes]
    # params: 5 x 7 + 7 = 42; 42 + 7 x 3 + 3 = 66
    # MACs: 2 rows x 5 x 7 = 70; 70 + 2 x 7 x 3 = 112; FLOPs twice that
    assert widths == [[42, 66], [70, 112], [140, 224]]
    assert figure.get_suptitle() == "Model comparison"
    assert (tmp_path / "models.svg").read_text().startswith("<?xml")


def test_summary_figure_draws_latency_when_present_and_names_bad_arguments() -> None:
    from moduleprofiler.export.figures import plot_summary

    model, x = nn.Sequential(nn.Linear(8, 8), nn.ReLU()), torch.randn(4, 8)
    profiler = ModuleProfiler()
    timed = profiler.profile(model, x).with_timing(
        profiler.time_modules(model, x, num_iters=3, drop_first=1, warmup_seconds=0.0))
    figure = plot_summary([timed, tiny()])
    labels = [ax.get_xlabel() for ax in figure.axes]
    # tiny()'s custom module has no formula: its MACs and FLOPs are lower bounds
    bound = " (\u2265: a lower bound, work without a formula)"
    assert labels[:3] == ["params", "MACs" + bound, "FLOPs (2·MACs)" + bound]
    assert len(labels) > 3
    time_panel = next(ax for ax in figure.axes if ax.get_xlabel().startswith("time"))
    # tiny() has no timing: its latency is unknown, not a bar of 0
    assert len(time_panel.patches) == 1 and "(1 unknown, not drawn)" in time_panel.get_xlabel()
    assert tick_labels(time_panel.yaxis) == ["Sequential"]
    with pytest.raises(KeyError, match="argument metrics"):
        plot_summary([tiny()], ["bogus"])
    with pytest.raises(TypeError, match="argument metrics"):
        plot_summary([tiny()], "params")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="argument profiles"):
        plot_summary([])
    with pytest.raises(ValueError, match="path"):
        plot_summary([tiny()], path="models.jpg")


def test_dollar_signs_in_names_and_types_are_drawn_as_themselves() -> None:
    from moduleprofiler.export.figures import plot_summary

    class Dollar(nn.Linear):
        pass

    Dollar.__name__ = "Cost$x^2$"

    class Keys(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            # matplotlib typesets text between two $ as math: "c$x^2$d" was drawn "cx²d",
            # and an unknown command raised ValueError when the figure was drawn
            self.d = nn.ModuleDict({"c$x^2$d": Dollar(2, 2), "p$\\foo{$q": nn.Linear(2, 2)})

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.d["p$\\foo{$q"](self.d["c$x^2$d"](x))

    profile = ModuleProfiler().profile(Keys(), torch.randn(1, 2))
    layers = profile.plot(kind="layer")
    drawn(layers)
    assert tick_labels(layers.axes[0].xaxis) == [r"d.c\$x^2\$d", r"d.p\$\foo{\$q"]
    legend = [text.get_text() for text in layers.legends[0].get_texts()]
    assert r"Cost\$x^2\$" in legend
    by_type = profile.plot(kind="type")
    drawn(by_type)
    assert r"Cost\$x^2\$" in tick_labels(by_type.axes[0].yaxis)
    models = plot_summary({"$\\bad$": profile, "b": profile})
    drawn(models)
    assert tick_labels(models.axes[0].yaxis) == [r"\$\bad\$", "b"]
