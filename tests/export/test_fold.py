"""Folding identical numbered blocks of a tree view (:mod:`moduleprofiler.export.fold`)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from moduleprofiler.export.fold import fold_tree
from moduleprofiler.timing import TrainingProfiler, time_modules
from tests.timing.helpers import Spin


class _FirstOnly(nn.Sequential):
    """A block whose second child (a Dropout) never runs, as GPT-2's ``attn_dropout``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self[0](x)


def _blocks() -> nn.Module:
    # 300 us per block, far above the hooks' error, so every block's low-confidence flags
    # (shown columns the blocks must agree on to fold) are the same
    return nn.Sequential(*[_FirstOnly(Spin(300, 300, param=True), nn.Dropout())
                           for _ in range(3)])


def test_a_child_that_never_ran_folds_to_unknown_in_a_numpy_float_column() -> None:
    # the timing tree's frame: plain float64 columns, NaN where a module never ran
    frame = pd.DataFrame({
        "module": ["__root__", "0", "0.0", "0.1", "1", "1.0", "1.1"],
        "type": ["Sequential", "B", "Linear", "Dropout", "B", "Linear", "Dropout"],
        "calls": [1, 1, 1, 0, 1, 1, 0],
        "time_median_ms": [5.0, 2.0, 1.5, math.nan, 2.5, 1.0, math.nan],
    })
    folded = fold_tree(frame, ["time_median_ms"]).set_index("module")
    assert list(folded.index) == ["__root__", "0-1", "0-1.0", "0-1.1"]
    assert folded["time_median_ms"].dtype == np.float64
    # 2.0 + 2.5 = 4.5 and 1.5 + 1.0 = 2.5; the Dropout has no time to sum: unknown, not 0
    assert folded.loc["0-1", "time_median_ms"] == 4.5
    assert folded.loc["0-1.0", "time_median_ms"] == 2.5
    assert math.isnan(folded.loc["0-1.1", "time_median_ms"])
    assert list(folded["calls"]) == [1, 2, 2, 0]


def test_module_timing_summary_folds_blocks_with_a_child_that_never_ran() -> None:
    torch.manual_seed(0)
    timing = time_modules(_blocks(), torch.randn(2, 4), num_iters=3, drop_first=0,
                          warmup_seconds=0, measure_overhead=False)
    text = timing.summary()  # raised TypeError (float() of pd.NA) in fold.py
    lines = text.splitlines()
    assert any(line.startswith("`-- 0-2 (_FirstOnly) x3") for line in lines)
    assert any("|-- 0 (Spin) x3" in line for line in lines)
    dropout = next(line for line in lines if "1 (Dropout)" in line)
    assert "[not called]" in dropout and dropout.split()[-3:] == ["-", "-", "-"]


def test_layerwise_summary_folds_blocks_with_a_child_that_never_ran(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # no name elided to fit
    torch.manual_seed(0)
    model = _blocks()
    with TrainingProfiler(model) as prof:
        for _ in range(2):
            model(torch.randn(2, 4)).sum().backward()
            prof.step()
    text = prof.layerwise_summary()  # raised TypeError (float() of pd.NA) in fold.py
    assert "`-- 0-2 (_FirstOnly) x3" in text
    assert "1 (Dropout) [not called]" in text
