"""The export layer: ``Profile`` -> tidy DataFrame (``frame``) -> views (``select``) -> formats
(text, Markdown, CSV, JSON, HTML, LaTeX). ``Profile`` exposes all of it as methods
(``tree``, ``table``, ``top``, ``to_*``, ``save``, ``from_json``); the functions here add the
multi-profile views and the column registry."""

from moduleprofiler.export.columns import ColumnSpec, column_spec, register_column
from moduleprofiler.export.diff import compare_view as compare
from moduleprofiler.export.io import FORMATS, format_name, infer_format
from moduleprofiler.export.model_summary import summary_frame
from moduleprofiler.export.model_summary import summary_view as summary
from moduleprofiler.export.profile import Profile
from moduleprofiler.export.view import View

load_json = Profile.from_json
"""Read a profile saved by :meth:`Profile.to_json` (a path, a file object or the JSON text)."""

__all__ = [
    "FORMATS",
    "ColumnSpec",
    "View",
    "column_spec",
    "compare",
    "format_name",
    "infer_format",
    "load_json",
    "register_column",
    "summary",
    "summary_frame",
]
