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
