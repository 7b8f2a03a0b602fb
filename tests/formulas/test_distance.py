"""Distance formulas against hand arithmetic (docs/formulas/distance.md)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from tests.conftest import macs_of, ops_of


def test_cosine_similarity_default_dim() -> None:
    # (4, 3) along dim 1: rows 4, D = 3: 3 dot products 3*(2*3-1) = 15, + 2 sqrt, 2 max, *, / = 21
    # 4 * 21 = 84
    x1, x2 = torch.randn(4, 3), torch.randn(4, 3)
    assert ops_of(nn.CosineSimilarity(), x1, x2) == 84
    assert macs_of(nn.CosineSimilarity(), x1, x2) == 0


def test_cosine_similarity_broadcasts() -> None:
    # (2, 3) with (1, 3) -> (2, 3): rows 2, D = 3: 2 * (6*3 + 3) = 42
    assert ops_of(nn.CosineSimilarity(), torch.randn(2, 3), torch.randn(1, 3)) == 42


def test_cosine_similarity_negative_dim() -> None:
    # (2, 5, 4) along -1: rows 10, D = 4: 10 * (6*4 + 3) = 270
    x1, x2 = torch.randn(2, 5, 4), torch.randn(2, 5, 4)
    assert ops_of(nn.CosineSimilarity(dim=-1), x1, x2) == 270


@pytest.mark.parametrize(
    ("p", "per_row"),
    [
        (2.0, 2 * 5 + 2 * 5),  # 5 sub + 5 eps + (5 squares, 4 adds, 1 sqrt) = 20
        (1.0, 2 * 5 + 2 * 5 - 1),  # 5 sub + 5 eps + (5 abs, 4 adds) = 19
        (math.inf, 2 * 5 + 2 * 5 - 1),  # 5 sub + 5 eps + (5 abs, 4 max) = 19
        (0.0, 2 * 5 + 2 * 5 - 1),  # 5 sub + 5 eps + (5 != 0, 4 adds) = 19
        (3.0, 2 * 5 + 3 * 5),  # 5 sub + 5 eps + (5 abs, 5 pow, 4 adds, 1 root) = 25
    ],
)
def test_pairwise_distance_norms(p: float, per_row: int) -> None:
    # (3, 5): 3 rows
    module = nn.PairwiseDistance(p=p)
    assert ops_of(module, torch.randn(3, 5), torch.randn(3, 5)) == 3 * per_row


def test_pairwise_distance_broadcast_and_keepdim() -> None:
    # (2, 3) with (3,) -> rows 2, D = 3, p = 2: 2 * (6 + 6) = 24; keepdim changes nothing
    x1, x2 = torch.randn(2, 3), torch.randn(3)
    assert ops_of(nn.PairwiseDistance(), x1, x2) == 24
    assert ops_of(nn.PairwiseDistance(keepdim=True), x1, x2) == 24


def test_pairwise_distance_unbatched() -> None:
    # (4,) with (4,): 1 row, p = 2: 8 + 8 = 16
    assert ops_of(nn.PairwiseDistance(), torch.randn(4), torch.randn(4)) == 16
