"""The timing statistic columns: every statistic of a module is its samples' own summary, the
same whether the module frame summarizes each array once or every column alone."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from torch import nn

from moduleprofiler.export.columns import column_spec
from moduleprofiler.export.frame import call_tree, module_statistic
from moduleprofiler.timing import time_modules
from moduleprofiler.timing.columns import STATISTICS, _last_summary, summary_of
from moduleprofiler.timing.stats import summarize


def _timing():  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Sequential(nn.Linear(16, 8),
                                                                     nn.Tanh()))
    return time_modules(model, torch.randn(4, 8), num_iters=30, drop_first=5, rounds=3,
                        warmup_seconds=0, measure_overhead=False, progress=False)


def _same(a: object, b: object) -> bool:
    """Equal, or both unknown (``None``, ``nan``, ``<NA>``)."""
    return bool(pd.isna(a) and pd.isna(b)) or bool(a == b)


def test_every_statistic_is_the_summary_of_the_modules_own_samples() -> None:
    timing = _timing()
    frame = timing.to_df("module").set_index("module")
    for path, name in (("", "__root__"), ("0", "0"), ("2", "2"), ("2.1", "2.1")):
        for own, exclusive in (("", False), ("self_", True)):
            # summarized afresh from the module's samples, outside the frame
            summary = summarize(timing.samples(path, exclusive=exclusive), timing.confidence)
            assert summary is not None and summary.n == 25  # 30 - 5 dropped
            for field in STATISTICS:
                assert _same(frame.loc[name, f"{own}time_{field}_ms"],
                             getattr(summary, field)), (path, own, field)


def test_the_frame_holds_what_each_column_alone_computes() -> None:
    timing = _timing()
    frame = timing.to_df("module")
    tree = call_tree(timing)
    names = [c for c in frame.columns if column_spec(c).statistic is not None]
    assert len(names) >= 2 * len(STATISTICS)  # forward and self statistics at least
    for row, info in enumerate(timing.modules):
        for name in names:
            _last_summary.clear()  # no array summarized before
            alone = module_statistic(column_spec(name), timing.records,
                                     tree.rows.get(info.path, []), tree.outermost,
                                     timing.facts)
            assert _same(frame[name].iloc[row], alone), (info.path, name)


def test_a_summary_is_reused_only_for_the_same_array_and_level() -> None:
    first = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0])
    equal = first.copy()
    summary = summary_of(first, 0.95)
    assert summary_of(first, 0.95) is summary  # the same array: summarized once
    assert summary_of(equal, 0.95) is not summary  # an equal copy: summarized again
    assert summary_of(first, 0.5) != summary_of(first, 0.95)  # another level: its own CI
