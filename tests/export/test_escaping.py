"""Hostile module names and types come out literally in every format."""

from __future__ import annotations

import html
import json
import re
from io import StringIO

import pandas as pd
import pytest

from moduleprofiler import Profile
from moduleprofiler.export.latex import escape_latex
from moduleprofiler.export.markdown import escape_markdown
from tests.export.profiles import EVIL_TYPE, IMG, LATEX_SOUP, QUOTES, SCRIPT, hostile


def test_html_report_has_no_raw_markup_from_names() -> None:
    page = hostile().to_html()
    assert page is not None
    assert SCRIPT not in page and IMG not in page and EVIL_TYPE not in page
    assert html.escape(SCRIPT) in page and html.escape(EVIL_TYPE) in page
    assert page.count("<script>") == 1  # the report's own script, nothing else
    assert "onerror=alert" not in page.replace(html.escape(IMG), "")


def test_html_table_escapes_names_and_types() -> None:
    table = hostile().table().to_html()
    assert table is not None
    assert "<script>" not in table and "<b>" not in table and "<img" not in table
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in table


@pytest.mark.parametrize("fit", [False, True])
def test_latex_escapes_every_special_character(fit: bool) -> None:
    tex = hostile().to_latex(caption="100% of {names} & more_stuff", label="tab:hostile",
                             fit=fit)
    assert tex is not None
    if not fit:  # fitted, the long names are shortened in their middle (and still escaped)
        assert r"a\_b \& c \% d \# e \$ f \{ g \} h \textbackslash{} i" in tex
    assert r"\caption{100\% of \{names\} \& more\_stuff}" in tex
    head, body = tex.split(r"\midrule")[0], tex.split(r"\midrule")[1].split(r"\bottomrule")[0]
    columns = len(head.split(r"\toprule")[1].split(" & "))
    assert columns == 8 if not fit else 3 < columns < 8  # fitted: optional columns left out
    for line in body.strip().splitlines():
        cells = line.removesuffix(r"\\").split(" & ")
        assert len(cells) == columns, line  # no stray & splits a row
        for cell in cells:  # a command's {} (\textless{}) keeps the space after it
            assert not re.search(r"(?<!\\)[&%$#_{}<>|]", re.sub(r"\\[a-z]+\{\}", "", cell)), cell
    assert "NaN" not in tex and "nan" not in tex and "<NA>" not in tex


def test_latex_rejects_a_label_that_would_break_the_document() -> None:
    try:
        hostile().to_latex(label="tab:a}b")
    except ValueError as exc:
        assert "label" in str(exc)
    else:
        raise AssertionError("a label with } must be refused")


def test_escape_latex_matches_pandas_for_names() -> None:
    frame = pd.DataFrame({"name": [LATEX_SOUP]})
    pandas_text = frame.style.format(escape="latex").hide(axis="index").to_latex()
    ours = escape_latex(LATEX_SOUP)
    # the same commands; ours end in {} where pandas writes a space (and \space before one)
    assert ours.replace("{}", "").replace(" ", "") in \
        pandas_text.replace(r"\space", "").replace(" ", "")


def test_markdown_cells_cannot_break_the_table_or_inject_html() -> None:
    md = hostile().to_markdown()
    assert md is not None
    table, _, notes = md.partition("\n\n")  # the notes follow the table, as a list
    widths = {len(re.findall(r"(?<!\\)\|", line)) for line in table.splitlines()}
    assert widths == {9}  # 8 columns -> 9 unescaped pipes on every line
    assert notes.startswith("- note: ") and not re.search(r"(?<!\\)\|", notes)
    assert "<script>" not in md and "<img" not in md and "<b>" not in md
    assert escape_markdown("a|b*c_d") == r"a\|b\*c\_d"


def test_text_and_data_formats_keep_names_verbatim() -> None:
    profile = hostile()
    text = str(profile)
    for name in (SCRIPT, IMG, LATEX_SOUP, EVIL_TYPE):
        assert name in text
    frame = pd.read_csv(StringIO(profile.to_csv() or ""), keep_default_na=False)
    assert {SCRIPT, f"{SCRIPT}.{IMG}", LATEX_SOUP, QUOTES} <= set(frame["module"])
    assert EVIL_TYPE in set(frame["type"])
    document = json.loads(profile.to_json() or "")
    assert {r["module"] for r in document["records"]} >= {SCRIPT, LATEX_SOUP}
    assert Profile.from_json(profile.to_json() or "") == profile


def test_latex_typesets_angle_brackets_and_bars_as_themselves() -> None:
    # pdfLaTeX's default encoding prints < as an inverted exclamation mark and | as a dash;
    # the braces keep the space that follows
    assert escape_latex("List<int> a|b > c") == (
        r"List\textless{}int\textgreater{} a\textbar{}b \textgreater{} c")


def test_a_line_break_in_a_name_keeps_every_text_row_on_one_line() -> None:
    import torch
    from torch import nn

    from moduleprofiler import ModuleProfiler

    class Keys(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.d = nn.ModuleDict({"a\nb": nn.Linear(2, 2), "c\td": nn.ReLU()})

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.d["c\td"](self.d["a\nb"](x))

    profile = ModuleProfiler().profile(Keys(), torch.randn(1, 2))
    for text in (profile.tree().to_text(width=0), profile.table().to_text(width=0)):
        lines = text.splitlines()  # the header, its rule, the 4 modules, then the totals
        assert "a\\nb" in lines[4] and "c\\td" in lines[5]  # written as escapes
        assert lines[6].startswith("total:")  # no row was cut in two


def test_control_characters_in_a_name_never_reach_the_terminal() -> None:
    import torch
    from torch import nn

    from moduleprofiler import ModuleProfiler

    class Keys(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            # ESC [2J clears the screen, BEL rings, U+202E prints the rest of the row
            # right to left (its numbers reversed)
            self.d = nn.ModuleDict({"a\x1b[2Jb": nn.Linear(2, 2), "x\u202eyz": nn.ReLU(),
                                    "c\x07d": nn.ReLU()})

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.d.values():
                x = layer(x)
            return x

    profile = ModuleProfiler().profile(Keys(), torch.randn(1, 2))
    for text in (str(profile), profile.tree().to_text(width=0),
                 profile.table().to_text(width=0)):
        assert not any(ch in text for ch in "\x1b\x07\u202e"), repr(text)
        assert "a\\x1b[2Jb" in text and "x\\u202eyz" in text and "c\\x07d" in text
    rows = profile.table(["params"]).to_text(width=0).splitlines()[4:7]
    # written as escapes, the names are 11, 10 and 7 characters: each row's params end in
    # one column
    assert len({len(row) for row in rows}) == 1


def test_a_space_after_an_escaped_backslash_tilde_or_caret_is_kept() -> None:
    # "\textbackslash " ate the space that followed it (TeX skips spaces after a command
    # word): the caption "a \ b" typeset as "a \b"
    assert escape_latex("a \\ b ~ c ^ d") == (
        r"a \textbackslash{} b \textasciitilde{} c \textasciicircum{} d")
