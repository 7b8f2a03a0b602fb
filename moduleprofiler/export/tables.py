"""The 0.0.4 file forms of a DataFrame (``*_csv``/``*_html``/``*_latex`` in ``legacy.py``),
written through the format table like every other output: the frame becomes a *raw* view
(values as they are, columns by their names) and the format's renderer writes it."""

from __future__ import annotations

from typing import Any

import pandas as pd

from moduleprofiler.export.format_table import get_format, render_view
from moduleprofiler.export.io import PathLike, emit, with_suffix
from moduleprofiler.export.view import View

__all__ = ["PathLike", "frame_text", "raw_view", "with_suffix", "write_frame"]

_LEGACY_OPTIONS: dict[str, dict[str, Any]] = {
    "html": {"table_id": "table"},
    "latex": {"floating": False},
}
"""0.0.4's forms: an HTML table alone, a bare LaTeX ``tabular``."""


def raw_view(frame: pd.DataFrame, *, index: bool = False) -> View:
    """``frame`` as a raw view of all its columns (with its index first when ``index``)."""
    if index:
        frame = frame.copy()
        frame.insert(0, "", frame.index)
    return View(frame=frame, columns=tuple(frame.columns), raw=True)


def frame_text(frame: pd.DataFrame, format: str, *, index: bool = False) -> str:
    """``frame`` as text in ``format`` (unknown values empty in CSV and HTML, ``--`` in LaTeX;
    every name escaped)."""
    options = _LEGACY_OPTIONS.get(get_format(format).name, {})
    return render_view(raw_view(frame, index=index), format, **options) or ""


def write_frame(frame: pd.DataFrame, file: PathLike, format: str) -> str:
    """Write ``frame`` to ``file`` in ``format``, the format's suffix added when missing
    (``"ops"`` -> ``"ops.csv"``); returns the path written."""
    return write_text(frame_text(frame, format), file, format)


def write_text(text: str, file: PathLike, format: str) -> str:
    """Write ``text`` (a table rendered in ``format``) to ``file``, the format's suffix added
    when missing; returns the path written."""
    path = with_suffix(file, get_format(format).suffixes[0])
    emit(text, path)
    return path
