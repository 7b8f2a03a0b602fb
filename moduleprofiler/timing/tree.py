"""The model tree as text, each module annotated with columns of numbers."""

from __future__ import annotations

import math
from collections.abc import Sequence

from moduleprofiler.timing.results import ModelLayout


def format_ms(value: float | None) -> str:
    """A time in ms with 3 significant decimals' worth of precision, ``-`` when missing."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if value >= 100:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.3f}"
    return f"{value:.4f}"


def render_tree(layout: ModelLayout, headers: Sequence[str],
                rows: Sequence[Sequence[str]], footer: Sequence[str] = ()) -> str:
    """One line per module (tree order): ``name (Type)`` then the ``rows[i]`` cells under
    ``headers``, right-aligned; ``footer`` lines are appended."""
    labels: list[str] = []
    n = len(layout.paths)
    children = [layout.children(i) for i in range(n)]
    order: list[int] = []

    def walk(i: int, prefix: str, last: bool, top: bool) -> None:
        name = "__root__" if layout.paths[i] == "" else layout.paths[i].rpartition(".")[2]
        branch = "" if top else ("└─ " if last else "├─ ")
        labels.append(f"{prefix}{branch}{name} ({layout.types[i]})")
        order.append(i)
        kids = children[i]
        for k, child in enumerate(kids):
            extension = "" if top else ("   " if last else "│  ")
            walk(child, prefix + extension, k == len(kids) - 1, False)

    walk(0, "", True, True)
    width = max(len(label) for label in [*labels, "module"])
    widths = [max(len(header), *(len(rows[i][c]) for i in range(n)))
              for c, header in enumerate(headers)]
    lines = ["  ".join([f"{'module':<{width}}", *(f"{h:>{w}}" for h, w in zip(headers, widths))])]
    lines.append("-" * len(lines[0]))
    for label, i in zip(labels, order):
        cells = [f"{cell:>{w}}" for cell, w in zip(rows[i], widths)]
        lines.append("  ".join([f"{label:<{width}}", *cells]))
    lines.extend(footer)
    return "\n".join(lines)
