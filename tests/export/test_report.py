"""The HTML report of a timed profile shows each time once."""

from __future__ import annotations

import torch
from torch import nn

from moduleprofiler import ModuleProfiler
from moduleprofiler.export.report import report_context


def test_a_timed_report_shows_each_time_once() -> None:
    net = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
    x = torch.randn(4, 8)
    profiler = ModuleProfiler()
    timing = profiler.time_modules(net, x, num_iters=6, drop_first=1, warmup_seconds=0,
                                   progress=False)
    context = report_context(profiler.profile(net, x).with_timing(timing))
    labels = [card["label"] for card in context["cards"]]
    # the per-module medians; the per-call forward_ms / self_forward_ms are the same times
    assert "time median" in labels and "self time median" in labels
    assert "forward" not in labels and "self forward" not in labels
    assert len(labels) == len(set(labels))
    titles = [chart.title for chart in context["charts"]]
    assert [t for t in titles if "time" in t or "forward" in t] == [
        "time median by top-level module"]


class _Unsupported(nn.Module):
    """A Linear and an operator without a formula: its own ops are unknown."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.special.chebyshev_polynomial_t(self.lin(x), 3)


def test_a_sortable_unknown_cell_sorts_as_unknown() -> None:
    # the sorting script sorts a cell with an empty data-v last and compares a cell without
    # one as text: an unknown number must carry the empty data-v, not a bare dash
    profile = ModuleProfiler().profile(_Unsupported(), torch.randn(3, 4))
    page = profile.table(["self_ops"]).to_html(sortable=True)
    assert page is not None
    rows = page.split("<tr>")[2:]  # after the header row: __root__, then lin
    assert '<span data-v="">-</span>' in rows[0]  # the polynomial has no formula: unknown
    assert '<span data-v="96.0">96</span>' in rows[1]  # 3 rows x 4 x (2 x 4 - 1) + 12 = 96


def test_a_total_or_a_bar_that_is_a_lower_bound_says_so() -> None:
    # the cards and charts have no notes under them: a lower bound carries "≥ " itself
    model = nn.Sequential(_Unsupported(), nn.Linear(4, 4))
    context = report_context(ModuleProfiler().profile(model, torch.randn(3, 4)))
    cards = {card["label"]: card["text"] for card in context["cards"]}
    # each Linear(4, 4) on 3 rows: 3 x 4 x 8 = 96 ops, 48 MACs; the polynomial's unknown
    assert (cards["ops"], cards["MACs"], cards["parameters"]) == ("\u2265 192", "\u2265 96", "40")
    assert cards["totals"] == "lower bounds: ops, macs, flops"
    chart = next(c for c in context["charts"] if c.id == "ops-by-module")
    assert [bar.label for bar in chart.bars] == ["\u2265 0 (_Unsupported)", "1 (Linear)"]
    exact = report_context(ModuleProfiler().profile(nn.Linear(4, 4), torch.randn(3, 4)))
    assert not any("\u2265" in card["text"] for card in exact["cards"])
