"""The export layer's public surface, the Profile methods that delegate to it, and the
0.0.4 writers it keeps."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import moduleprofiler.export as export
from moduleprofiler import ModuleProfiler, Profile
from tests.export.profiles import SCRIPT, hostile_model


def test_export_all_is_exact() -> None:
    assert sorted(export.__all__) == sorted([
        "FORMATS", "ROOT_NAME", "ColumnSpec", "Derived", "Format", "Statistic", "View",
        "column_spec", "compare", "format_name", "inclusive_of", "infer_format", "load_json",
        "median_statistic", "register_column", "register_format", "registered_columns",
        "scaled", "summary", "summary_frame",
    ])
    for name in export.__all__:
        assert hasattr(export, name)
    assert tuple(export.FORMATS) == ("csv", "json", "markdown", "html", "latex", "text")


def test_profile_delegates_every_view_and_format() -> None:
    for name in ("tree", "table", "top", "to_json", "from_json", "to_csv", "to_markdown",
                 "to_latex", "to_html", "to_text", "save"):
        method = getattr(Profile, name)
        assert inspect.getdoc(method), name
    assert Profile.__str__ is not object.__str__


def test_empty_profile_is_refused_clearly() -> None:
    with pytest.raises(ValueError, match="no modules"):
        str(Profile(records=(), modules=()))


def test_legacy_writers_escape_and_name_files(tmp_path: Path) -> None:
    model, x = hostile_model()
    profiler = ModuleProfiler()
    profiler.estimate_ops_html(str(tmp_path / "ops"), module=model, input=x)
    profiler.estimate_ops_csv(str(tmp_path / "ops.csv"), module=model, input=x)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ops.csv", "ops.html"]
    page = (tmp_path / "ops.html").read_text(encoding="utf-8")
    assert SCRIPT not in page and "&lt;script&gt;" in page
    latex = profiler.estimate_ops_latex(module=model, input=x)
    assert r"a\_b \& c \% d" in latex and "NaN" not in latex
