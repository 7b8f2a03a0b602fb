"""Distances between two inputs: CosineSimilarity and PairwiseDistance.

Both inputs are broadcast to a common shape first (as torch does), and the reduction runs along
one dimension of size ``D``; ``rows`` is the number of such vectors. Reference:
``docs/formulas/distance.md``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from moduleprofiler.formulas._common import no_macs
from moduleprofiler.registry import register_macs, register_ops


def _broadcast_rows(a: Tensor, b: Tensor, dim: int) -> tuple[int, int]:
    """(rows, D) of the broadcast shape of ``a`` and ``b`` reduced along ``dim``."""
    shape = torch.broadcast_shapes(a.shape, b.shape)  # type: ignore[no-untyped-call]
    if len(shape) == 0:
        return 1, 1
    size = int(shape[dim])
    numel = math.prod(int(s) for s in shape)
    return (numel // size if size else 0), size


def dot_ops(size: int) -> int:
    """A length-``size`` dot product: ``size`` multiplies + ``size - 1`` adds."""
    return 2 * size - 1 if size else 0


@register_ops(nn.CosineSimilarity)
def cosine_similarity_ops(module: nn.CosineSimilarity, inputs: tuple[Any, ...],
                          output: Any) -> int:
    """rows * (6D + 3): 3 dot products (x1.x2, |x1|², |x2|²), 2 sqrt, 2 max(., eps), *, /."""
    rows, size = _broadcast_rows(inputs[0], inputs[1], module.dim)
    return rows * (3 * dot_ops(size) + 6)


def pnorm_ops(size: int, p: float) -> int:
    """Ops of the p-norm of a length-``size`` vector (see docs/formulas/distance.md)."""
    if size == 0:
        return 0
    if p == 2:  # D squares, D - 1 adds, 1 sqrt
        return 2 * size
    if p in (1, 0, math.inf, -math.inf):  # D abs (or != 0), D - 1 adds (or max/min): no root
        return 2 * size - 1
    return 3 * size  # D abs, D pow p, D - 1 adds, 1 root


@register_ops(nn.PairwiseDistance)
def pairwise_distance_ops(module: nn.PairwiseDistance, inputs: tuple[Any, ...],
                          output: Any) -> int:
    """rows * (2D + pnorm(D)): x1 - x2 + eps (2D), then the p-norm over the last dim."""
    rows, size = _broadcast_rows(inputs[0], inputs[1], -1)
    return rows * (2 * size + pnorm_ops(size, float(module.norm)))


register_macs(nn.CosineSimilarity, nn.PairwiseDistance)(no_macs)
