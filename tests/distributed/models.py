"""Small models for the distributed tests (every dimension divisible by 2 ranks, so that
FSDP2's shards need no padding)."""

from __future__ import annotations

import torch
from torch import nn


def mlp() -> nn.Sequential:
    """Linear(4, 8) -> ReLU -> Linear(8, 6), the same weights in every process."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 6))


def batch(rank: int) -> torch.Tensor:
    """Rank ``rank``'s batch: ``2 + rank`` rows of 4 features (the ranks differ)."""
    torch.manual_seed(100 + rank)
    return torch.randn(2 + rank, 4)
