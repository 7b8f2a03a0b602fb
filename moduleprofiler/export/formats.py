"""The one way a whole profile is written in any format of the table
(:data:`~moduleprofiler.export.format_table.FORMATS`).

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

import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from moduleprofiler.export.format_table import (
    FORMATS,
    Format,
    get_format,
    infer_format,
    split_options,
)
from moduleprofiler.export.frame import profile_frame
from moduleprofiler.export.io import Buffer, PathLike, check_path, emit
from moduleprofiler.export.json_io import json_text
from moduleprofiler.export.report import report_text
from moduleprofiler.export.select import table_view, tree_view
from moduleprofiler.export.view import View

if TYPE_CHECKING:
    from moduleprofiler.records import Aggregate
    from moduleprofiler.records import ProfileData as Profile


def frame_view(profile: Profile, aggregate: Aggregate = "call") -> View:
    """Every column of the tidy frame of ``aggregate``, as a view."""
    frame = profile_frame(profile, aggregate)
    return View(frame=frame, columns=tuple(frame.columns), kind="table")


_VIEWS: dict[str, Callable[..., View]] = {"tree": tree_view, "table": table_view,
                                        "frame": frame_view}
"""The views of a profile a format can show (:attr:`Format.view`)."""
_DOCUMENTS: dict[str, Callable[..., str]] = {"report": report_text, "json": json_text}
"""The whole-profile documents (:data:`~moduleprofiler.export.format_table.DOCUMENTS`)."""


def profile_renderer(format: str | Format) -> Callable[..., str] | None:
    """The function that writes a whole profile in ``format`` (the HTML report, the JSON
    document, or a registered format's own ``render_profile``); ``None`` when the format
    writes a view of the profile."""
    entry = format if isinstance(format, Format) else get_format(format)
    return entry.render_profile or _DOCUMENTS.get(entry.view)


def export_profile(profile: Profile, format: str, buf: Buffer = None,
                   **options: Any) -> str | None:
    """``profile`` in ``format`` (a name or suffix of :data:`FORMATS`). ``options`` go to the
    renderer (its keyword-only parameters: ``caption``, ``unicode``, ``title``...) or to the
    view (``max_depth``, ``columns``, ``aggregate``...)."""
    entry = get_format(format)
    document = profile_renderer(entry)
    if document is not None:
        _check_options(entry.name, options, document)
        return emit(document(profile, **options), buf)
    assert entry.render is not None  # register_format requires one of the two
    _check_options(entry.name, options, entry.render, _VIEWS[entry.view])
    render, view_options = split_options(options, entry.render)
    view = _VIEWS[entry.view](profile, **view_options)
    return emit(entry.render(view, **render), buf)


def _check_options(format: str, options: Mapping[str, Any],
                   *writers: Callable[..., Any]) -> None:
    """Refuse an option none of ``writers`` (the renderer, the view) takes, naming the format
    and the options it has: a typo failed as ``table_view() got an unexpected keyword``."""
    accepted: set[str] = set()
    for writer in writers:
        parameters = list(inspect.signature(writer).parameters.values())[1:]
        if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            return  # takes any option: its own error says which it refuses
        accepted |= {p.name for p in parameters if p.kind is not inspect.Parameter.VAR_POSITIONAL}
    unknown = [name for name in options if name not in accepted]
    if unknown:
        raise TypeError(f"{format} takes no option {', '.join(map(repr, unknown))} "
                        f"(its options: {', '.join(sorted(accepted)) or 'none'})")


def save_profile(profile: Profile, path: PathLike, format: str | None = None,
                 **options: Any) -> None:
    """Write ``profile`` to ``path`` in ``format`` (default: inferred from the suffix)."""
    check_path(path)
    export_profile(profile, format if format is not None else infer_format(path), path,
                   **options)


__all__ = ["FORMATS", "export_profile", "frame_view", "profile_renderer", "save_profile"]
