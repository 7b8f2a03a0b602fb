"""A view as aligned terminal text: plain ASCII by default, optional ANSI colour."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

from moduleprofiler.export.aggregate import GROUPING, UNHOOKED
from moduleprofiler.export.cells import ASCII, UNICODE, Glyphs, formatter
from moduleprofiler.export.columns import column_spec
from moduleprofiler.export.tree import (
    ASCII_BRANCHES,
    UNICODE_BRANCHES,
    parents,
    prefixes,
    relative_name,
)

if TYPE_CHECKING:
    from moduleprofiler.export.view import View

MAX_SHAPE_WIDTH = 40
"""Shape cells longer than this are cut with ``...`` (the data keeps the whole tree)."""

_BOLD, _DIM, _RED, _YELLOW, _CYAN, _RESET = "1", "2", "31", "33", "36", "0"


def supports_color(stream: IO[str]) -> bool:
    """A terminal that accepts ANSI colour: ``stream`` is a tty, ``NO_COLOR`` is unset and
    ``TERM`` is not ``dumb``."""
    if "NO_COLOR" in os.environ or os.environ.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def _paint(text: str, code: str | None, color: bool) -> str:
    return f"\x1b[{code}m{text}\x1b[{_RESET}m" if color and code and text.strip() else text


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _tree_labels(view: View, unicode: bool) -> tuple[list[str], list[str]]:
    """``(prefix, label)`` per row: ``name (Type)``, ``xN`` for modules called N > 1 times,
    ``[not called]`` for modules that never ran (a grouping of called children did run),
    ``[not hooked]`` for TorchScript submodules (counted in their ancestor)."""
    names = [str(p) for p in view.frame["module"]]
    types = [str(t) for t in view.frame["type"]]
    calls = list(view.frame["calls"]) if "calls" in view.frame else [1] * len(names)
    sources = list(view.frame["ops_source"]) if "ops_source" in view.frame else [None] * len(
        names)
    parent_of = parents(names)
    drawn = prefixes(names, UNICODE_BRANCHES if unicode else ASCII_BRANCHES)
    labels = []
    for index, name in enumerate(names):
        ancestor = parent_of[index]
        short = relative_name(name, names[ancestor] if ancestor is not None else None)
        label = f"{short} ({types[index]})"
        count = calls[index]
        if sources[index] == UNHOOKED:
            label += " [not hooked]"
        elif count == 0 and sources[index] != GROUPING:
            label += " [not called]"
        elif count > 1:
            label += f" x{count}"
        labels.append(label)
    return drawn, labels


@dataclass
class _Column:
    header: str
    cells: list[str]
    right: bool
    codes: list[str | None]


def _code(kind: str, value: Any, cell: str, missing: str) -> str | None:
    """Dim for unknown; for shares below 100 %: red from 10 %, yellow from 1 %."""
    if cell == missing:
        return _DIM
    if kind not in ("percent", "fraction"):
        return None
    share = float(value) * (100 if kind == "fraction" else 1)
    return None if share >= 100 else _RED if share >= 10 else _YELLOW if share >= 1 else None


def _data_columns(view: View, glyphs: Glyphs) -> list[_Column]:
    out = []
    for name, spec in view.specs().items():
        if view.kind == "tree" and name in ("module", "type"):
            continue
        format_cell = formatter(spec, glyphs, raw=view.raw)
        values = list(view.frame[name])
        cells = [format_cell(value) for value in values]
        if spec.kind == "shape":
            cells = [_cut(cell, MAX_SHAPE_WIDTH) for cell in cells]
        codes = [_code(spec.kind, value, cell, glyphs.missing)
                 for value, cell in zip(values, cells)]
        out.append(_Column(spec.label, cells, spec.numeric, codes))
    return out


def render_text(view: View, *, color: bool = False, unicode: bool = False) -> str:
    """The view as an aligned table; a tree view draws its modules as a tree."""
    glyphs = UNICODE if unicode else ASCII
    columns = _data_columns(view, glyphs)
    drawn: list[str] = []
    labels: list[str] = []
    if view.kind == "tree":
        drawn, labels = _tree_labels(view, unicode)
        first = [d + label for d, label in zip(drawn, labels)]
        columns.insert(0, _Column("module", first, False, [None] * len(first)))
    widths = [max([len(c.header), *(len(cell) for cell in c.cells)]) for c in columns]

    def pad(text: str, width: int, right: bool) -> str:
        return text.rjust(width) if right else text.ljust(width)

    out = ["  ".join(_paint(pad(c.header, w, c.right), _BOLD, color)
                     for c, w in zip(columns, widths)).rstrip()]
    out.append(_paint(("─" if unicode else "-") * (sum(widths) + 2 * (len(widths) - 1)),
                      _DIM, color))
    for row in range(len(view.frame)):
        parts = []
        for index, (column, width) in enumerate(zip(columns, widths)):
            cell = pad(column.cells[row], width, column.right)
            if index == 0 and drawn and color:
                rest = cell[len(drawn[row]) + len(labels[row]):]
                cell = _paint(drawn[row], _DIM, color) + _paint(labels[row], _CYAN, color) + rest
            else:
                cell = _paint(cell, column.codes[row], color)
            parts.append(cell)
        out.append("  ".join(parts).rstrip())
    out.extend(_paint(text, _DIM, color) for text in _footer(view, glyphs))
    return "\n".join(out)


def _footer(view: View, glyphs: Glyphs) -> list[str]:
    lines = []
    if view.totals:
        parts = []
        for name, value in view.totals.items():
            spec = column_spec(name)
            parts.append(f"{spec.label} {formatter(spec, glyphs, raw=view.raw)(value)}")
        lines.append("total: " + ", ".join(parts))
    lines.extend(f"note: {note}" for note in view.notes)
    return lines
