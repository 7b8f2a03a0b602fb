"""Resampling formulas against hand arithmetic (docs/formulas/resample.md)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from moduleprofiler.formulas.resample import interpolation_ops_per_output, upsample_ops
from moduleprofiler.registry import COVERS
from tests.conftest import macs_of, ops_of


@pytest.mark.parametrize(
    ("taps", "dims", "expected"),
    [
        (2, 1, 3),  # linear: w0*a + w1*b
        (2, 2, 9),  # bilinear: 2 row lerps + 1 column lerp = 3 * 3
        (2, 3, 21),  # trilinear: 4 + 2 + 1 = 7 lerps * 3
        (4, 2, 35),  # bicubic: 4 row + 1 column 4-tap sums (4 mul + 3 add) = 5 * 7
    ],
)
def test_interpolation_ops_per_output(taps: int, dims: int, expected: int) -> None:
    assert interpolation_ops_per_output(taps, dims) == expected


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_upsample_nearest_is_zero(mode: str) -> None:
    assert ops_of(nn.Upsample(scale_factor=2, mode=mode), torch.randn(1, 2, 3, 3)) == 0


def test_an_upsample_mode_the_formula_does_not_know_is_unknown_not_a_free_gather() -> None:
    up = nn.Upsample(scale_factor=2, mode="bilinear")
    x = torch.randn(1, 2, 3, 3)
    out = up(x)
    up.mode = "lanczos"  # a mode a newer torch might add: F.interpolate of this one refuses it
    # before: 0, as if it were a nearest-neighbour gather; now unknown, and the formula's
    # covers test has such a module's operators observed and counted instead
    assert upsample_ops(up, (x,), out) is None
    assert getattr(upsample_ops, COVERS)(up) is False
    assert all(getattr(upsample_ops, COVERS)(nn.Upsample(scale_factor=2, mode=mode))
               for mode in ("nearest", "nearest-exact", "linear", "bilinear", "bicubic",
                            "trilinear", "area"))


def test_upsampling_nearest2d_is_zero() -> None:
    assert ops_of(nn.UpsamplingNearest2d(scale_factor=2), torch.randn(1, 2, 3, 3)) == 0


def test_upsample_linear() -> None:
    # (2, 3, 4) -> (2, 3, 8): 48 outputs * 3 = 144
    assert ops_of(nn.Upsample(scale_factor=2, mode="linear"), torch.randn(2, 3, 4)) == 144


def test_upsample_bilinear() -> None:
    # (1, 2, 3, 3) -> (1, 2, 6, 6): 72 outputs * 9 = 648
    up = nn.Upsample(scale_factor=2, mode="bilinear")
    assert ops_of(up, torch.randn(1, 2, 3, 3)) == 648


def test_upsampling_bilinear2d() -> None:
    # align_corners=True, size (5, 4): 1*1*20 outputs * 9 = 180
    assert ops_of(nn.UpsamplingBilinear2d(size=(5, 4)), torch.randn(1, 1, 3, 3)) == 180


def test_upsample_bicubic() -> None:
    # (1, 1, 2, 2) -> 4x4 = 16 outputs * 35 = 560
    up = nn.Upsample(scale_factor=2, mode="bicubic")
    assert ops_of(up, torch.randn(1, 1, 2, 2)) == 560


def test_upsample_trilinear() -> None:
    # (1, 1, 2, 2, 2) -> 4x4x4 = 64 outputs * 21 = 1344
    up = nn.Upsample(scale_factor=2, mode="trilinear")
    assert ops_of(up, torch.randn(1, 1, 2, 2, 2)) == 1344


def test_upsample_area_is_adaptive_average() -> None:
    # 5x5 -> 2x2: per dim windows [0,3) [2,5) = 6; 36 elements (w-1 adds + 1 divide = w) * 1 map
    up = nn.Upsample(size=(2, 2), mode="area")
    assert ops_of(up, torch.randn(1, 1, 5, 5)) == 36


@pytest.mark.parametrize(
    ("module", "shape"),
    [
        (nn.PixelShuffle(2), (1, 8, 3, 3)),
        (nn.PixelUnshuffle(2), (1, 2, 4, 4)),
        (nn.ChannelShuffle(2), (1, 4, 3, 3)),
        (nn.Unfold(2), (1, 2, 4, 4)),
    ],
)
def test_rearrangements_are_zero(module: nn.Module, shape: tuple[int, ...]) -> None:
    x = torch.randn(shape)
    assert ops_of(module, x) == 0
    assert macs_of(module, x) == 0


def test_fold_overlap_adds() -> None:
    # output 3x3, kernel 2, stride 1: contributions per dim 1, 2, 1 -> per pixel products
    # [[1,2,1],[2,4,2],[1,2,1]] sum 16 over 9 pixels: 16 - 9 = 7 adds; C = 4 / 4 = 1 map
    assert ops_of(nn.Fold((3, 3), 2), torch.randn(1, 4, 4)) == 7


def test_fold_without_overlap_is_zero() -> None:
    # kernel 2 = stride 2 on 4x4: every pixel gets exactly one value
    assert ops_of(nn.Fold((4, 4), 2, stride=2), torch.randn(2, 3 * 4, 4)) == 0


def test_fold_with_gaps_counts_no_negative_adds() -> None:
    # kernel 1, stride 2 on 3x3 output: 4 pixels get one value, 5 get none -> 0 adds
    assert ops_of(nn.Fold((3, 3), 1, stride=2), torch.randn(1, 1, 4)) == 0


@pytest.mark.parametrize(
    ("output_size", "kernel", "kwargs"),
    [((5, 6), (2, 3), {}), ((6, 6), 3, {"padding": 1, "stride": 2}), ((7, 5), 2, {"dilation": 2})],
)
def test_fold_matches_folding_ones(output_size, kernel, kwargs) -> None:
    # Independent count: fold a tensor of ones; each pixel holds its number of contributions c,
    # and the adds are sum(max(c - 1, 0)), per channel (C = 2, batch 2)
    fold = nn.Fold(output_size, kernel, **kwargs)
    k = kernel if isinstance(kernel, tuple) else (kernel, kernel)
    blocks = F.unfold(torch.ones(1, 1, *output_size), kernel, **kwargs).shape[-1]
    x = torch.randn(2, 2 * k[0] * k[1], blocks)
    counts = F.fold(torch.ones(1, k[0] * k[1], blocks), output_size, kernel, **kwargs)
    expected = int((counts - 1).clamp(min=0).sum()) * 2 * 2
    assert ops_of(fold, x) == expected
