"""Sorting, selection and counting: comparisons (1 op each), no multiply-accumulates.

NB: comparison counts are those of the textbook algorithms, not of a particular kernel:
a sort of ``n`` values costs ``n * ceil(log2 n)`` comparisons (merge sort), a top-``k`` selection
``n * ceil(log2(k + 1))`` (a heap of ``k``), a single order statistic ``n`` (quickselect on
average), a search of ``m`` values in ``n`` sorted ones ``m * ceil(log2(n + 1))``. Counting
values into bins (``histc``, ``bincount``, ``histogram``, ``histogramdd``) costs, per sample, one
op per dimension to find its bin among evenly spaced edges (a binary search among edges given as
a tensor) and one to count it (or add its weight); without a range, the outer edges are the
data's minimum and maximum (``2 * (n - 1)`` comparisons per dimension, as ``aminmax``); a density
divides by the total and by each bin's width. ``unique`` is priced as the sort it performs (of
the slices along ``dim``, each comparison one op per element), ``unique_consecutive`` as the
neighbour comparisons alone.
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


@register(*aten("sort", "argsort"))
def sort_ops(args: Args, out: Any) -> Count:
    """rows * n * ceil(log2 n) comparisons."""
    rows, n = _rows(args, -1)
    return rows * n * log2_ceil(n), 0


@register(*aten("msort"))
def msort_ops(args: Args, out: Any) -> Count:
    """The sort along dim 0 that ``msort`` is: rows * n * ceil(log2 n) comparisons."""
    rows, n = _rows(args, 0)
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


def range_ops(samples: int, dims: int) -> int:
    """2 * (samples - 1) comparisons per dimension: the minimum and maximum that set the outer
    bin edges when no range is given."""
    return dims * 2 * max(samples - 1, 0)


def density_ops(bins: list[int]) -> int:
    """(B - 1) + B + sum(b) + dims * B for B = prod(b) bins: sum the counts, divide by the sum,
    each dimension's bin widths (one subtract per bin) and a divide of every bin by them."""
    total = math.prod(bins)
    return (total - 1) + total + sum(bins) + len(bins) * total


@register(*aten("bincount"))
def bincount_ops(args: Args, out: Any) -> Count:
    """2 ops per value: find its bin, count it."""
    x = args.first()
    return (2 * int(x.numel()), 0) if isinstance(x, Tensor) else ZERO


@register(*aten("histc"))
def histc_ops(args: Args, out: Any) -> Count:
    """2 ops per value (find its bin, count it), plus 2 * (n - 1) for the range when ``min ==
    max`` (torch then takes the data's minimum and maximum)."""
    x = args.first()
    if not isinstance(x, Tensor):
        return ZERO
    n = int(x.numel())
    given = args.number("min", 0.0) != args.number("max", 0.0)
    return 2 * n + (0 if given else range_ops(n, 1)), 0


def _bins(bins: Any) -> tuple[list[int], int, bool]:
    """``(bins per dimension, comparisons to find one sample's bins, evenly spaced)`` of a
    ``bins`` argument: a count (or one per dimension), or the edges as tensors."""
    if isinstance(bins, int):
        return [bins], 1, True
    if isinstance(bins, Tensor):
        bins = [bins]
    if all(isinstance(edges, Tensor) for edges in bins):  # a binary search among the edges
        edges = [int(e.numel()) for e in bins]
        return [max(e - 1, 0) for e in edges], sum(max(1, log2_ceil(e + 1)) for e in edges), False
    return [int(b) for b in bins], len(bins), True


@register(*aten("histogram", "_histogramdd_from_bin_cts", "_histogramdd_from_bin_tensors"))
def histogram_ops(args: Args, out: Any) -> Count:
    """samples * (find + 1): each sample's bin found (1 op per dimension among evenly spaced
    edges, ceil(log2(edges + 1)) among edges given) and counted; + 2 * (samples - 1) per
    dimension for the range when evenly spaced edges have none given; + the density's
    (B - 1) + B + sum(b) + dims * B."""
    x = args.first()
    if not isinstance(x, Tensor):
        return ZERO
    bins, find, even = _bins(args.get("bins"))
    samples = int(x.numel()) // len(bins) if bins else 0
    ops = samples * (find + 1)
    if even and args.get("range") is None:
        ops += range_ops(samples, len(bins))
    if args.flag("density"):
        ops += density_ops(bins)
    return ops, 0


@register(*aten("_histogramdd_bin_edges"))
def histogram_edges_ops(args: Args, out: Any) -> Count:
    """2 * (samples - 1) per dimension for the range when none is given (the evenly spaced
    edges are filled, as ``linspace``, for free)."""
    x, bins = args.first(), args.get("bins")
    if not isinstance(x, Tensor) or not bins or args.get("range") is not None:
        return ZERO
    return range_ops(int(x.numel()) // len(bins), len(bins)), 0


def _slices(args: Args) -> tuple[int, int]:
    """``(m, s)``: the ``m`` slices along ``dim`` that ``unique`` compares, of ``s`` elements
    each (every element on its own without a ``dim``)."""
    x, dim = args.first(), args.get("dim")
    if not isinstance(x, Tensor):
        return 0, 0
    if dim is None or x.dim() == 0:
        return int(x.numel()), 1
    m = int(x.shape[int(dim)])
    return m, (int(x.numel()) // m if m else 0)


@register(*aten("_unique2", "unique_dim", "_unique"))
def unique_ops(args: Args, out: Any) -> Count:
    """The sort that ``unique`` performs: m * ceil(log2 m) comparisons of slices of s elements
    (s each), plus m * s to compare neighbours (m slices along ``dim``, or m = n elements)."""
    m, size = _slices(args)
    return m * log2_ceil(m) * size + m * size, 0


@register(*aten("unique_consecutive", "unique_dim_consecutive"))
def unique_consecutive_ops(args: Args, out: Any) -> Count:
    """m * s: neighbours compared, without a sort (m slices of s elements along ``dim``)."""
    m, size = _slices(args)
    return m * size, 0


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


# counted as its parts: the bin edges (for counts of bins) and the histogram
by_decomposition(*aten("histogramdd"))
