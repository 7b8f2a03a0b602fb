"""The built-in formats (entries of :data:`~moduleprofiler.export.format_table.FORMATS`) and
the one way a whole profile is written in any of them.

| format | suffixes | a view | a profile |
|---|---|---|---|
| csv | .csv | the shown columns, raw numbers | the tidy frame (``aggregate=``) |
| json | .json | (none) | the whole profile, reloadable |
| markdown | .md .markdown | a pipe table, human units | ``profile.table()`` |
| html | .html .htm | a ``<table>`` | the self-contained report |
| latex | .tex .latex | a booktabs table that fits the page | ``profile.table()`` |
| text | .txt .text | aligned text | ``profile.tree()`` |
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from moduleprofiler.export.csv_table import render_csv
from moduleprofiler.export.format_table import (
    FORMATS,
    get_format,
    infer_format,
    register_format,
    split_options,
)
from moduleprofiler.export.frame import profile_frame
from moduleprofiler.export.html_table import render_html_table
from moduleprofiler.export.io import Buffer, PathLike, emit
from moduleprofiler.export.json_io import json_text
from moduleprofiler.export.latex import render_latex
from moduleprofiler.export.markdown import render_markdown
from moduleprofiler.export.report import report_text
from moduleprofiler.export.select import table_view, tree_view
from moduleprofiler.export.text import render_text
from moduleprofiler.export.view import View

if TYPE_CHECKING:
    from moduleprofiler.records import Aggregate
    from moduleprofiler.records import ProfileData as Profile

register_format("csv", (".csv",), render_csv, view="frame")
register_format("json", (".json",), None, render_profile=json_text)
register_format("markdown", (".md", ".markdown"), render_markdown)
register_format("html", (".html", ".htm"), render_html_table, render_profile=report_text)
register_format("latex", (".tex", ".latex"), render_latex)
register_format("text", (".txt", ".text"), render_text, view="tree")


def frame_view(profile: Profile, aggregate: Aggregate = "call") -> View:
    """Every column of the tidy frame of ``aggregate``, as a view."""
    frame = profile_frame(profile, aggregate)
    return View(frame=frame, columns=tuple(frame.columns), kind="table")


_PROFILE_VIEWS = {"tree": tree_view, "table": table_view, "frame": frame_view}


def export_profile(profile: Profile, format: str, buf: Buffer = None,
                   **options: Any) -> str | None:
    """``profile`` in ``format`` (a name or suffix of :data:`FORMATS`). ``options`` go to the
    renderer (its keyword-only parameters: ``caption``, ``unicode``, ``title``...) or to the
    view (``max_depth``, ``columns``, ``aggregate``...)."""
    entry = get_format(format)
    if entry.render_profile is not None:
        return emit(entry.render_profile(profile, **options), buf)
    assert entry.render is not None  # register_format requires one of the two
    render, view_options = split_options(options, entry.render)
    view = _PROFILE_VIEWS[entry.view](profile, **view_options)  # type: ignore[operator]
    return emit(entry.render(view, **render), buf)


def save_profile(profile: Profile, path: PathLike, format: str | None = None,
                 **options: Any) -> None:
    """Write ``profile`` to ``path`` in ``format`` (default: inferred from the suffix)."""
    export_profile(profile, format if format is not None else infer_format(path), path,
                   **options)


__all__ = ["FORMATS", "export_profile", "frame_view", "save_profile"]
