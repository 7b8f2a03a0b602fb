"""One cell as text, by column kind, for one target (plain text, Markdown, HTML, LaTeX).

This is the last step of every renderer: frames hold raw numbers; these functions turn one
value into a string, in human units, or as the raw value for the 0.0.4 writers' tables. Text
cells (names, types, shapes) come back unescaped; each renderer escapes them for its format.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from moduleprofiler.export.columns import ColumnSpec
from moduleprofiler.export.names import ROOT_NAME
from moduleprofiler.export.units import (
    dtype_text,
    human_bytes,
    human_count,
    human_ms,
    human_number,
    human_params,
    human_percent,
    is_missing,
    shape_text,
    yes_no,
)

RAW_DECIMALS = 6
"""Decimals of a float in a raw cell (what pandas' ``Styler`` prints by default)."""


@dataclass(frozen=True)
class Glyphs:
    """The few characters that differ between targets."""

    micro: str = "µ"
    percent: str = "%"
    missing: str = "-"
    less: str = "<"
    dot: str = "·"
    """The multiplication dot of a header (``FLOPs (2·MACs)``)."""


ASCII = Glyphs(micro="u", dot="x")
UNICODE = Glyphs()
LATEX = Glyphs(micro="\\textmu{}", percent="\\%", missing="--", less="$<$")

LOWER_MARK = "\u2265 "
"""Before the label (or the text) of a figure's bar or a report's card whose value is a lower
bound (work without a formula in it): they have no notes under them, so the value itself says
it, as :attr:`~moduleprofiler.records.ProfileData.lower_bounds` and a CSV row's ``complete``
do."""
BOUND_NOTE = f"{LOWER_MARK.strip()}: a lower bound, work without a formula"
"""What :data:`LOWER_MARK` means, in the title or axis label of a figure that shows it."""

Formatter = Callable[[Any], str]


def _number_formatter(spec: ColumnSpec, glyphs: Glyphs) -> Callable[[Any], str]:
    kind = spec.kind
    if kind == "count":
        return human_params if spec.unit == "params" else human_count
    if kind == "bytes":
        return human_bytes
    if kind == "time":
        return lambda value: human_ms(float(value), glyphs.micro)
    if kind == "percent":
        return lambda value: human_percent(float(value), glyphs.percent, glyphs.less)
    if kind == "fraction":
        return lambda value: human_percent(100 * float(value), glyphs.percent, glyphs.less)
    if kind == "int":
        return lambda value: str(int(value))
    if kind == "ratio":
        return lambda value: f"{float(value):.2f}x"
    if kind == "flag":
        return yes_no
    return human_number


def _text_formatter(spec: ColumnSpec) -> Callable[[Any], str]:
    if spec.kind == "name":
        # the frames hold output names already (module_name of each path): named again, a
        # child registered as ``__root__`` would take the root's name; the root's bare path
        # ``""`` is the one path that is no output name
        return lambda value: str(value) or ROOT_NAME
    if spec.kind == "shape":
        return shape_text
    if spec.kind == "dtype":
        return dtype_text
    return _text


def _text(value: Any) -> str:
    """A text cell; a yes/no in a text column (a time's low confidence) reads as a flag
    column's does, never as Python's ``True``/``False``."""
    if isinstance(value, (bool, np.bool_)):
        return yes_no(value)
    return str(value)


def header(spec: ColumnSpec, glyphs: Glyphs = ASCII) -> str:
    """The column's label as a header in ``glyphs`` (``FLOPs (2xMACs)`` in plain ASCII)."""
    return spec.label.replace("·", glyphs.dot)


def raw_cell(value: Any) -> str:
    """A value as itself: integers and text unchanged, floats with :data:`RAW_DECIMALS`
    decimals, anything else (tuples, dtypes) as ``str``."""
    if isinstance(value, float):
        return f"{value:.{RAW_DECIMALS}f}"
    return str(value)


def formatter(spec: ColumnSpec, glyphs: Glyphs = ASCII, *, raw: bool = False) -> Formatter:
    """``value -> str`` for column ``spec`` (in human units, or :func:`raw_cell` when
    ``raw``); unknown values become ``glyphs.missing``."""
    if raw:
        inner: Formatter = raw_cell
    else:
        inner = _number_formatter(spec, glyphs) if spec.numeric else _text_formatter(spec)
    def format_cell(value: Any) -> str:
        if is_missing(value):
            return glyphs.missing
        return inner(value)

    return format_cell
