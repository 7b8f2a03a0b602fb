"""A Markdown or LaTeX table pasted on its own still says which of its numbers are lower
bounds: the view's notes travel with it (the 0.0.4 writers' raw tables stay bare)."""

from __future__ import annotations

import io

import pandas as pd
import torch
from torch import nn

from moduleprofiler import ModuleProfiler, Profile, TimingOptions
from moduleprofiler.export import compare, summary
from moduleprofiler.export.tables import frame_text
from tests.export.profiles import tiny


class _Unknown(nn.Module):
    """One operator without a formula: its work, and every total above it, is unknown."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.matrix_exp(x)


LOWER = "ops, MACs and FLOPs totals are lower bounds"


def tiny_exact() -> Profile:
    """Linear(4, 4) then ReLU on 4 rows: every count known."""
    return ModuleProfiler().profile(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), torch.randn(4, 4))


def test_a_real_profile_with_unknown_work_says_so_in_every_table() -> None:
    model = nn.Sequential(nn.Linear(4, 4), _Unknown())
    profile = ModuleProfiler().profile(model, torch.randn(4, 4))
    # Linear: 4 rows x 4 outputs x 4 inputs = 64 MACs, 128 ops with the bias add; the
    # matrix exponential's work is unknown, so 64 / 128 only bound the totals from below
    assert (profile.total_macs, profile.lower_bounds) == (64, ("ops", "macs", "flops"))
    markdown = profile.to_markdown() or ""
    assert f"- note: ops unknown or partial in 1 module(s): 1; {LOWER}" in markdown
    assert "- note: operators without a formula: aten.linalg\\_matrix\\_exp x1" in markdown
    latex = profile.to_latex() or ""
    note = latex[latex.index("\\end{tabular}"):latex.index("\\end{table}")]
    assert LOWER in note and "\\footnotesize" in note
    text = " ".join(str(profile).split())  # the terminal tree wraps its notes
    assert LOWER in text and LOWER in (profile.to_html() or "")


def test_the_notes_go_under_the_table_and_nowhere_else() -> None:
    markdown = tiny().to_markdown() or ""
    table, _, notes = markdown.partition("\n\n")
    assert all(line.startswith("|") for line in table.splitlines())
    # the tiny profile's four caveats: unknown ops, an operator without formula, not called,
    # and that the ops shares of its lower-bound total are unknown
    assert [line.split(":")[0] for line in notes.splitlines()] == ["- note"] * 4


def test_a_bare_tabular_keeps_the_notes_as_comments() -> None:
    # floating=False: a tabular for the caller's own float; the notes cannot be typeset
    # under it, so they open the text as comments the author sees when pasting it
    latex = tiny().to_latex(floating=False) or ""
    first = latex.splitlines()[0]
    assert first.startswith("% note: ops unknown or partial") and LOWER in first
    assert "\\footnotesize" not in latex


def test_the_0_0_4_writers_tables_stay_bare() -> None:
    frame = tiny().to_df()
    assert "note" not in (frame_text(frame, "latex") or "")
    assert "note" not in (frame_text(frame, "markdown") or "")


def test_a_table_of_models_names_the_rows_that_are_lower_bounds() -> None:
    from moduleprofiler.export import summary

    exact = ModuleProfiler().profile(nn.Linear(4, 4), torch.randn(1, 4))
    assert exact.complete  # 16 MACs, 32 ops: a formula for all of it
    view = summary({"linear": exact, "tiny": tiny()})
    assert view.notes == (f"tiny: {LOWER.replace(' totals', '')} (work without a formula; "
                          "each model's own notes say where)",)
    assert "linear" not in view.notes[0]
    assert view.notes[0].replace("_", "\\_") in (view.to_markdown() or "")
    assert "lower bounds" in (view.to_latex() or "")
    assert summary({"linear": exact}).notes == ()


def test_advice_stays_at_the_terminal_and_out_of_documents() -> None:
    # a timing pass counts no ops: the terminal says how to see both, a paper table does not
    from moduleprofiler import Profiler

    timing = Profiler().time_modules(nn.Linear(4, 4), torch.randn(2, 4),
                                     options=TimingOptions(num_iters=3, drop_first=1,
                                                           measure_overhead=False))
    hint = "this pass counts no ops: merge it into a profile() result"
    assert hint in str(timing.tree()) and hint in (timing.to_html() or "")
    assert hint not in (timing.to_markdown() or "") and hint not in (timing.to_latex() or "")
    assert timing.tree().hints and not timing.tree().notes


def _csv(text: str | None) -> pd.DataFrame:
    """A CSV as a script reads it: pandas' defaults."""
    return pd.read_csv(io.StringIO(text or ""))


def test_a_csv_says_in_a_flag_column_which_rows_are_lower_bounds() -> None:
    # a CSV has no place for the notes: a row whose counts are lower bounds says so in its own
    # `complete` column, the numbers staying numbers
    profile = ModuleProfiler().profile(nn.Sequential(nn.Linear(4, 4), _Unknown()),
                                       torch.randn(4, 4))
    # Linear: 4 x 4 x 4 = 64 MACs; the root's 64 bounds its MACs from below
    for view in (profile.table(), profile.tree(), profile.table(columns=["macs"])):
        table = _csv(view.to_csv())
        assert list(table.columns[-3:]) == [view.columns[-1], "complete", "ops_complete"]
        assert table["complete"].tolist() == [False, True, False]
        assert table["ops_complete"].tolist() == [False, True, False]
        assert table["macs"].tolist()[:2] == [64, 64] and pd.isna(table["macs"].iloc[2])
        assert pd.api.types.is_numeric_dtype(table["macs"])
    # a view that shows the flag already, and the frames, which always hold it, say it once
    shown = _csv(profile.table(columns=["macs", "complete"]).to_csv())
    assert list(shown.columns).count("complete") == 1
    assert _csv(profile.to_csv(aggregate="module"))["complete"].tolist() == [False, True, False]
    # rows that are all exact need no flag: the Linear alone, and an exact profile
    assert "complete" not in _csv(profile.table(include=["0"]).to_csv()).columns
    assert "complete" not in (tiny_exact().table().to_csv() or "")


def test_a_compared_or_summarised_csv_flags_each_lower_bound() -> None:
    unknown = ModuleProfiler().profile(nn.Sequential(nn.Linear(4, 4), _Unknown()),
                                       torch.randn(4, 4))
    exact = tiny_exact()
    # compare: each side's flag, after the shown columns, where that side has a lower bound
    table = _csv(compare(unknown, unknown, names=("a", "b")).to_csv())
    assert list(table.columns[-4:]) == ["complete_a", "ops_complete_a", "complete_b",
                                        "ops_complete_b"]
    assert table["complete_a"].tolist() == [False, True, False]
    assert "complete_a" not in _csv(compare(exact, exact, names=("a", "b")).to_csv())
    # a summary that leaves out its `complete` column gets it back in a CSV
    rows = _csv(summary({"unknown": unknown, "exact": exact}, columns=["macs"]).to_csv())
    assert list(rows.columns) == ["model", "macs", "complete", "ops_complete"]
    assert rows["complete"].tolist() == [False, True]
    assert rows["macs"].tolist()[0] == 64
