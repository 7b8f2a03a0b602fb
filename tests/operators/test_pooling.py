"""Pooling, upsampling, folding and embeddings against hand arithmetic and module formulas."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.conftest import ops_of
from tests.operators.helpers import count, on_meta

X = torch.randn(2, 3, 8, 8)  # 6 maps


@pytest.mark.parametrize(
    ("module", "x", "expected"),
    [
        # out 4x4; per dim the windows at -1, 1, 3, 5 keep 2 + 3 + 3 + 3 = 11 real taps:
        # 6 maps * 121 = 726 taps - 96 outputs = 630 comparisons
        (nn.MaxPool2d(3, 2, 1), X, 630),
        (nn.AvgPool2d(3, 2, 1), X, 726),  # w per output (w - 1 adds + divide): 726
        # ceil_mode: out 3x3, windows 2 + 2 + 1 = 5 taps per dim: 25 - 9 = 16
        (nn.MaxPool2d(2, 2, ceil_mode=True), torch.randn(1, 1, 5, 5), 16),
        # 12 lines of 5, windows of 2 at 0 and 2: 4 taps - 2 outputs = 2 per line: 24
        (nn.MaxPool1d(2), torch.randn(3, 4, 5), 24),
        (nn.AvgPool1d(2), torch.randn(3, 4, 5), 48),  # 4 taps per line: 48
        # out 2x2x2 of 2 maps: 2 * 4*4*4 taps - 16 outputs = 112
        (nn.MaxPool3d(2), torch.randn(1, 2, 4, 4, 4), 112),
        (nn.AdaptiveAvgPool2d(1), X, 384),  # lowered to mean: 6 maps * 64
        # 8 -> 3: windows [0, 3), [2, 6), [5, 8): 3 + 4 + 3 = 10 per dim: 6 * 100 = 600
        (nn.AdaptiveAvgPool2d(3), X, 600),
        (nn.AdaptiveMaxPool2d(3), X, 546),  # 600 - 54 outputs
        (nn.AdaptiveMaxPool1d(1), torch.randn(2, 7), 12),  # 2 * (7 - 1)
    ],
    ids=repr,
)
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_pools(module: nn.Module, x: torch.Tensor, expected: int, mode: str) -> None:
    assert count(module, x, mode=mode) == (expected, 0)
    assert ops_of(module, x) == expected


def test_fractional_max_pool() -> None:
    # 9 outputs * (2*2 - 1) comparisons
    pool, x = nn.FractionalMaxPool2d(2, output_size=3), torch.randn(1, 1, 5, 5)
    assert count(pool, x) == (27, 0)
    assert ops_of(pool, x) == 27


@pytest.mark.parametrize(
    ("pool", "shape", "gradients"),
    [
        (nn.FractionalMaxPool2d(2, output_size=3), (1, 2, 5, 5), 2 * 9),
        (nn.FractionalMaxPool3d(2, output_size=2), (1, 2, 4, 4, 4), 2 * 8),
    ],
)
def test_fractional_max_pool_backward_scatters_each_gradient(pool: nn.Module,
                                                             shape: tuple[int, ...],
                                                             gradients: int) -> None:
    from moduleprofiler import ModuleProfiler

    x = torch.randn(*shape, requires_grad=True)
    profile = ModuleProfiler().profile(pool, x, backward=True)
    # each output's gradient added into its maximum's position: one add per gradient element
    # (2 channels x 3 x 3; 2 x 2 x 2 x 2)
    assert profile.total_backward_ops == gradients and profile.backward_complete


X_UP = torch.randn(1, 2, 3, 3)


@pytest.mark.parametrize(
    ("module", "x", "expected"),
    [
        (nn.Upsample(scale_factor=2, mode="bilinear"), X_UP, 648),  # 72 outputs * 9
        (nn.Upsample(scale_factor=2, mode="bicubic"), X_UP, 2520),  # 72 * 35
        (nn.Upsample(scale_factor=2), X_UP, 0),  # nearest: a gather
        (nn.Upsample(scale_factor=2, mode="nearest-exact"), X_UP, 0),
        (nn.Upsample(scale_factor=2, mode="linear"), torch.randn(1, 2, 3), 36),  # 12 * 3
        (nn.Upsample(scale_factor=2, mode="trilinear"), torch.randn(1, 1, 2, 2, 2), 1344),  # 64*21
        # 3 -> 2: windows [0, 2), [1, 3): 4 taps per dim, 16 per map, 2 maps
        (nn.Upsample(size=(2, 2), mode="area"), X_UP, 32),
    ],
    ids=repr,
)
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_upsample(module: nn.Module, x: torch.Tensor, expected: int, mode: str) -> None:
    assert count(module, x, mode=mode) == (expected, 0)
    assert ops_of(module, x) == expected


def test_fold_and_unfold() -> None:
    # Fold 2x2 blocks (stride 1) into 4x4: per dim contributions 1, 2, 2, 1 (sum 6, 4 covered):
    # 36 - 16 = 20 adds per map, 2 maps = 40; Unfold is a gather
    fold, x = nn.Fold((4, 4), 2), torch.randn(1, 8, 9)
    assert count(fold, x) == (40, 0)
    assert ops_of(fold, x) == 40
    assert count(nn.Unfold(2), torch.randn(1, 2, 4, 4)) == (0, 0)


def test_rearrangements_are_free() -> None:
    assert count(nn.PixelShuffle(2), torch.randn(1, 8, 3, 3)) == (0, 0)
    assert count(lambda x: F.pad(x, (1, 1), mode="reflect"), torch.randn(1, 2, 3)) == (0, 0)


# -- embeddings --------------------------------------------------------------------------------

INDICES = torch.tensor([1, 2, 3, 4, 5, 6])


def test_embedding() -> None:
    table, idx = nn.Embedding(10, 3), torch.tensor([[1, 2], [2, 5]])
    assert count(table, idx) == (0, 0)  # a lookup
    # max_norm: 3 distinct rows * (3 squares + 2 adds + root + test = 2*3 + 1)
    renorm = nn.Embedding(10, 3, max_norm=1.0)
    assert count(renorm, idx) == (21, 0)
    assert ops_of(renorm, idx) == 21


@pytest.mark.parametrize(
    ("options", "offsets", "weights", "expected"),
    [
        ({"mode": "sum"}, [0, 2], None, 12),  # bags of 2 and 4: dim 3 * (6 - 2) adds
        ({"mode": "mean"}, [0, 2], None, 18),  # + 3 * 2 divides
        ({"mode": "max"}, [0, 2], None, 12),  # comparisons instead of adds
        ({"mode": "sum"}, [0, 2], torch.rand(6), 30),  # + 3 * 6 weight multiplies
        ({"mode": "sum", "padding_idx": 2}, [0, 2], None, 9),  # entry 2 skipped: 3 * (5 - 2)
        ({"mode": "sum"}, [0, 0, 3], None, 12),  # an empty bag costs nothing: 3 * (6 - 2)
        ({"mode": "sum", "include_last_offset": True}, [0, 2, 6], None, 12),
    ],
)
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_embedding_bag(options: dict[str, Any], offsets: list[int],
                       weights: torch.Tensor | None, expected: int, mode: str) -> None:
    bag = nn.EmbeddingBag(10, 3, **options)
    args = (INDICES, torch.tensor(offsets)) + ((weights,) if weights is not None else ())
    assert count(bag, *args, mode=mode) == (expected, 0)
    assert ops_of(bag, *args) == expected


def test_embedding_bag_on_meta_assumes_full_bags() -> None:
    # NB: values are unknown on meta: no entry is padding, no bag empty: as the sum case, 12
    with torch.device("meta"):
        bag = nn.EmbeddingBag(10, 3, mode="sum")
    assert count(bag, *on_meta((INDICES, torch.tensor([0, 2])))) == (12, 0)


META_CASES: list[tuple[Callable[..., Any], tuple[Any, ...]]] = [
    (lambda x: F.max_pool2d(x, 3, 2, 1), (X,)),
    (lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True), (X,)),
    (lambda x: F.adaptive_avg_pool2d(x, 3), (X,)),
    (lambda x: F.adaptive_max_pool2d(x, (3, 5)), (X,)),
    (lambda x: F.interpolate(x, scale_factor=2, mode="bicubic"), (X,)),
    (lambda x: F.interpolate(x, size=(5, 3), mode="area"), (X,)),
]


@pytest.mark.parametrize(("fn", "args"), META_CASES)
def test_meta_device_counts_the_same(fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    assert count(fn, *on_meta(args)) == count(fn, *args)
