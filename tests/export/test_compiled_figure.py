"""plot_compiled: the figure of compare_compiled's result, one pair of bars per module."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from moduleprofiler import Profiler
from moduleprofiler.compiled import compare_compiled, plot_compiled
from moduleprofiler.timing import TimingOptions

pytest.importorskip("matplotlib")

QUICK = TimingOptions(num_iters=4, drop_first=1, warmup_seconds=0.0, progress=False,
                      measure_overhead=False)


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.LayerNorm(16), nn.Linear(16, 16))


@pytest.fixture(scope="module")
def compared():
    return compare_compiled(torch.compile(_model()), torch.randn(8, 16), QUICK)


def test_each_top_level_module_has_its_eager_and_compiled_bar(compared, tmp_path):
    figure = plot_compiled(compared, path=tmp_path / "compiled.png")
    axes = figure.axes[0]
    # 4 top-level modules, two bars each (eager, compiled)
    assert len(axes.patches) == 2 * 4
    assert [label.get_text() for label in axes.get_yticklabels()] == ["0", "1", "2", "3"]
    frame = compared.to_df("module").set_index("module")
    eager = [patch.get_width() for patch in axes.patches[:4]]
    assert eager == pytest.approx([frame.loc[m, "eager_ms"] for m in ("0", "1", "2", "3")])
    # a module with no compiled kernel of its own says so instead of a speed-up
    notes = [text.get_text() for text in axes.texts]
    for module, note in zip(("0", "1", "2", "3"), notes, strict=True):
        if frame.loc[module, "device_ms"] == 0:
            assert note == "fused into an ancestor"
        else:
            assert note.endswith("x")
    assert (tmp_path / "compiled.png").stat().st_size > 0


def test_an_unknown_compiled_time_is_drawn_as_missing_not_as_zero(compared):
    # a bar of 0 and "fused into an ancestor" said the module ran in no kernel of its own
    unknown = compared.with_metrics({"3": {"device_ms": None}})
    axes = plot_compiled(unknown).axes[0]
    compiled = axes.patches[4:]  # after the 4 eager bars
    # compiled bars centred at place + 0.2 for modules 0, 1 and 2 only
    assert [bar.get_y() + bar.get_height() / 2 for bar in compiled] == pytest.approx(
        [0.2, 1.2, 2.2])
    frame = compared.to_df("module").set_index("module")
    assert [bar.get_width() for bar in compiled] == pytest.approx(
        [frame.loc[m, "device_ms"] for m in ("0", "1", "2")])
    assert axes.texts[3].get_text() == "compiled time unknown"


def test_a_profile_without_eager_times_is_refused():
    profile = Profiler().profile(_model(), torch.randn(8, 16))
    with pytest.raises(ValueError, match="compare_compiled"):
        plot_compiled(profile)
