"""Draw the terminal screenshots of the docs: GPT-2's module tree as ``print(profile)`` shows
it in an 80- and a 120-column terminal (``gpt2-tree-80.png``, ``gpt2-tree-120.png``).

    python docs/img/make_images.py [OUTPUT_DIR]      # default: docs/img

GPT-2 (124 M parameters) is built from ``GPT2Config()`` on the meta device, so nothing is
downloaded or allocated, and profiled on 16 tokens. The text is drawn as it is printed, in a
window exactly as wide as the terminal, with matplotlib (the ``plot`` extra).

The other pictures of the docs are drawn by tests: ``UPDATE_SCREENSHOT=1 python -m pytest
tests/export`` refreshes the LaTeX page (pdflatex + pdftoppm), the notebook views and the HTML
report (headless Chromium) and the GPT-2 figure.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from transformers import GPT2Config, GPT2LMHeadModel

from moduleprofiler import ModuleProfiler

FONT_PT = 10.0
LINE = 1.25
"""Line height, in font sizes."""
PAD_PT = 8.0
DPI = 150
BACKGROUND, FOREGROUND, BAR = "#1e1e1e", "#d4d4d4", "#3c3c3c"


def gpt2_tree_text(columns: int, fold: bool = True) -> str:
    """``print(profile)`` of GPT-2 (``GPT2Config()``, 1 x 16 tokens) in ``columns`` columns
    (0: no limit)."""
    with torch.device("meta"):
        model = GPT2LMHeadModel(GPT2Config())
    ids = torch.zeros(1, 16, dtype=torch.long, device="meta")
    profile = ModuleProfiler().profile(model, {"input_ids": ids})
    return profile.to_text(width=columns, fold=fold) or ""


def terminal_png(text: str, columns: int, path: Path, title: str) -> None:
    """``text`` drawn in a dark terminal window ``columns`` characters wide (a title bar above);
    a ``ValueError`` if a line would not fit."""
    lines = text.splitlines()
    widest = max(len(line) for line in lines)
    if widest > columns:
        raise ValueError(f"a line of {widest} characters does not fit {columns} columns")
    line_pt, bar_pt = LINE * FONT_PT, 2.0 * FONT_PT
    figure = Figure(dpi=DPI, facecolor=BACKGROUND)
    canvas = FigureCanvasAgg(figure)
    # the window is as wide as a full line is drawn (glyphs snap to whole pixels)
    probe = figure.text(0, 0, "M" * columns, family="DejaVu Sans Mono", fontsize=FONT_PT)
    width_pt = probe.get_window_extent(canvas.get_renderer()).width * 72 / DPI \
        + 2 * PAD_PT
    probe.remove()
    height_pt = bar_pt + len(lines) * line_pt + 2 * PAD_PT
    figure.set_size_inches(width_pt / 72, height_pt / 72)
    to_x, to_y = 1 / width_pt, 1 / height_pt
    figure.add_artist(Rectangle((0, 1 - bar_pt * to_y), 1, bar_pt * to_y,  # the title bar
                                transform=figure.transFigure, facecolor=BAR, edgecolor="none"))
    figure.text(0.5, 1 - bar_pt / 2 * to_y, title, ha="center", va="center",
                color=FOREGROUND, family="DejaVu Sans", fontsize=FONT_PT * 0.9)
    for row, line in enumerate(lines):
        top = bar_pt + PAD_PT + row * line_pt
        figure.text(PAD_PT * to_x, 1 - top * to_y, line, ha="left", va="top",
                    color=FOREGROUND, family="DejaVu Sans Mono", fontsize=FONT_PT)
    figure.savefig(path, dpi=DPI, facecolor=BACKGROUND)


def main(out: Path) -> list[Path]:
    """Draw the screenshots into ``out``; returns their paths."""
    written = []
    for columns in (80, 120):
        path = out / f"gpt2-tree-{columns}.png"
        terminal_png(gpt2_tree_text(columns), columns, path,
                     f"print(profile): GPT-2, {columns} columns")
        written.append(path)
    return written


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent
    for written_path in main(target):
        print(written_path)
