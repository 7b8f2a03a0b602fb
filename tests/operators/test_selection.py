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
    # histc over a given range: find the bin and count, 2 per value -> 20
    assert count(torch.ops.aten.histc.default, values, 4, 0.0, 1.0) == (20, 0)
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


def test_histogram_counts_finding_counting_and_the_range() -> None:
    from tests.operators.helpers import count as counted

    values = torch.rand(10)
    # 4 evenly spaced bins, no range: min and max 2 * (10 - 1) = 18, find and count 2 * 10 = 20
    assert counted(torch.histogram, values, 4) == (38, 0)
    # histc does the same work (its range comes from the data when min == max)
    assert counted(torch.histc, values, 4) == (38, 0)
    assert counted(torch.histc, values, 4, min=0.0, max=1.0) == (20, 0)
    assert counted(torch.histogram, values, 4, range=(0.0, 1.0)) == (20, 0)
    # edges given as a tensor of 3: a binary search of ceil(log2 4) = 2, and a count: 10 * 3
    assert counted(torch.histogram, values, torch.tensor([0.0, 0.5, 1.0])) == (30, 0)
    # density on 4 bins: sum 3, divide by it 4, widths 4, divide by them 4 -> 20 + 15
    assert counted(torch.histogram, values, 4, range=(0.0, 1.0), density=True) == (35, 0)


def test_histogramdd_is_the_same_in_every_grad_mode() -> None:
    from tests.operators.helpers import count as counted

    samples = torch.rand(10, 2)
    # edges: the range of 2 dims, 2 * 2 * (10 - 1) = 36; the histogram computes the range
    # again (36) and finds 2 bins and counts each of 10 samples (30): 102
    for mode in ("no_grad", "inference_mode"):
        assert counted(torch.histogramdd, samples, [3, 3], mode=mode) == (102, 0)
    # with a range and a density over 3 x 3 = 9 bins: 30 + (8 + 9 + 6 + 2 * 9) = 71
    for mode in ("no_grad", "inference_mode"):
        assert counted(torch.histogramdd, samples, [3, 3], range=[0.0, 1.0, 0.0, 1.0],
                       density=True, mode=mode) == (71, 0)


def test_segment_reduce() -> None:
    from tests.operators.helpers import count as counted

    data, lengths = torch.rand(6, 3), torch.tensor([2, 4])
    # segments of 2 and 4 rows, 3 columns: (1 + 3) * 3 = 12 adds (comparisons)
    assert counted(torch.segment_reduce, data, "sum", lengths=lengths) == (12, 0)
    assert counted(torch.segment_reduce, data, "max", lengths=lengths) == (12, 0)
    # mean: the sums and 2 * 3 divides; with an initial value every row enters: 18
    assert counted(torch.segment_reduce, data, "mean", lengths=lengths) == (18, 0)
    assert counted(torch.segment_reduce, data, "sum", lengths=lengths, initial=0.0) == (18, 0)


def test_msort_sorts_along_dim_0_in_every_grad_mode() -> None:
    from tests.operators.helpers import count as counted

    x = torch.randn(3, 8)
    # 8 columns of 3: 3 * ceil(log2 3) = 6 comparisons each -> 48 (not 3 rows of 8: 72)
    for mode in ("no_grad", "inference_mode"):
        assert counted(torch.msort, x, mode=mode) == (48, 0)


def test_logcumsumexp_steps_are_logaddexps() -> None:
    from tests.operators.helpers import count as counted

    x = torch.randn(3, 8)
    one_step = counted(torch.logaddexp, torch.randn(1), torch.randn(1))[0]
    # 3 rows of 8: 7 steps each, one logaddexp (max, subtract, abs, exp, log1p, add) per step
    assert one_step == 6
    assert counted(torch.logcumsumexp, x, 1) == (3 * 7 * one_step, 0) == (126, 0)


def test_unique_sorts_slices_and_unique_consecutive_does_not_sort() -> None:
    from tests.operators.helpers import count as counted

    values, rows = torch.randint(0, 3, (24,)), torch.randint(0, 3, (3, 8))
    # 24 values: merge sort 24 * ceil(log2 24) = 120, neighbours 24 -> 144
    assert counted(torch.unique, values) == (144, 0)
    # 3 rows of 8: 3 * ceil(log2 3) = 6 row comparisons of 8 elements = 48, neighbours 24
    assert counted(torch.unique, rows, dim=0) == (72, 0)
    # 8 columns of 3: 8 * 3 = 24 column comparisons of 3 = 72, neighbours 24
    assert counted(torch.unique, rows, dim=1) == (96, 0)
    # no sort: the 24 neighbour comparisons alone (it was priced as the sort, 144)
    assert counted(torch.unique_consecutive, values) == (24, 0)
    assert counted(torch.unique_consecutive, rows, dim=0) == (24, 0)
    assert count(torch.ops.aten.unique_dim_consecutive.default, rows, 0) == (24, 0)


def test_segment_reduce_backward() -> None:
    from tests.operators.helpers import counter_of

    lengths = torch.tensor([2, 4])

    def backward_ops(reduce: str) -> int:
        data = torch.rand(6, 3, requires_grad=True)
        counter = counter_of(
            lambda: torch.ops.aten._segment_reduce_backward.default(
                torch.ones(2, 3), torch.segment_reduce(data, reduce, lengths=lengths), data,
                reduce, lengths=lengths),
            mode="no_grad")
        forward = counter_of(torch.segment_reduce, data, reduce, lengths=lengths)
        assert not counter.missing
        return counter.ops - forward.ops

    # 18 values: a sum's gradient is copied (0), a mean's divided by the length (18), a
    # product's tested for zero, multiplied and divided (54); max: 18 comparisons with the
    # segment's maximum, 6 divides among the ties (one per segment and column)
    assert [backward_ops(r) for r in ("sum", "mean", "prod", "max")] == [0, 18, 54, 24]
