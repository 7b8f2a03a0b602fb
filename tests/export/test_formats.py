"""The one format table: every writer looks formats up there, so one renderer plus one entry
is a new format for ``Profile.save``, ``View.save``, the command line and the 0.0.4 writers."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler
from moduleprofiler.cli import main
from moduleprofiler.export import FORMATS, View, register_format
from moduleprofiler.export.format_table import render_view
from moduleprofiler.export.formats import profile_renderer
from moduleprofiler.export.json_io import json_text
from moduleprofiler.export.markdown import render_markdown
from moduleprofiler.export.report import report_text
from moduleprofiler.export.view_data import ViewData
from tests.export.cli_models import tiny as tiny_model
from tests.export.profiles import tiny

ROOT = Path(__file__).resolve().parents[2]


def render_pipes(view: View, *, sep: str = "|") -> str:
    """Each row's module name and params, joined by ``sep``."""
    return "".join(f"{row.module}{sep}{row.params}\n" for row in view.df.itertuples())


@pytest.fixture
def pipes() -> Iterator[None]:
    register_format("pipes", (".pipes",), render_pipes, view="tree")
    yield
    del FORMATS["pipes"]


@pytest.mark.usefixtures("pipes")
def test_a_new_format_is_one_renderer_and_one_entry(tmp_path: Path) -> None:
    profile = tiny()
    profile.save(tmp_path / "tiny.pipes", columns=["params"], max_depth=0, sep=";")
    assert (tmp_path / "tiny.pipes").read_text() == "__root__;1576\n"
    profile.table(["params"], max_depth=0).save(tmp_path / "table.pipes")
    assert (tmp_path / "table.pipes").read_text() == "__root__|1576\n"
    status = main([f"{ROOT / 'tests/export/cli_models.py'}:tiny", "-i", "2x4", "--what",
                   "params", "-o", str(tmp_path / "cli.pipes")])
    assert status == 0
    # 4 x 8 + 8 + 8 x 2 + 2 = 58 parameters
    assert (tmp_path / "cli.pipes").read_text().splitlines()[0] == "__root__|58"


def test_registering_a_taken_name_or_suffix_is_refused() -> None:
    with pytest.raises(ValueError, match="already registered"):
        register_format("csv", (".csv2",), render_pipes)
    with pytest.raises(ValueError, match="already means 'markdown'"):
        register_format("notes", (".md",), render_pipes)
    assert "notes" not in FORMATS


def test_the_legacy_writers_go_through_the_table(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, tuple[str, ...]]] = []

    def spy(name: str) -> Any:
        entry = FORMATS[name]
        assert entry.render is not None
        render = entry.render

        def wrapped(view: View, **options: Any) -> str:
            seen.append((name, view.columns))
            return render(view, **options)

        wrapped.__signature__ = __import__("inspect").signature(render)  # type: ignore[attr-defined]
        return dataclasses.replace(entry, render=wrapped)

    for name in ("csv", "html", "latex"):
        monkeypatch.setitem(FORMATS, name, spy(name))
    profiler = ModuleProfiler()
    model = tiny_model()
    profiler.count_params_csv(str(tmp_path / "params"), module=model)
    profiler.estimate_ops_html(str(tmp_path / "ops"), module=model, input=torch.randn(2, 4))
    latex = profiler.trace_io_sizes_latex(module=model, input=torch.randn(2, 4))
    assert [name for name, _ in seen] == ["csv", "html", "latex"]
    assert seen[1][1][:3] == ("module", "type", "ops")  # the 0.0.4 columns, as they are
    assert latex.startswith("\\begin{tabular}") and "\\_\\_root\\_\\_" in latex
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ops.html", "params.csv"]
    rows = (tmp_path / "params.csv").read_text().splitlines()
    assert rows[1].startswith("__root__,Sequential,58,torch.float32,1856,")  # 58 x 32 bits


def test_every_format_names_the_root_the_same() -> None:
    model = nn.Sequential(nn.Linear(4, 2))
    profile = ModuleProfiler().profile(model, torch.randn(1, 4))
    for name in FORMATS:
        text = profile.to_json() if name == "json" else getattr(profile, f"to_{name}")()
        if name == "json":  # the records keep PyTorch's own path, ""
            assert '"module": ""' in text
            continue
        root = "\\_\\_root\\_\\_" if name in ("markdown", "latex") else "__root__"
        assert root in text, name
        assert "(root)" not in text and "<root>" not in text, name
    assert list(profile.to_df("module")["module"]) == ["__root__", "0"]
    assert "__root__" in ModuleProfiler().estimate_ops(model, torch.randn(1, 4))


def test_a_view_s_data_renders_through_the_table_without_view_methods() -> None:
    """Renderers are functions of a view's data: the table renders a bare ``ViewData``."""
    data = ViewData(frame=pd.DataFrame({"module": ["__root__", "fc"],
                                        "type": ["Sequential", "Linear"],
                                        "params": [1576, 40]}),
                    columns=("module", "type", "params"))
    assert render_view(data, "csv") == (
        "module,type,params\n__root__,Sequential,1576\nfc,Linear,40\n")
    # 1576 parameters print as 1.58K; Markdown escapes the underscores of the root's name
    assert render_view(data, "markdown") == (
        "| module | type | params |\n| :--- | :--- | ---: |\n"
        "| \\_\\_root\\_\\_ | Sequential | 1.58K |\n| fc | Linear | 40 |\n")
    assert not hasattr(data, "to_text")


def test_the_built_in_formats_are_in_the_table_itself() -> None:
    """The whole-profile documents are named by the entry (``view``) and written by
    ``export_profile``; every view format's renderer is in the entry."""
    assert {name: entry.view for name, entry in FORMATS.items()} == {
        "csv": "frame", "json": "json", "markdown": "table", "html": "report",
        "latex": "table", "text": "tree"}
    assert profile_renderer("html") is report_text
    assert profile_renderer(".json") is json_text
    assert profile_renderer("md") is None and FORMATS["markdown"].render is render_markdown


def test_an_option_no_writer_takes_names_the_format_and_its_options(tmp_path: Path) -> None:
    profile = tiny()
    # a typo failed as "TypeError: table_view() got an unexpected keyword argument", naming
    # a function the user never called
    with pytest.raises(TypeError, match=r"markdown takes no option 'max_dpth' \(its options: "
                                        r"aggregate, ascending, columns, .*max_depth"):
        profile.save(tmp_path / "x.md", max_dpth=1)
    with pytest.raises(TypeError, match=r"json takes no option 'max_depth' \(its options: "
                                        r"indent\)"):
        profile.save(tmp_path / "x.json", max_depth=1)
    with pytest.raises(TypeError, match=r"html takes no option 'bogus' \(its options: title\)"):
        profile.save(tmp_path / "x.html", bogus=1)
    profile.save(tmp_path / "x.tex", caption="c", label="tab:x", max_depth=1)  # both kinds
    assert "\\label{tab:x}" in (tmp_path / "x.tex").read_text()
