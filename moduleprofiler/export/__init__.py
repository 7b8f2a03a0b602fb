"""The export layer: ``Profile`` -> tidy DataFrame (``frame``) -> views (``select``) -> formats
(text, Markdown, CSV, JSON, HTML, LaTeX). ``Profile`` exposes all of it as methods
(``tree``, ``table``, ``top``, ``to_*``, ``save``, ``from_json``); the functions here add the
multi-profile views, the column registry and the format table."""

from moduleprofiler.export.columns import (
    ColumnSpec,
    Derived,
    Statistic,
    column_spec,
    inclusive_of,
    median_statistic,
    register_column,
    registered_columns,
    scaled,
)
from moduleprofiler.export.diff import compare_view as compare
from moduleprofiler.export.format_table import (
    FORMATS,
    Format,
    format_name,
    infer_format,
    register_format,
)
from moduleprofiler.export.model_summary import summary_frame
from moduleprofiler.export.model_summary import summary_view as summary
from moduleprofiler.export.names import ROOT_NAME
from moduleprofiler.export.profile import Profile
from moduleprofiler.export.view import View

load_json = Profile.from_json
"""Read a profile saved by :meth:`Profile.to_json` (a path, a file object or the JSON text)."""

__all__ = [
    "FORMATS",
    "ROOT_NAME",
    "ColumnSpec",
    "Derived",
    "Format",
    "Statistic",
    "View",
    "column_spec",
    "compare",
    "format_name",
    "inclusive_of",
    "infer_format",
    "load_json",
    "median_statistic",
    "register_column",
    "register_format",
    "registered_columns",
    "scaled",
    "summary",
    "summary_frame",
]
