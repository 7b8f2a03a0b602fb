"""Sorting, selection and counting operators: comparisons by the textbook algorithm."""

from __future__ import annotations

import torch

from moduleprofiler.operators.registry import lookup


def count(op: torch._ops.OpOverload, *args: object, **kwargs: object) -> tuple[int, int]:
    out = op(*args, **kwargs)
    return lookup(op)(args, kwargs, out)  # type: ignore[operator]


def test_sort_topk_and_order_statistics() -> None:
    x = torch.randn(3, 8)
    # 3 rows of 8: merge sort 8 * log2 8 = 24 comparisons per row -> 72
    assert count(torch.ops.aten.sort.default, x, -1) == (72, 0)
    # top-2 of 8 with a heap: 8 * ceil(log2 3) = 16 per row -> 48
    assert count(torch.ops.aten.topk.default, x, 2) == (48, 0)
    # a median per row: 8 comparisons -> 24; over all 24 elements: 24
    assert count(torch.ops.aten.median.dim, x, 1) == (24, 0)
    assert count(torch.ops.aten.median.default, x) == (24, 0)


def test_counting_and_searching() -> None:
    values = torch.rand(10)
    # histc: find the bin and count, 2 per value -> 20
    assert count(torch.ops.aten.histc.default, values, 4) == (20, 0)
    boundaries = torch.tensor([0.25, 0.5, 0.75])
    # 10 binary searches among 3 boundaries: ceil(log2 4) = 2 each -> 20
    assert count(torch.ops.aten.bucketize.Tensor, values, boundaries) == (20, 0)
    assert count(torch.ops.aten.searchsorted.Tensor, boundaries, values) == (20, 0)


def test_selection_in_a_model_is_counted_not_unsupported() -> None:
    from torch import nn

    from moduleprofiler import ModuleProfiler

    class Router(nn.Module):
        def forward(self, scores: torch.Tensor) -> torch.Tensor:
            return torch.topk(scores, 2, dim=-1).indices

    profile = ModuleProfiler().profile(Router(), torch.randn(4, 8))
    # 4 rows * 8 * ceil(log2 3) = 64 comparisons
    assert profile.total_ops == 64 and profile.complete
