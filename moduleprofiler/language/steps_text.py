"""The steps of a profiled generation as a text table that fits its width (what the command
line's ``--generate`` prints): counts in SI units, bytes in IEC units, times in ms; a table
wider than the width hides columns (named in a note), as the profile views do
(:mod:`moduleprofiler.export.fit`); the run's exact totals and the units' conventions follow,
wrapped to the width."""

from __future__ import annotations

from typing import Any

from moduleprofiler.export.cells import formatter, header
from moduleprofiler.export.columns import ColumnSpec, column_spec
from moduleprofiler.export.fit import TextColumn, fit_columns, table_width
from moduleprofiler.export.text import conventions_line, hidden_note, wrap_footer
from moduleprofiler.language.generation import GenerationProfile

_KEYS = ("step", "phase", "module")
"""Columns that say which step a row is: never hidden."""
HIDDEN_FIRST = ("complete", "batch_size", "input_tokens", "ops", "macs", "context_tokens")
"""Columns a narrow table hides first, in this order (the totals below keep the complete flag
and the MACs); then the others from the right: live memory, time, cache, FLOPs last."""
_UNITS = ("ops", "MACs", "FLOPs")
"""The compute units the table shows (the column registry's units), whose conventions the
footer states."""


def _header(spec: ColumnSpec) -> str:
    """A column's header: a count by its unit (``ops``, ``MACs``, ``FLOPs``: a step's row holds
    the step's whole count, where the label, ``self ops``, names a module's own), any other
    column by its label."""
    return spec.unit if spec.kind == "count" and spec.unit else header(spec)


def _total(value: Any) -> str:
    """One number format for the totals line: thousands separators, no exponent (a per-token
    mean of 7,102,421.3 beside a total of 21,307,264, not 7.10242e+06); small values keep six
    significant digits."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 2**53:
            return f"{int(value):,}"
        return f"{value:,.1f}" if abs(value) >= 1e3 else f"{value:,.6g}"
    return str(value)


def render_steps(generation: GenerationProfile, width: int | None) -> str:
    """One row per step (columns no step has a value for, such as time when it was not
    measured, left out), then the run's totals; no line longer than ``width`` (``None``: no
    limit)."""
    frame = generation.to_df().dropna(axis="columns", how="all")
    columns = []
    for name in frame.columns:
        spec = column_spec(name, frame[name].dtype)  # declared by the step or the profile
        show = formatter(spec)
        cells = [show(value) for value in frame[name]]
        columns.append(TextColumn(name, _header(spec), cells, spec.numeric,
                                  "count" if spec.numeric else "text", [None] * len(cells),
                                  identity=name in _KEYS))
    columns, hidden = fit_columns(columns, width, HIDDEN_FIRST)
    widths = [column.width for column in columns]
    lines = ["  ".join(column.aligned(column.header, size)
                       for column, size in zip(columns, widths)).rstrip(),
             "-" * table_width(columns)]
    lines.extend("  ".join(column.aligned(column.cells[row], size)
                           for column, size in zip(columns, widths)).rstrip()
                 for row in range(len(frame)))
    footer = [", ".join(f"{key} {_total(value)}" for key, value in
                        generation.totals().items()
                        if value is not None and key != "model")]
    convention = conventions_line(_UNITS)
    if convention:
        footer.append(convention)
    if hidden:
        footer.append(hidden_note(hidden, width))
    return "\n".join([*lines, *wrap_footer(footer, width)]) + "\n"
