"""A view as an HTML ``<table>`` through pandas ``Styler``: text escaped, numbers formatted at
the last step, percentage columns drawn as in-cell bars. With ``sortable`` each number cell
carries its raw value (``<span data-v="...">``) for the report's sorting script. Each table
has its own id, new at every rendering unless one is given, so that the ``Styler`` rules of
two tables on one page (``#T_<id>_row0_col3``) never reach each other."""

from __future__ import annotations

import html
import re
import uuid
from typing import Any

import pandas as pd

from moduleprofiler.export.cells import UNICODE, Formatter, Glyphs, formatter
from moduleprofiler.export.units import is_missing
from moduleprofiler.export.view_data import ViewData

BAR_COLOR = "#9ecae1"
RAW = Glyphs(missing="")
"""Raw tables (the 0.0.4 writers) leave unknown cells empty, as pandas does."""


def _with_raw(format_cell: Formatter) -> Formatter:
    def cell(value: Any) -> str:
        raw = "" if is_missing(value) else repr(float(value))
        return f'<span data-v="{raw}">{html.escape(format_cell(value))}</span>'

    return cell


def _escaped(format_cell: Formatter) -> Formatter:
    return lambda value: html.escape(format_cell(value))


def unique_id() -> str:
    """A new element id: ``mp`` and 12 random hex digits (random rather than counted, so
    that outputs of an earlier notebook kernel, still on the page, do not clash)."""
    return f"mp{uuid.uuid4().hex[:12]}"


def render_html_table(view: ViewData, *, sortable: bool = False,
                      table_id: str | None = None) -> str:
    """The view's shown columns as an escaped HTML table (``id="T_<table_id>"``, a
    :func:`unique_id` by default)."""
    table_id = unique_id() if table_id is None else table_id
    specs = view.specs(view.data_columns)
    frame = view.frame.loc[:, list(specs)].copy()
    glyphs = RAW if view.raw else UNICODE
    formatters: dict[str, Formatter] = {}
    bars: list[str] = []
    for name, spec in specs.items():
        format_cell = formatter(spec, glyphs, raw=view.raw)
        if spec.numeric:
            formatters[spec.label] = _with_raw(format_cell) if sortable else _escaped(format_cell)
            if spec.kind == "percent" and not view.raw:
                frame[name] = pd.to_numeric(frame[name], errors="coerce").astype(float)
                bars.append(spec.label)
        else:
            frame[name] = [format_cell(value) for value in frame[name]]
    frame.columns = [spec.label for spec in specs.values()]
    numeric = [spec.label for spec in specs.values() if spec.numeric]
    # no na_rep: it would replace the formatters on unknown cells, and a sortable unknown
    # cell needs its empty data-v (sorted last), not a bare dash the script compares as text
    styler = frame.style.format(formatters)
    styler = styler.format(escape="html", subset=[s.label for s in specs.values()
                                                  if not s.numeric])
    styler = styler.format_index(escape="html", axis=1).hide(axis="index")
    styler = styler.set_uuid(re.sub(r"\W", "_", table_id))
    styler = styler.set_table_attributes(f'class="mp-table{" sortable" if sortable else ""}"')
    if numeric:
        styler = styler.set_properties(subset=numeric, **{"text-align": "right"})
    if bars:
        styler = styler.bar(subset=bars, color=BAR_COLOR, vmin=0, vmax=100, height=70,
                            width=100)
    return str(styler.to_html())


def render_html(view: ViewData, *, sortable: bool = False, table_id: str | None = None) -> str:
    """The view's table (:func:`render_html_table`), then its notes, one ``<p
    class="mp-note">`` each: a table pasted on its own must still say which of its numbers
    are lower bounds and why a share is unknown, as the Markdown and LaTeX ones do (the
    report and the notebook print the notes themselves; the 0.0.4 raw tables stay bare)."""
    table = render_html_table(view, sortable=sortable, table_id=table_id)
    if view.raw or not view.notes:
        return table
    notes = "".join(f'<p class="mp-note">note: {html.escape(note)}</p>\n' for note in view.notes)
    return table + notes
