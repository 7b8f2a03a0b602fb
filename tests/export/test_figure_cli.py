"""``moduleprofiler MODEL -o figure.png`` (.svg, .pdf): the figure of the shown metric, checked
through the Axes it drew, and the error naming the ``plot`` extra without matplotlib."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from moduleprofiler.cli import main
from moduleprofiler.export import figures

pytest.importorskip("matplotlib")

TINY = "tests.export.cli_models:tiny"
"""4 -> 8 -> 2 MLP (Linear, ReLU, Linear) on a 2x4 input."""


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The figures the command saved (their Axes are checked, not their pixels)."""
    saved: list[Any] = []
    original = figures.save_figure

    def keep(figure: Any, path: Any) -> None:
        saved.append(figure)
        original(figure, path)

    monkeypatch.setattr(figures, "save_figure", keep)
    return saved


def _labels(ax: Any) -> list[str]:
    return [label.get_text() for label in ax.get_yticklabels() if label.get_text()]


def test_png_by_top_level_module(tmp_path: Path, drawn: list[Any],
                                 capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "ops.png"
    assert main([TINY, "-i", "2x4", "-o", str(target)]) == 0
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "wrote" in capsys.readouterr().err
    ax = drawn[0].axes[0]
    assert _labels(ax) == ["0 (Linear)", "2 (Linear)", "1 (ReLU)"]
    # ops: 2 rows x 8 x (2 x 4 - 1) + 2 x 8 bias = 128; 2 x 2 x (2 x 8 - 1) + 2 x 2 = 64;
    # the ReLU's 2 x 8 = 16 comparisons
    assert [bar.get_width() for bar in ax.patches] == [128, 64, 16]
    assert ax.get_xlabel() == "ops (with children)"


def test_the_shown_metric_and_top_types(tmp_path: Path, drawn: list[Any]) -> None:
    # --what params: the metric named; the ReLU holds none: left out
    assert main([TINY, "-i", "2x4", "--what", "params", "-o",
                 str(tmp_path / "params.svg")]) == 0
    ax = drawn[-1].axes[0]
    # 4 x 8 + 8 = 40 and 8 x 2 + 2 = 18 parameters
    assert [bar.get_width() for bar in ax.patches] == [40, 18]
    assert ax.get_title() == "Parameters by top-level module\n(1 module with none, left out)"
    # --sort and --top: the module types ranked by their own FLOPs (2 x MACs)
    assert main([TINY, "-i", "2x4", "--top", "2", "--sort", "flops", "--title", "MLP",
                 "-o", str(tmp_path / "flops.pdf")]) == 0
    assert (tmp_path / "flops.pdf").read_bytes()[:5] == b"%PDF-"
    ax = drawn[-1].axes[0]
    # Linear: 2 x 4 x 8 + 2 x 8 x 2 = 96 MACs = 192 FLOPs; ReLU and Sequential none
    assert _labels(ax) == ["Linear"] and [bar.get_width() for bar in ax.patches] == [192]
    assert ax.get_title() == "MLP"


def test_depth_zero_draws_the_root(tmp_path: Path, drawn: list[Any]) -> None:
    # --depth 0 drew the top-level modules, as --depth 1 does
    assert main([TINY, "-i", "2x4", "--depth", "0", "-o", str(tmp_path / "root.png")]) == 0
    ax = drawn[-1].axes[0]
    # the whole model: 128 + 16 + 64 = 208 ops
    assert [bar.get_width() for bar in ax.patches] == [208]


@pytest.mark.parametrize(("flags", "said"), [
    # each drew one metric and dropped the rest in silence
    (["--what", "io,params,flops"], "draws one metric (params): --what io,flops does not apply"),
    (["--what", "io"], "draws one metric (ops): --what io does not apply"),
    (["--what", "flops", "--sort", "params"], "draws one metric (params): --what flops does "
                                              "not apply"),
    (["--top", "2", "--depth", "1"], "draws --top's module types over every module: --depth "
                                     "does not apply"),
])
def test_what_a_figure_would_not_draw_is_refused(tmp_path: Path, flags: list[str], said: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "f.png"
    assert main([TINY, "-i", "2x4", *flags, "-o", str(target)]) == 2
    assert f"moduleprofiler: error: -o {target} {said}" in capsys.readouterr().err
    assert not target.exists()
    # the passes --what runs stay: the figure draws params of a profile with a backward
    assert main([TINY, "-i", "2x4", "--what", "params,backward", "-o", str(target)]) == 0


def test_without_matplotlib_names_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert main([TINY, "-i", "2x4", "-o", str(tmp_path / "ops.png")]) == 2
    err = capsys.readouterr().err
    assert "pip install matplotlib" in err and 'pip install ".[plot]"' in err
    assert not (tmp_path / "ops.png").exists()
