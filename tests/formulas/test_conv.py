"""Convolution formulas against hand arithmetic, FlopCounterMode and a brute-force count."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn.modules.conv import _ConvTransposeNd

from moduleprofiler.formulas.conv import transposed_reach
from tests.conftest import fcm_flops, macs_of, ops_of

# -- Conv1d / 2d / 3d --------------------------------------------------------------------------


def test_conv1d_ops_batched_matches_0_0_4() -> None:
    # Lout = 10-3+1 = 8; outputs = 1*4*8 = 32; per output 2*2*3 - 1 + 1 = 12; total 384
    # (0.0.4: N*Cout*Lout*Cin*2*K/groups = 1*4*8*2*2*3 = 384)
    assert ops_of(nn.Conv1d(2, 4, 3), torch.randn(1, 2, 10)) == 384


def test_conv2d_unbatched_is_not_multiplied_by_channels() -> None:
    # (3,8,8) is one image: outputs 4*6*6 = 144; per output 2*3*9 = 54; total 7776
    # (0.0.4 took N = 3 from the first dim and reported 23328, bug B5)
    assert ops_of(nn.Conv2d(3, 4, 3), torch.randn(3, 8, 8)) == 7776


def test_conv2d_groups_stride_dilation_padding_no_bias() -> None:
    # H = W = floor((9 + 2 - 2*2 - 1)/2) + 1 = 4; outputs 2*6*16 = 192;
    # dot length (4/2)*9 = 18; per output 2*18 - 1 = 35; total 6720; macs 192*18 = 3456
    module = nn.Conv2d(4, 6, 3, stride=2, padding=1, dilation=2, groups=2, bias=False)
    x = torch.randn(2, 4, 9, 9)
    assert ops_of(module, x) == 6720
    assert macs_of(module, x) == 3456


def test_conv1d_padding_same() -> None:
    # 'same' keeps L = 7; outputs 3*7 = 21; dot length 2*4 = 8; per output 2*8 = 16; total 336
    module = nn.Conv1d(2, 3, 4, padding="same", dilation=2)
    assert ops_of(module, torch.randn(1, 2, 7)) == 336


def test_conv2d_circular_padding_mode() -> None:
    # circular padding 1 keeps 5x5; outputs 2*25 = 50; per output 2*1*9 = 18; total 900
    module = nn.Conv2d(1, 2, 3, padding=1, padding_mode="circular")
    assert ops_of(module, torch.randn(1, 1, 5, 5)) == 900


def test_conv3d_unbatched_tuple_kernel() -> None:
    # (2,3,4,5) unbatched, kernel (1,2,3): out (4,3,3,3), outputs 108; dot 2*6 = 12;
    # ops 108*24 = 2592; macs 108*12 = 1296
    module = nn.Conv3d(2, 4, (1, 2, 3))
    x = torch.randn(2, 3, 4, 5)
    assert ops_of(module, x) == 2592
    assert macs_of(module, x) == 1296


def test_lazy_conv2d_after_materialisation() -> None:
    module = nn.LazyConv2d(4, 3)
    module(torch.randn(1, 3, 8, 8))  # materialise: in_channels = 3
    assert ops_of(module, torch.randn(3, 8, 8)) == 7776  # as nn.Conv2d(3, 4, 3) above


CONV_CASES: list[tuple[nn.Module, tuple[int, ...]]] = [
    (nn.Conv1d(2, 4, 3), (1, 2, 10)),
    (nn.Conv1d(4, 4, 5, stride=3, groups=4, bias=False), (4, 17)),
    (nn.Conv2d(3, 4, 3), (3, 8, 8)),
    (nn.Conv2d(4, 6, 3, stride=2, padding=1, dilation=2, groups=2), (2, 4, 9, 9)),
    (nn.Conv2d(1, 2, 3, padding=1, padding_mode="reflect"), (1, 1, 5, 5)),
    (nn.Conv3d(2, 4, (1, 2, 3)), (2, 3, 4, 5)),
    (nn.Conv3d(2, 4, 3, padding="same", groups=2), (2, 2, 5, 5, 5)),
]


@pytest.mark.parametrize(("module", "shape"), CONV_CASES)
def test_conv_macs_match_flop_counter(module: nn.Module, shape: tuple[int, ...]) -> None:
    x = torch.randn(*shape)
    assert 2 * macs_of(module, x) == fcm_flops(module, x)


# -- ConvTranspose1d / 2d / 3d -----------------------------------------------------------------


def test_conv_transpose1d_b9_example() -> None:
    # out L = (10-1)*2 + 4 = 22; macs = N*Cin*Lin*(Cout/g)*K = 1*2*10*3*4 = 240
    # (0.0.4 reported 768 ops for this layer, bug B9). Every position is reached (covered 22),
    # 40 (i, k) pairs land; ops = N*Cout*(2*(Cin/g)*40 - 22) + bias 3*22 = 3*138 + 66 = 480
    module = nn.ConvTranspose1d(2, 3, 4, stride=2)
    x = torch.randn(1, 2, 10)
    assert macs_of(module, x) == 240
    assert ops_of(module, x) == 480


def test_conv_transpose1d_stride_gaps() -> None:
    # stride 3 > kernel 2: out L = 3*3 + 2 = 11, reached 0,1,3,4,6,7,9,10 (covered 8, landed 8);
    # each reached position gets 1 product: ops = N*Cout*(2*8 - 8) + bias 2*11 = 16 + 22 = 38;
    # macs = 1*1*4*2*2 = 16
    module = nn.ConvTranspose1d(1, 2, 2, stride=3)
    x = torch.randn(1, 1, 4)
    assert ops_of(module, x) == 38
    assert macs_of(module, x) == 16


def test_conv_transpose1d_output_padding_positions_cost_nothing() -> None:
    # out L = 2*3 + 2 + 2 = 10; reached 0,1,3,4,6,7; positions 8 and 9 get no product.
    # 6 products, one per reached position: 6 multiplies, no adds, no bias -> 6
    module = nn.ConvTranspose1d(1, 1, 2, stride=3, output_padding=2, bias=False)
    assert ops_of(module, torch.randn(1, 1, 3)) == 6


def test_conv_transpose1d_padding_crops_products() -> None:
    # L = 4, K = 3, padding 1: p = i + k - 1; (i=0,k=0) -> -1 and (i=3,k=2) -> 4 are cropped.
    # Products per position: 2, 3, 3, 2 -> ops (2*2-1) + (2*3-1)*2 + (2*2-1) = 16.
    # macs count all 4*3 = 12 products the kernel forms (FlopCounterMode: 24 = 2*12).
    module = nn.ConvTranspose1d(1, 1, 3, padding=1, bias=False)
    x = torch.randn(1, 1, 4)
    assert ops_of(module, x) == 16
    assert macs_of(module, x) == 12


def test_conv_transpose2d_unbatched_groups_dilation() -> None:
    # (4,3,3) unbatched, Cin/g = 2, Cout = 6, kernel (2,3), stride (3,2), dilation (1,2).
    # H: out (3-1)*3 + 1 + 1 = 8, positions 3i + k: 0,1,3,4,6,7 -> covered 6, landed 6.
    # W: out (3-1)*2 + 2*2 + 1 = 9, positions 2i + 2k: 0,2,4,6,8 -> covered 5, landed 9.
    # ops = 6*(2*2*(6*9) - 6*5) + bias 6*8*9 = 6*186 + 432 = 1548
    # macs = inputs 4*3*3 = 36 * (Cout/g)*K = 3*6 -> 648
    module = nn.ConvTranspose2d(4, 6, (2, 3), stride=(3, 2), dilation=(1, 2), groups=2)
    x = torch.randn(4, 3, 3)
    assert ops_of(module, x) == 1548
    assert macs_of(module, x) == 648


def test_conv_transpose2d_output_size_argument() -> None:
    # per dim: Lin 5, out 10 (from output_size), s 2, p 1, K 3: p = 2i - 1 + k ranges -1..9,
    # only (0,0) -> -1 is cropped: landed 14, covered 10. 2-D: landed 196, covered 100.
    # ops = N*Cout*(2*(Cin/g)*196 - 100) + bias 400 = 4*684 + 400 = 3136
    module = nn.ConvTranspose2d(2, 4, 3, stride=2, padding=1)
    assert ops_of(module, torch.randn(1, 2, 5, 5), [10, 10]) == 3136


def test_conv_transpose3d() -> None:
    # out 4 per dim, fully reached: covered = landed = 4**3 = 64 per (n, cout) plane;
    # ops = 2*(2*1*64 - 64) + bias 2*64 = 256; macs = 8 inputs * 2 * 8 = 128
    module = nn.ConvTranspose3d(1, 2, 2, stride=2)
    x = torch.randn(1, 1, 2, 2, 2)
    assert ops_of(module, x) == 256
    assert macs_of(module, x) == 128


T1, T2, T3 = nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d
TRANSPOSED_CASES: list[tuple[type[_ConvTransposeNd], dict[str, Any], tuple[int, ...]]] = [
    (T1, {"in_channels": 2, "out_channels": 3, "kernel_size": 4, "stride": 2}, (1, 2, 10)),
    (T1, {"in_channels": 1, "out_channels": 2, "kernel_size": 2, "stride": 3}, (2, 1, 4)),
    (T1, {"in_channels": 1, "out_channels": 1, "kernel_size": 2, "stride": 3,
          "output_padding": 2}, (1, 1, 3)),
    (T1, {"in_channels": 4, "out_channels": 6, "kernel_size": 3, "stride": 2, "groups": 2,
          "padding": 2}, (4, 7)),
    (T2, {"in_channels": 4, "out_channels": 6, "kernel_size": (2, 3), "stride": (3, 2),
          "dilation": (1, 2), "groups": 2}, (4, 3, 3)),
    (T2, {"in_channels": 2, "out_channels": 4, "kernel_size": 3, "stride": 2, "padding": 1,
          "output_padding": 1}, (2, 2, 5, 4)),
    (T3, {"in_channels": 2, "out_channels": 2, "kernel_size": (3, 1, 2), "stride": (1, 3, 2),
          "padding": (1, 0, 1), "dilation": (2, 1, 1)}, (1, 2, 3, 3, 4)),
]


def _ones_counts(module: _ConvTransposeNd, shape: tuple[int, ...]) -> torch.Tensor:
    """Products landing on each output element: the output of an all-ones, bias-free layer on
    an all-ones input (each product is 1 * 1)."""
    with torch.no_grad():
        module.weight.fill_(1.0)
        return module(torch.ones(*shape)).round().long()


@pytest.mark.parametrize(("cls", "config", "shape"), TRANSPOSED_CASES)
def test_conv_transpose_ops_match_brute_force(
    cls: type[_ConvTransposeNd], config: dict[str, Any], shape: tuple[int, ...]
) -> None:
    # An output element receiving m products costs m multiplies and m - 1 adds when m >= 1,
    # nothing when m = 0; the bias adds 1 per output element.
    counts = _ones_counts(cls(**config, bias=False), shape)
    expected = int((2 * counts - (counts > 0).long()).sum())
    assert ops_of(cls(**config, bias=False), torch.randn(*shape)) == expected
    assert ops_of(cls(**config, bias=True), torch.randn(*shape)) == expected + counts.numel()


@pytest.mark.parametrize(("cls", "config", "shape"), TRANSPOSED_CASES)
def test_conv_transpose_covered_matches_brute_force(
    cls: type[_ConvTransposeNd], config: dict[str, Any], shape: tuple[int, ...]
) -> None:
    # covered (product over dims of transposed_reach) = nonzero outputs of one (n, cout) plane
    module = cls(**config, bias=False)
    counts = _ones_counts(module, shape)
    dims = len(module.kernel_size)
    plane = counts.reshape(-1, *counts.shape[-dims:])[0]
    covered = math.prod(
        transposed_reach(shape[d - dims], counts.shape[d - dims], module.stride[d],
                         int(module.padding[d]), module.dilation[d], module.kernel_size[d])[0]
        for d in range(dims)
    )
    assert covered == int((plane != 0).sum())


@pytest.mark.parametrize(("cls", "config", "shape"), TRANSPOSED_CASES)
def test_conv_transpose_macs_match_flop_counter(
    cls: type[_ConvTransposeNd], config: dict[str, Any], shape: tuple[int, ...]
) -> None:
    module = cls(**config)
    x = torch.randn(*shape)
    assert 2 * macs_of(module, x) == fcm_flops(module, x)


@pytest.mark.parametrize(
    ("n_in", "n_out", "stride", "padding", "dilation", "kernel"),
    [(0, 3, 1, 0, 1, 3), (1, 1, 1, 0, 1, 1), (4, 11, 3, 0, 1, 2), (5, 10, 2, 1, 1, 3),
     (3, 4, 1, 3, 1, 3), (6, 20, 4, 2, 3, 4), (9, 30, 2, 5, 2, 5)],
)
def test_transposed_reach_matches_enumeration(
    n_in: int, n_out: int, stride: int, padding: int, dilation: int, kernel: int
) -> None:
    landing = [i * stride - padding + k * dilation for i in range(n_in) for k in range(kernel)]
    inside = [p for p in landing if 0 <= p < n_out]
    assert transposed_reach(n_in, n_out, stride, padding, dilation, kernel) == (
        len(set(inside)), len(inside)
    )


def test_conv2d_counts_a_replaced_weight() -> None:
    module = nn.Conv2d(3, 8, 3)
    module.weight = nn.Parameter(torch.randn(4, 3, 5, 5))  # out_channels, kernel_size stale
    module.bias = nn.Parameter(torch.randn(4))
    x = torch.randn(1, 3, 7, 7)
    # output (1, 4, 3, 3): 36 outputs, each a dot product of 3 * 5 * 5 = 75 plus the bias:
    # 36 * (2 * 75 - 1 + 1) = 5400 ops, 36 * 75 = 2700 MACs (kernel_size gave 36 * 54 = 1944)
    assert ops_of(module, x) == 5400
    assert 2 * macs_of(module, x) == fcm_flops(module, x) == 5400


def test_conv_transpose1d_counts_a_replaced_weight() -> None:
    module = nn.ConvTranspose1d(2, 3, 2, bias=False)
    module.weight = nn.Parameter(torch.randn(4, 5, 3))  # (Cin, Cout, K): all three stale
    x = torch.randn(1, 4, 6)
    # every input element meets every tap of every output channel: 4 * 6 * 5 * 3 = 360 MACs;
    # output length 6 + 3 - 1 = 8, no padding: every product lands (landed 6 * 3 = 18), the 8
    # positions all covered: 5 * (2 * 4 * 18 - 8) = 680 ops (the attributes gave 3 * 2 * 6 * 2
    # = 72 MACs)
    assert macs_of(module, x) == 360
    assert 2 * macs_of(module, x) == fcm_flops(module, x)
    assert ops_of(module, x) == 680
