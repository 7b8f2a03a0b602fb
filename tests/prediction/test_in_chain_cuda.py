"""The in-chain costs measured on a real GPU (skipped without one)."""

from __future__ import annotations

import pytest
import torch

from moduleprofiler.prediction.in_chain import CHAIN_TABLES, measure_in_chain

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_measure_in_chain_gives_every_table_of_the_chain_a_cost() -> None:
    costs = measure_in_chain(torch.device("cuda"), {"fp32": torch.float32})
    # the fp32 chain's conversions to fp32 launch nothing: every other table has a cost
    assert set(costs["fp32"]) == set(CHAIN_TABLES.values()) - {"mem_convert"}
    assert all(us >= 0.0 for us in costs["fp32"].values())
    # a row reduction after another kernel takes longer than in a loop of itself (about a
    # microsecond on an H200)
    assert costs["fp32"]["mem_reduction"] > 0.2
