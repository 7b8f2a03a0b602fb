"""Unknown is never zero, in every output: a share of a lower-bound total is unknown, the
totals line marks a lower bound, a view's DataFrame carries the flags its CSV writes, and
completeness is per quantity (ops apart from MACs), so a comparison keeps every exact delta."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch
from torch import Tensor, nn

from moduleprofiler import ModuleProfiler, OperatorListener, Profile
from moduleprofiler.export import compare, summary
from moduleprofiler.export.report import report_context

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SHARE_NOTE = "ops % unknown: the total is a lower bound (work without a formula)"


class MatrixExp(nn.Module):
    """``matrix_exp``: an operator without a formula."""

    def forward(self, x: Tensor) -> Tensor:
        return torch.linalg.matrix_exp(x)


class Scale(nn.Module):
    """``x * 2``: priced below by an ops formula only (no MACs formula)."""

    def forward(self, x: Tensor) -> Tensor:
        return x * 2


@pytest.fixture(scope="module")
def partial() -> Profile:
    """Linear(4, 4), MatrixExp, ReLU on a (4, 4) input, the operator tallies kept."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), MatrixExp(), nn.ReLU())
    return ModuleProfiler().profile(model, torch.randn(4, 4), listeners=[OperatorListener()])


def _ops_only(rows: int) -> Profile:
    """Linear(4, 3) then Scale on ``rows`` rows, operator counting off: Scale's ops are its
    formula's, its MACs unknown."""
    profiler = ModuleProfiler()
    profiler.ops_fn_map[Scale] = lambda module, inputs, output: output.numel()
    model = nn.Sequential(nn.Linear(4, 3), Scale())
    torch.manual_seed(0)
    return profiler.profile(model, torch.randn(rows, 4), operators=False)


def test_the_fixture_is_a_lower_bound(partial: Profile) -> None:
    # Linear: 4 rows x 4 outputs x (4 multiplies + 3 adds + 1 bias add) = 128 ops, 4 x 4 x 4
    # = 64 MACs; ReLU 4 x 4 = 16 ops; matrix_exp unknown: 144 ops bound the total from below
    assert (partial.total_ops, partial.total_macs) == (144, 64)
    assert partial.lower_bounds == ("ops", "macs", "flops")


def test_a_share_of_a_lower_bound_total_is_unknown_in_every_view(partial: Profile) -> None:
    # Linear's 128 of the 144 known ops was shown as 88.9 %: its true share is smaller by
    # an unknown amount, so it is no share of the model's ops
    views = [partial.tree(), partial.table(["ops", "ops_pct", "self_ops", "self_ops_pct"]),
             partial.top(3), partial.top(3, by="macs")]
    for view in views:
        shares = [name for name in view.columns if name.endswith("_pct")]
        assert shares and view.df[shares].isna().all().all()
    assert partial.to_df("type")["self_ops_pct"].isna().all()
    # a share of an exact total stays: Linear holds all 20 parameters (4 x 4 + 4)
    params = partial.tree(["params", "params_pct"]).df.set_index("module")
    assert params.loc["0", "params_pct"] == 100.0 and params.loc["2", "params_pct"] == 0.0


def test_every_format_says_why_the_share_is_unknown(partial: Profile) -> None:
    view = partial.table(["ops", "ops_pct"])
    assert SHARE_NOTE in " ".join((view.to_text(width=0) or "").split())
    assert f"- note: {SHARE_NOTE}" in (view.to_markdown() or "")
    assert SHARE_NOTE.replace("%", "\\%") in (view.to_latex() or "")
    assert SHARE_NOTE in (view.to_html() or "")
    assert SHARE_NOTE in view._repr_html_()
    table = pd.read_csv(io.StringIO(view.to_csv() or ""))
    assert table["ops_pct"].isna().all() and table["ops"].tolist()[:2] == [144, 128]
    # the HTML report: the note among its caveats, its tree's bars of the parameters
    context = report_context(partial)
    assert any(SHARE_NOTE in note for note in context["notes"])
    assert context["tree_caption"].endswith("share of params.")


def test_min_pct_compares_the_share_of_the_known_total(partial: Profile) -> None:
    # of the 144 known ops: Linear 128 (88.9 %), ReLU 16 (11.1 %), MatrixExp unknown
    kept = partial.tree(min_pct=50).df
    assert list(kept["module"]) == ["__root__", "0"] and kept["ops_pct"].isna().all()


def test_the_operator_table_shares_unknown_where_an_operator_has_no_formula(
        partial: Profile) -> None:
    table = partial.by_operator().df.set_index("operator")
    assert table["ops_pct"].isna().all()
    # bytes are known for every operator: addmm reads 4 x 4 + 4 x 4 + 4 floats and writes
    # 4 x 4 (52 x 4 = 208 bytes) of the 208 + 128 + 128 + 0 (aten.t, a view) = 464
    assert table.loc["aten.addmm", "operator_bytes_pct"] == pytest.approx(100 * 208 / 464)
    assert "ops >=144" in str(partial.by_operator())


def test_the_totals_line_marks_each_lower_bound(partial: Profile) -> None:
    # params are exact; the ops (144), MACs (64) and FLOPs (2 x 64) are lower bounds
    assert "total: params 20, MACs >=64, FLOPs (2xMACs) >=128, ops >=144" in str(partial)
    assert "MACs \u226564" in (partial.tree().to_text(unicode=True) or "")
    assert "ops \u2265144" in partial.tree()._repr_html_()
    exact = ModuleProfiler().profile(nn.Linear(4, 2), torch.randn(3, 4))
    assert ">=" not in str(exact)
    # MACs alone unknown: ops exact (2 x 3 x 8 = 48 + 6 = 54), MACs (24) a lower bound
    assert "MACs >=24, FLOPs (2xMACs) >=48, ops 54" in str(_ops_only(2))


def test_a_views_dataframe_flags_its_lower_bounds_as_its_csv(partial: Profile) -> None:
    view = partial.table(["ops"])
    frame = view.df
    assert list(frame.columns) == ["module", "type", "ops", "complete", "ops_complete"]
    # the root and MatrixExp hold the unknown work; Linear and ReLU are exact
    assert frame["complete"].tolist() == [False, True, False, True]
    assert list(pd.read_csv(io.StringIO(view.to_csv() or "")).columns) == list(frame.columns)
    exact = ModuleProfiler().profile(nn.Linear(4, 2), torch.randn(3, 4))
    assert "complete" not in exact.table().df


def test_ops_are_exact_where_only_macs_are_unknown() -> None:
    profile = _ops_only(2)
    # Linear on 2 rows: 2 x 3 x (4 + 3 + 1) = 48 ops, 2 x 3 x 4 = 24 MACs; Scale 2 x 3 = 6
    # ops, its MACs unknown
    assert (profile.total_ops, profile.total_macs) == (54, 24)
    modules = profile.to_df("module")
    assert modules["ops_complete"].tolist() == [True, True, True]
    assert modules["complete"].tolist() == [False, True, False]
    calls = profile.to_df()
    assert calls["ops_complete"].tolist() == [True, True, True]
    assert list(calls.columns).index("ops_complete") == list(calls.columns).index("complete") + 1
    rows = summary({"ops only": profile}).df
    assert rows["ops_complete"].tolist() == [True] and rows["complete"].tolist() == [False]


def test_compare_keeps_an_exact_ops_delta_where_only_macs_are_unknown() -> None:
    before, after = _ops_only(2), _ops_only(4)
    view = compare(before, after, ["ops", "macs"])
    rows = view.df.set_index("module")
    # 2 rows: 54 ops, 4 rows: 4 x 3 x 8 + 4 x 3 = 108; the ops are exact on both sides
    assert rows.loc["__root__", "ops_delta"] == 108 - 54
    assert rows.loc["1", "ops_delta"] == 12 - 6 and rows.loc["1", "ops_ratio"] == 2.0
    # the MACs of the root hold Scale's unknown ones: no delta of a lower bound
    assert pd.isna(rows.loc["__root__", "macs_delta"])
    assert rows.loc["0", "macs_delta"] == 48 - 24  # Linear's MACs are exact
    table = pd.read_csv(io.StringIO(view.to_csv() or ""))
    assert list(table.columns[-4:]) == ["complete_before", "ops_complete_before",
                                        "complete_after", "ops_complete_after"]
    assert table["ops_complete_after"].all() and not table["complete_after"].all()


def test_an_operator_without_a_formula_still_blanks_the_ops_delta(partial: Profile) -> None:
    rows = compare(partial, partial, ["ops"]).df.set_index("module")
    assert pd.isna(rows.loc["__root__", "ops_delta"]) and rows.loc["0", "ops_delta"] == 0


def test_a_document_saved_before_the_flag_reads_it() -> None:
    # schema 4: the tiny profile, whose custom module has no formula; ops_complete is
    # derived from each record's ops_source, so an old document has it too
    old = Profile.from_json(FIXTURES / "profile_schema4.json")
    modules = old.to_df("module").set_index("module")
    assert modules.loc["__root__", "ops_complete"] == False  # noqa: E712 (a numpy bool)
    assert modules.loc["conv", "ops_complete"] == True  # noqa: E712
    assert modules["ops_complete"].equals(modules["complete"])  # no MACs-only unknowns


class _Chebyshev(torch.autograd.Function):
    """``2 x``, whose gradient runs a Chebyshev polynomial: an operator without a formula."""

    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        (x,) = ctx.saved_tensors
        return grad * torch.special.chebyshev_polynomial_t(x, 3)


class ChebyshevLayer(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return _Chebyshev.apply(x)


def test_a_summary_rows_complete_is_its_forward_counts_flag() -> None:
    # the forward is exact: Linear(4, 4) on 3 rows, 3 x 4 x 4 = 48 MACs and 3 x 4 x 8 = 96
    # ops, the doubling 3 x 4 = 12; only the backward's polynomial has no formula
    model = nn.Sequential(nn.Linear(4, 4), ChebyshevLayer())
    profile = ModuleProfiler().profile(model, torch.randn(3, 4), backward=True)
    assert (profile.total_macs, profile.total_ops, profile.lower_bounds) == (
        48, 108, ("backward",))
    # a module row's complete says its forward ops and MACs are exact; a summary row's said
    # False here, for a backward count that row does not show
    assert profile.to_df("module")["complete"].all()
    one = profile.summary()
    assert (one["macs"].iloc[0], one["flops"].iloc[0], bool(one["complete"].iloc[0])) == (
        48, 96, True)
    rows = summary({"m": profile}).frame
    assert rows[["complete", "ops_complete", "backward_complete"]].values.tolist() == [
        [True, True, False]]


def test_a_view_of_memory_carries_no_count_flags() -> None:
    # a memory pass counts no ops: every row's complete is False, yet its live bytes are no
    # lower bounds; the CSV said `complete` False on every row of a table of bytes
    report = ModuleProfiler().measure_memory(nn.Sequential(nn.Linear(4, 4), nn.ReLU()),
                                             torch.randn(2, 4))
    view = report.tree()
    assert not view.frame["complete"].any()
    table = pd.read_csv(io.StringIO(view.to_csv() or ""))
    assert "complete" not in table and "complete" not in view.df
    assert "max_live_bytes" in table
