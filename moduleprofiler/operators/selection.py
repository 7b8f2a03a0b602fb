"""Sorting, selection and counting: comparisons (1 op each), no multiply-accumulates.

NB: comparison counts are those of the textbook algorithms, not of a particular kernel:
a sort of ``n`` values costs ``n * ceil(log2 n)`` comparisons (merge sort), a top-``k`` selection
``n * ceil(log2(k + 1))`` (a heap of ``k``), a single order statistic ``n`` (quickselect on
average), a search of ``m`` values in ``n`` sorted ones ``m * ceil(log2(n + 1))``. Counting
values into bins (``histc``, ``bincount``) costs one op per value to find its bin and one to
count it; ``unique`` is priced as the sort it performs.
"""

from __future__ import annotations

import math
from typing import Any

from torch import Tensor

from moduleprofiler.formulas.activation import rows_along
from moduleprofiler.operators._common import ZERO, Args, Count, aten, by_decomposition, register


def log2_ceil(value: int) -> int:
    """``ceil(log2(value))``, 0 for 1 or less: the comparison depth of a sort or a search."""
    return math.ceil(math.log2(value)) if value > 1 else 0


def _rows(args: Args, default_dim: int | None) -> tuple[int, int]:
    """``(rows, n)`` of the first argument along ``dim`` (``None``: every element); (0, 0)
    without a tensor."""
    x = args.first()
    return rows_along(x, args.get("dim", default_dim)) if isinstance(x, Tensor) else (0, 0)


@register(*aten("sort", "argsort", "msort"))
def sort_ops(args: Args, out: Any) -> Count:
    """rows * n * ceil(log2 n) comparisons."""
    rows, n = _rows(args, -1)
    return rows * n * log2_ceil(n), 0


@register(*aten("topk"))
def topk_ops(args: Args, out: Any) -> Count:
    """rows * n * ceil(log2(k + 1)) comparisons."""
    rows, n = _rows(args, -1)
    k = int(args.get("k", 1))
    return rows * n * max(1, log2_ceil(k + 1)), 0


@register(*aten("kthvalue", "median", "nanmedian", "mode"))
def order_statistic_ops(args: Args, out: Any) -> Count:
    """n comparisons per row (all elements when no ``dim`` is given)."""
    rows, n = _rows(args, None)
    return rows * n, 0


@register(*aten("histc", "bincount"))
def binning_ops(args: Args, out: Any) -> Count:
    """2 ops per value: find its bin, count it."""
    x = args.first()
    return (2 * int(x.numel()), 0) if isinstance(x, Tensor) else ZERO


@register(*aten("_unique2", "unique_dim", "unique_consecutive", "_unique"))
def unique_ops(args: Args, out: Any) -> Count:
    """The sort that ``unique`` performs: n * ceil(log2 n) comparisons, plus n to compare
    neighbours."""
    x = args.first()
    if not isinstance(x, Tensor):
        return ZERO
    n = int(x.numel())
    return n * log2_ceil(n) + n, 0


@register(*aten("searchsorted", "bucketize"))
def search_ops(args: Args, out: Any) -> Count:
    """Binary search of every value: m * ceil(log2(n + 1)) comparisons (m results, n sorted
    boundaries)."""
    boundaries = args.tensor("boundaries")  # bucketize(values, boundaries)
    sorted_seq = boundaries if boundaries is not None else args.first()
    if not isinstance(sorted_seq, Tensor) or not isinstance(out, Tensor):
        return ZERO
    n = int(sorted_seq.shape[-1]) if sorted_seq.dim() else 1
    return int(out.numel()) * max(1, log2_ceil(n + 1)), 0


# NB: counted as its parts, the bin edges and the counts, which have no formula yet: unknown
by_decomposition(*aten("histogramdd"))
