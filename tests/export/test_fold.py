"""Folding identical numbered blocks of a tree view (:mod:`moduleprofiler.export.fold`)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler
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
    folded = fold_tree(frame).set_index("module")
    assert list(folded.index) == ["__root__", "0-1", "0-1.0", "0-1.1"]
    assert folded["time_median_ms"].dtype == np.float64
    # 2.0 + 2.5 = 4.5 and 1.5 + 1.0 = 2.5; the Dropout has no time to sum: unknown, not 0
    assert folded.loc["0-1", "time_median_ms"] == 4.5
    assert folded.loc["0-1.0", "time_median_ms"] == 2.5
    assert math.isnan(folded.loc["0-1.1", "time_median_ms"])
    assert list(folded["calls"]) == [1, 2, 2, 0]


def _twelve_blocks(bound: list[str], params: list[int] | None = None) -> pd.DataFrame:
    """A tree frame of twelve numbered blocks under ``h``, each with a ``time_bound`` label
    (a measured column) and parameters."""
    count = len(bound)
    params = params or [10] * count
    return pd.DataFrame({
        "module": ["__root__", "h", *[f"h.{i}" for i in range(count)]],
        "type": ["GPT", "ModuleList", *["Block"] * count],
        "calls": [1, 0, *[1] * count],
        "params": [sum(params), sum(params), *params],
        "time_median_ms": [float(count), 0.0, *[1.0] * count],
        "time_bound": ["device", pd.NA, *bound],
    })


def test_measured_columns_never_decide_what_folds() -> None:
    # the same twelve blocks, one run labelling block 7 host-bound and another not: both fold
    # into h.0-11 (the label is unknown where the blocks disagree), never 0-6 / 8-11
    for bound in (["device"] * 12, ["device"] * 7 + ["host"] + ["device"] * 4):
        folded = fold_tree(_twelve_blocks(bound)).set_index("module")
        assert list(folded.index) == ["__root__", "h", "h.0-11"]
        # twelve blocks of 1.0 ms: 12.0 ms
        assert folded.loc["h.0-11", "time_median_ms"] == 12.0
        assert folded.loc["h.0-11", "calls"] == 12
    assert pd.isna(fold_tree(_twelve_blocks(["device"] * 7 + ["host"] + ["device"] * 4))
                   .set_index("module").loc["h.0-11", "time_bound"])


def test_blocks_of_one_type_with_different_parameters_do_not_fold() -> None:
    # layer2 / layer3 / layer4 of a ResNet: one type, 0.5M / 2.1M / 8.4M parameters
    frame = _twelve_blocks(["device"] * 3, params=[525_568, 2_099_712, 8_393_728])
    assert list(fold_tree(frame)["module"]) == ["__root__", "h", "h.0", "h.1", "h.2"]


def test_module_timing_summary_folds_blocks_with_a_child_that_never_ran(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # no name elided to fit
    torch.manual_seed(0)
    timing = time_modules(_blocks(), torch.randn(2, 4), num_iters=3, drop_first=0,
                          warmup_seconds=0, measure_overhead=False)
    text = timing.report()  # raised TypeError (float() of pd.NA) in fold.py
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


def _three_relu_blocks_and_a_tanh() -> nn.Module:
    """Blocks 0-2 are Linear-ReLU, block 3 Linear-Tanh: one type, the same parameters and
    shapes, different children."""
    return nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(3)],
                         nn.Sequential(nn.Linear(4, 4), nn.Tanh()))


@pytest.mark.parametrize("options", [{"max_depth": 1}, {"exclude": "*.1"}])
def test_blocks_that_differ_in_rows_a_view_leaves_out_do_not_fold(
        options: dict[str, object]) -> None:
    from moduleprofiler import ModuleProfiler

    profile = ModuleProfiler().profile(_three_relu_blocks_and_a_tanh(), torch.randn(2, 4))
    tree = profile.tree(["ops"], **options).folded().frame.set_index("module")
    assert "0-3" not in tree.index and {"0-2", "3"} <= set(tree.index)
    # Linear(4, 4) on 2 rows: 2 * 4 * (2 * 4 - 1) + 8 = 64; ReLU 8; three blocks 3 * 72 = 216;
    # Tanh's 8 elements at 7 ops each (its formula), 56: block 3 is 64 + 56 = 120
    assert (tree.loc["0-2", "ops"], tree.loc["3", "ops"]) == (216, 120)
    latex = profile.to_latex(**options)
    assert "0-2 &" in latex and "\n3 &" in latex and "0-3" not in latex


def test_folded_sums_past_64_bits_are_exact() -> None:
    # six identical blocks, each a Linear(10**6, 10**6) without bias on 10**6 rows:
    # 10**6 * 10**6 * (2 * 10**6 - 1) = 1_999_999 * 10**12 self ops each, six of them
    # 11_999_994 * 10**12 (past 2**63 ~ 9.2 * 10**18), once a negative number
    with torch.device("meta"):
        model = nn.Sequential(*[nn.Sequential(nn.Linear(10**6, 10**6, bias=False))
                                for _ in range(6)])
    profile = ModuleProfiler().profile(model, torch.empty(10**6, 10**6, device="meta"))
    folded = profile.tree(["self_ops", "self_flops"]).folded().df.set_index("module")
    assert folded.loc["0-5.0", "self_ops"] == 11_999_994 * 10**12
    assert folded.loc["0-5.0", "self_flops"] == 12 * 10**18
    assert "12.00E" in str(profile.tree(["self_ops"]))
