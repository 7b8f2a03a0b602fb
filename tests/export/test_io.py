"""Where output goes: ``buf=None`` returns a string, a path or file object is written, the
format comes from the suffix."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from moduleprofiler.export import format_name, infer_format
from moduleprofiler.export.formats import export_profile
from tests.export.profiles import tiny


def test_buf_none_returns_text_and_paths_or_files_are_written(tmp_path: Path) -> None:
    profile = tiny()
    text = profile.to_markdown()
    assert isinstance(text, str)
    assert profile.to_markdown(tmp_path / "t.md") is None
    assert (tmp_path / "t.md").read_text(encoding="utf-8") == text
    stream = io.StringIO()
    assert profile.to_markdown(stream) is None and stream.getvalue() == text
    assert profile.to_latex(str(tmp_path / "t.tex")) is None


@pytest.mark.parametrize(("suffix", "start"), [
    (".csv", "call,parent"), (".json", "{"), (".md", "| module"), (".markdown", "| module"),
    (".html", "<!DOCTYPE html>"), (".htm", "<!DOCTYPE html>"), (".tex", "\\begin{table}"),
    (".txt", "module"),
])
def test_save_infers_the_format(tmp_path: Path, suffix: str, start: str) -> None:
    path = tmp_path / f"profile{suffix}"
    tiny().save(path)
    assert path.read_text(encoding="utf-8").startswith(start)


def test_save_passes_options_to_the_view_and_renderer(tmp_path: Path) -> None:
    tiny().save(tmp_path / "t.tex", caption="Tiny", label="tab:t", max_depth=0)
    tex = (tmp_path / "t.tex").read_text(encoding="utf-8")
    assert "\\caption{Tiny}" in tex and tex.count("\\\\") == 2  # header + root
    tiny().save(tmp_path / "t.txt", unicode=True, max_depth=1)
    assert "├─" in (tmp_path / "t.txt").read_text(encoding="utf-8")
    tiny().save(tmp_path / "modules.csv", aggregate="module")
    assert (tmp_path / "modules.csv").read_text(encoding="utf-8").startswith("module,type")
    tiny().table(max_depth=1).save(tmp_path / "view.md")
    table, _, notes = (tmp_path / "view.md").read_text(encoding="utf-8").partition("\n\n")
    assert table.count("\n") == 7  # header, alignment row, root, 5 modules at depth 1
    # unknown ops, an operator without formula, not called, the ops shares unknown
    assert notes.count("- note: ") == 4


def test_format_names_and_errors(tmp_path: Path) -> None:
    assert format_name("TEX") == "latex" and format_name(".md") == "markdown"
    assert infer_format("a/b/report.HTML") == "html"
    with pytest.raises(ValueError, match="no suffix"):
        tiny().save(tmp_path / "profile")
    with pytest.raises(ValueError, match="unknown format"):
        tiny().save(tmp_path / "profile.pdf")
    with pytest.raises(ValueError, match="json"):
        tiny().table().save(tmp_path / "view.json")
    assert export_profile(tiny(), "text", max_depth=0) == str(tiny().tree(max_depth=0))


def test_view_csv_keeps_raw_numbers() -> None:
    csv = tiny().table(["ops", "ops_pct"]).to_csv() or ""
    # tiny()'s custom module has no formula: the root's 11406 is a lower bound, its row says so
    # and no share of a lower-bound total is known: ops_pct is empty
    assert csv.splitlines()[0] == "module,type,ops,ops_pct,complete,ops_complete"
    assert csv.splitlines()[1] == "__root__,Net,11406,,False,False"
    assert "custom,Custom,,,False,False\n" in csv


@pytest.mark.parametrize("path", [None, 3])
def test_save_refuses_a_path_that_is_not_a_path(path: object) -> None:
    profile = tiny()
    # with format= given, None went on as "return the text": nothing written, no error
    for save in (lambda: profile.save(path, format="csv"), lambda: profile.save(path),
                 lambda: profile.tree().save(path, format="csv")):
        with pytest.raises(TypeError, match=r"path must be a file path \(a str or "
                                            r"os.PathLike\), got (None|int 3)"):
            save()
