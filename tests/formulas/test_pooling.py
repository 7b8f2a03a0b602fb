"""Pooling formulas against hand arithmetic (docs/formulas/pooling.md)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.conftest import macs_of, ops_of


def test_maxpool1d_padding_clips_windows() -> None:
    # L=7, k=3, s=2, p=1 -> 4 outputs; windows [-1..1] [1..3] [3..5] [5..7] hold 2, 3, 3, 2 real
    # elements; comparisons (2-1)+(3-1)+(3-1)+(2-1) = 6 per map; 2*3 maps -> 36
    assert ops_of(nn.MaxPool1d(3, 2, padding=1), torch.randn(2, 3, 7)) == 36


def test_maxpool1d_ceil_mode_last_window_clipped() -> None:
    # L=8, k=3, s=2, ceil -> 4 outputs; windows 0-2, 2-4, 4-6, 6-7: 3+3+3+2 = 11 elements;
    # 11 - 4 = 7 comparisons
    assert ops_of(nn.MaxPool1d(3, 2, ceil_mode=True), torch.randn(1, 1, 8)) == 7


def test_maxpool1d_dilation() -> None:
    # L=9, k=3, dilation 2 -> span 5, stride 3 -> outputs (9-5)//3+1 = 2; 3 taps each, 2 cmp each
    # 2 outputs * 2 = 4 per map; 2 maps -> 8
    assert ops_of(nn.MaxPool1d(3, 3, dilation=2), torch.randn(1, 2, 9)) == 8


def test_maxpool2d_int_kernel_and_return_indices() -> None:
    # 4x4 -> 2x2 outputs, 2x2 windows: 3 comparisons each; 2 channels * 4 * 3 = 24
    x = torch.randn(1, 2, 4, 4)
    assert ops_of(nn.MaxPool2d(2), x) == 24
    assert ops_of(nn.MaxPool2d(2, return_indices=True), x) == 24


def test_maxpool2d_unbatched() -> None:
    # (C=3, 6, 6), k=3 -> 2x2 outputs of 9 elements: 3 * 4 * 8 = 96
    assert ops_of(nn.MaxPool2d(3), torch.randn(3, 6, 6)) == 96


def test_maxpool3d() -> None:
    # 4x4x4, k=2 -> 2x2x2 outputs of 8 elements: 8 * 7 = 56 per map; N*C = 2 -> 112
    assert ops_of(nn.MaxPool3d(2), torch.randn(2, 1, 4, 4, 4)) == 112


@pytest.mark.parametrize(
    ("kernel", "stride", "padding", "dilation"),
    [(3, 1, 1, 1), (3, 2, 1, 2), ((2, 3), (1, 2), (1, 0), (2, 1)), (4, 3, 2, 1)],
)
def test_maxpool2d_matches_unfold_count(kernel, stride, padding, dilation) -> None:
    # Independent count: unfold a tensor of ones with zero padding; its sum is the number of real
    # elements over all windows, and maxpool needs (window - 1) comparisons per output.
    pool = nn.MaxPool2d(kernel, stride, padding, dilation)
    x = torch.randn(2, 3, 9, 8)
    real = F.unfold(torch.ones(1, 1, 9, 8), kernel, dilation, padding, stride).sum()
    outputs = pool(x).numel()
    assert ops_of(pool, x) == int(real) * 2 * 3 - outputs


def test_avgpool1d_matches_legacy_without_padding() -> None:
    # 0.0.4: N*C*Lout*k = 2*3*(10//3 = 3)*3 = 54: (k-1) adds + 1 divide per output
    assert ops_of(nn.AvgPool1d(3), torch.randn(2, 3, 10)) == 54


def test_avgpool2d_int_kernel() -> None:
    # B6: int kernel_size. 6x6, k=3 -> 2x2 outputs * 9 = 36 per map; 2 maps -> 72
    assert ops_of(nn.AvgPool2d(3), torch.randn(1, 2, 6, 6)) == 72


@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avgpool2d_padding_counts_real_elements(count_include_pad: bool) -> None:
    # 4x4, k=3, s=1, p=1 -> 4x4 outputs; per dim windows hold 2,3,3,2 = 10 elements;
    # total 10*10 = 100 (adds w-1 + 1 divide = w per output); the divisor choice is still 1 divide
    pool = nn.AvgPool2d(3, 1, 1, count_include_pad=count_include_pad)
    assert ops_of(pool, torch.randn(1, 1, 4, 4)) == 100


def test_avgpool2d_divisor_override_and_ceil() -> None:
    # 5x5, k=2, s=2, ceil -> 3x3 outputs; per dim 2+2+1 = 5 -> 25 elements; 1 map
    pool = nn.AvgPool2d(2, ceil_mode=True, divisor_override=3)
    assert ops_of(pool, torch.randn(1, 1, 5, 5)) == 25


def test_avgpool3d() -> None:
    # 4x4x4, k=2 -> 8 outputs * 8 elements = 64 per map; 3 maps -> 192
    assert ops_of(nn.AvgPool3d(2), torch.randn(1, 3, 4, 4, 4)) == 192


def test_lppool2d() -> None:
    # 16 powers x**p + 4 outputs * (3 adds + 1 root) = 16 + 16 = 32
    assert ops_of(nn.LPPool2d(2, 2), torch.randn(1, 1, 4, 4)) == 32


def test_lppool1d_ceil_mode() -> None:
    # L=7, k=3, s=3, ceil -> 3 outputs of 3, 3, 1 elements = 7; 7 powers + 7 = 14 per map; 2 -> 28
    assert ops_of(nn.LPPool1d(1.5, 3, ceil_mode=True), torch.randn(1, 2, 7)) == 28


@pytest.mark.skipif(not hasattr(nn, "LPPool3d"), reason="LPPool3d needs torch >= 2.2")
def test_lppool3d() -> None:
    # 2x2x2 input, k=2: 8 powers + 1 output * 8 = 16
    assert ops_of(nn.LPPool3d(2, 2), torch.randn(1, 1, 2, 2, 2)) == 16


def test_adaptive_avgpool1d_uneven_windows() -> None:
    # L=7 -> 3: windows [0,3) [2,5) [4,7) of 3 each = 9 per map (w-1 adds + 1 divide each)
    assert ops_of(nn.AdaptiveAvgPool1d(3), torch.randn(1, 1, 7)) == 9


def test_adaptive_avgpool2d_is_not_the_max_formula() -> None:
    # B7: 0.0.4 gave N*C*Hout*Wout = 2*1*1 = 2; global average of 5x5 is 25 per map -> 50
    assert ops_of(nn.AdaptiveAvgPool2d(1), torch.randn(1, 2, 5, 5)) == 50


def test_adaptive_maxpool2d_none_keeps_size() -> None:
    # H 5 -> 2: windows [0,3) [2,5): 6; W 4 -> 4 (None): 4; 24 elements - 8 outputs = 16
    assert ops_of(nn.AdaptiveMaxPool2d((2, None)), torch.randn(1, 1, 5, 4)) == 16


def test_adaptive_maxpool1d_return_indices() -> None:
    # L=6 -> 4: windows [0,2) [1,3) [3,5) [4,6): 8 elements - 4 outputs = 4
    assert ops_of(nn.AdaptiveMaxPool1d(4, return_indices=True), torch.randn(1, 1, 6)) == 4


def test_adaptive_pool3d() -> None:
    # 3x3x3 -> 2x2x2: per dim windows [0,2) [1,3) = 4; 64 elements; avg 64, max 64 - 8 = 56
    x = torch.randn(1, 1, 3, 3, 3)
    assert ops_of(nn.AdaptiveAvgPool3d(2), x) == 64
    assert ops_of(nn.AdaptiveMaxPool3d(2), x) == 56


def test_fractional_maxpool() -> None:
    # 3x3 outputs, 2x2 windows: 9 * 3 = 27; 3d: 2x2x2 outputs of 2x2x2 windows: 8 * 7 = 56
    assert ops_of(nn.FractionalMaxPool2d(2, output_size=3), torch.randn(1, 1, 6, 6)) == 27
    pool3d = nn.FractionalMaxPool3d(2, output_size=2, return_indices=True)
    assert ops_of(pool3d, torch.randn(1, 1, 5, 5, 5)) == 56


def test_maxunpool_is_zero() -> None:
    pooled, indices = nn.MaxPool1d(2, return_indices=True)(torch.randn(1, 1, 4))
    assert ops_of(nn.MaxUnpool1d(2), pooled, indices) == 0


@pytest.mark.parametrize(
    "module",
    [nn.MaxPool2d(2), nn.AvgPool2d(2), nn.AdaptiveAvgPool2d(1), nn.LPPool2d(2, 2)],
)
def test_pooling_macs_are_zero(module: nn.Module) -> None:
    assert macs_of(module, torch.randn(1, 2, 4, 4)) == 0
