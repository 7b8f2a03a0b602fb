"""A view as aligned terminal text: plain ASCII by default, optional ANSI colour."""

from __future__ import annotations

import os
import re
import textwrap
from collections.abc import Iterable, Sequence
from typing import IO, Any

from moduleprofiler.export.cells import ASCII, UNICODE, Glyphs, formatter, header
from moduleprofiler.export.columns import column_spec
from moduleprofiler.export.fit import TextColumn, fit_columns, table_width, terminal_width
from moduleprofiler.export.names import SHARED_MARK
from moduleprofiler.export.tree import (
    ASCII_BRANCHES,
    UNICODE_BRANCHES,
    parents,
    prefixes,
    relative_name,
)
from moduleprofiler.export.view_data import ViewData
from moduleprofiler.records import GROUPING, UNCALLED, UNHOOKED
from moduleprofiler.validate import check_bool

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


def _tree_labels(view: ViewData, unicode: bool) -> tuple[list[str], list[str]]:
    """``(prefix, label)`` per row: ``name (Type)``, ``xN`` for modules called N > 1 times,
    ``[not called]`` for modules that never ran (a grouping of called children did run),
    ``[not hooked]`` for TorchScript submodules (counted in their ancestor), ``[shared with
    owner]`` for a module registering a parameter another module owns (a tied weight)."""
    names = [str(p) for p in view.frame["module"]]
    types = [str(t) for t in view.frame["type"]]
    calls = list(view.frame["calls"]) if "calls" in view.frame else [1] * len(names)
    # the status of a module never called (:func:`moduleprofiler.records.module_statuses`),
    # which every module frame carries; in a frame without it, a row of no calls never ran
    sources = list(view.frame["ops_source"]) if "ops_source" in view.frame else [
        UNCALLED] * len(names)
    shared = list(view.frame["shared_with"]) if "shared_with" in view.frame else [None] * len(names)
    parent_of = parents(names)
    drawn = prefixes(names, UNICODE_BRANCHES if unicode else ASCII_BRANCHES)
    labels = []
    for index, name in enumerate(names):
        ancestor = parent_of[index]
        short = relative_name(name, names[ancestor] if ancestor is not None else None)
        label = one_line(f"{short} ({types[index]})")
        count = calls[index]
        if sources[index] == UNHOOKED:
            label += " [not hooked]"
        elif count == 0 and sources[index] != GROUPING:
            label += " [not called]"
        elif count > 1:
            label += f" x{count}"
        if isinstance(shared[index], str):  # its params include another module's
            label += SHARED_MARK.format(shared[index])
        labels.append(label)
    return drawn, labels


_CONTROL = {
    **{code: f"\\x{code:02x}" for code in [*range(0x20), *range(0x7F, 0xA0)]},
    # direction overrides, embeddings and isolates reorder the rest of the line on screen
    **{code: f"\\u{code:04x}" for code in [*range(0x202A, 0x202F), *range(0x2066, 0x206A)]},
    ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t",
}
_PRINTED = {code: text for code, text in _CONTROL.items() if code != ord("\n")}


def one_line(text: str) -> str:
    """``text`` with its line breaks, tabs and other control characters written as escapes
    (``a\\nb``, ``\\x1b``, ``\\u202e``): a name holding one (a ``ModuleDict`` key may) would
    break the table's rows and columns, or reach the terminal as a command (``\\x1b[2J``
    clears the screen; ``\\u202e`` prints the rest of the row right to left)."""
    return text.translate(_CONTROL)


def printable(text: str) -> str:
    """``text`` as :func:`one_line` writes it, its line breaks kept (a note's own)."""
    return text.translate(_PRINTED)


def _code(kind: str, value: Any, cell: str, missing: str) -> str | None:
    """Dim for unknown; for shares below 100 %: red from 10 %, yellow from 1 %."""
    if cell == missing:
        return _DIM
    if kind not in ("percent", "fraction"):
        return None
    share = float(value) * (100 if kind == "fraction" else 1)
    return None if share >= 100 else _RED if share >= 10 else _YELLOW if share >= 1 else None


def _data_columns(view: ViewData, glyphs: Glyphs) -> list[TextColumn]:
    out = []
    for name, spec in view.specs().items():
        if view.kind == "tree" and name in ("module", "type"):
            continue
        format_cell = formatter(spec, glyphs, raw=view.raw)
        values = list(view.frame[name])
        cells = [one_line(format_cell(value)) for value in values]
        if spec.kind == "shape":
            cells = [cell if len(cell) <= MAX_SHAPE_WIDTH else cell[: MAX_SHAPE_WIDTH - 3] + "..."
                     for cell in cells]
        codes = [_code(spec.kind, value, cell, glyphs.missing)
                 for value, cell in zip(values, cells)]
        out.append(TextColumn(name, header(spec, glyphs), cells, spec.numeric, spec.kind, codes,
                              identity=name in _NAMES and view.kind != "tree"))
    return out


def render_text(view: ViewData, *, color: bool = False, unicode: bool = False,
                width: int | None = None, fold: bool = True) -> str:
    """The view as an aligned table; a tree view draws its modules as a tree.

    ``width``: the most characters a line may have (``None``: the terminal's width, from
    ``COLUMNS`` or the terminal, 80 when neither is known; ``0``: no limit). A table wider
    than that shortens shapes, hides columns (named in a note) and elides names in the
    middle (:mod:`moduleprofiler.export.fit`); notes are wrapped. ``fold``: a tree shows runs
    of identical numbered sibling blocks as one row, their numbers summed
    (:mod:`moduleprofiler.export.fold`); ``False`` shows every block."""
    check_bool(color, "color")
    check_bool(unicode, "unicode")
    limit = terminal_width(width)
    glyphs = UNICODE if unicode else ASCII
    if fold:
        view = view.folded()
    columns = _data_columns(view, glyphs)
    if view.kind == "tree":
        drawn, labels = _tree_labels(view, unicode)
        first = [d + label for d, label in zip(drawn, labels)]
        columns.insert(0, TextColumn("module", "module", first, False, "name",
                                     [None] * len(first), identity=True, prefixes=drawn))
    columns, hidden = fit_columns(columns, limit, view.optional, kept_columns(view),
                                  flag_columns(view))
    widths = [c.width for c in columns]
    out = ["  ".join(_paint(c.aligned(c.header, w), _BOLD, color)
                     for c, w in zip(columns, widths)).rstrip()]
    out.append(_paint(("─" if unicode else "-") * table_width(columns), _DIM, color))
    for row in range(len(view.frame)):
        parts = []
        for column, size in zip(columns, widths):
            cell = column.aligned(column.cells[row], size)
            if column.prefixes and color:
                drawn_part = column.prefixes[row]
                label = column.cells[row][len(drawn_part):]
                cell = _paint(drawn_part, _DIM, color) + _paint(label, _CYAN, color) \
                    + cell[len(column.cells[row]):]
            else:
                cell = _paint(cell, column.codes[row], color)
            parts.append(cell)
        out.append("  ".join(parts).rstrip())
    if view.frame.empty:  # the per-operator table of a pass that ran no operator is empty too
        out.append("(no aten operator ran)" if "operator" in view.columns
                   else "(no modules match the filters)")
    out.extend(_paint(text, _DIM, color) for text in _footer(view, glyphs, hidden, limit))
    return "\n".join(out)


def kept_columns(view: ViewData) -> tuple[str, ...]:
    """The shown columns hidden last: :attr:`View.keep` and every column a note names by
    its snake_case name (``see low_confidence``): a note must not point at a column the
    table hid. (A plain word such as ``ops`` in a note is prose, not a column's name.)"""
    named = [name for name in view.columns if "_" in name
             and any(re.search(rf"\b{re.escape(name)}\b", note) for note in view.notes)]
    return tuple(dict.fromkeys([*view.keep, *named]))


def flag_columns(view: ViewData) -> dict[str, tuple[str, ...]]:
    """The shown flags on other columns (:attr:`ColumnSpec.qualifies`, a time's low
    confidence), each with the columns it qualifies: hidden with the last of them."""
    return {name: spec.qualifies for name, spec in view.specs(view.columns).items()
            if spec.qualifies}


_NAMES = ("module", "type")
"""The name columns of a flat table: elided in the middle, never hidden."""

_CONVENTIONS = {
    "ops": "ops = multiplies + adds",
    "MACs": "MACs = multiply-accumulates",
    "FLOPs": "FLOPs = 2 x MACs",
}
"""What each compute unit counts (docs/conventions.md), stated under every table that shows
one."""
_KEEP = "\xa0"
"""Joins the words of one phrase of a footer line so that wrapping never splits it."""


def conventions_line(units: Iterable[str]) -> str | None:
    """What the compute units among ``units`` count, as one footer line (``None``: none of
    them shown); each phrase stays whole when :func:`wrap_footer` wraps the line."""
    wanted = set(units)
    shown = [text.replace(" ", _KEEP) for unit, text in _CONVENTIONS.items() if unit in wanted]
    return "; ".join(shown) if shown else None


def hidden_note(hidden: Sequence[str], width: int | None) -> str:
    """The footer line naming the columns a table hid to fit ``width``."""
    return (f"note: hidden to fit {width} columns: {', '.join(hidden)} "
            "(a larger width shows them)")


def wrap_footer(lines: Sequence[str], width: int | None) -> list[str]:
    """Footer lines wrapped to ``width`` (``None``: as they are), continuation lines indented,
    the phrases :func:`conventions_line` joined never split."""
    if width is not None:
        lines = [part for line in lines for part in textwrap.wrap(
            line, width, subsequent_indent="  ", break_on_hyphens=False)]
    return [line.replace(_KEEP, " ") for line in lines]


def totals_line(view: ViewData, glyphs: Glyphs) -> str | None:
    """The ``total: ...`` line under a view (``None`` when it has no totals)."""
    parts = []
    at_least = ">=" if glyphs is ASCII else "\u2265"
    for name, value in view.totals.items():
        spec = column_spec(name)
        bound = at_least if name in view.lower_bounds else ""  # work without a formula
        parts.append(f"{header(spec, glyphs)} {bound}"
                     f"{formatter(spec, glyphs, raw=view.raw)(value)}")
    return "total: " + ", ".join(parts) if parts else None


def _footer(view: ViewData, glyphs: Glyphs, hidden: list[str], width: int | None) -> list[str]:
    lines = [line for line in [totals_line(view, glyphs)] if line]
    convention = conventions_line(column_spec(name.removesuffix("_pct")).unit
                                  for name in [*view.columns, *view.totals])
    if convention and not view.raw:
        lines.append(convention)
    if hidden:
        lines.append(hidden_note(hidden, width))
    lines.extend(f"note: {printable(note)}" for note in (*view.hints, *view.notes))
    return wrap_footer(lines, width)
