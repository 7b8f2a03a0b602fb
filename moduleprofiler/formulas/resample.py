"""Resampling and rearranging layers: Upsample, pixel/channel shuffles, Fold and Unfold.

Rearranging data costs nothing. Interpolation costs the weighted sums that make each output
element, per channel; the interpolation weights depend only on the output coordinate, are shared
by every channel and batch entry, and are not counted. Reference: ``docs/formulas/resample.md``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from torch import Tensor, nn

from moduleprofiler.formulas._common import no_macs
from moduleprofiler.formulas.pooling import expand, pooled_elements
from moduleprofiler.registry import COVERS, register_macs, register_ops

# Separable interpolation: taps per dimension of each mode. Nearest modes copy one value.
_TAPS = {"linear": 2, "bilinear": 2, "trilinear": 2, "bicubic": 4}
_GATHERS = ("nearest", "nearest-exact")


def interpolation_ops_per_output(taps: int, dims: int) -> int:
    """Ops per output element of separable ``taps``-tap interpolation over ``dims`` dimensions.

    The last dimension is interpolated first in ``taps**(dims-1)`` lines, then each earlier one
    in ``taps**(d-1)`` lines; every line is a ``taps``-term weighted sum (``2*taps - 1`` ops).
    """
    lines = sum(int(taps**d) for d in range(dims))
    return lines * (2 * taps - 1)


@register_ops(nn.Upsample)
def upsample_ops(module: nn.Upsample, inputs: tuple[Any, ...], output: Any) -> int | None:
    """nearest: 0; linear 3, bilinear 9, trilinear 21, bicubic 35 per output; area: as avg pool.
    Any other mode (a newer torch's): ``None``, and its operators are counted instead."""
    if not _prices_mode(module):
        return None
    if not isinstance(output, Tensor) or output.dim() < 3:
        return 0
    dims = output.dim() - 2  # (N, C, *spatial)
    if module.mode == "area":  # F.interpolate runs adaptive average pooling
        return pooled_elements(inputs[0], output, dims)
    if module.mode in _GATHERS:
        return 0
    return int(output.numel()) * interpolation_ops_per_output(_TAPS[module.mode], dims)


def _prices_mode(module: nn.Upsample) -> bool:
    """Whether :func:`upsample_ops` knows the module's mode (an unknown one is not a gather)."""
    return module.mode in _TAPS or module.mode in _GATHERS or module.mode == "area"


# a mode the formula does not know has the module's operators observed and counted
setattr(upsample_ops, COVERS, _prices_mode)


@register_ops(nn.PixelShuffle, nn.PixelUnshuffle, nn.ChannelShuffle, nn.Unfold)
def rearrange_ops(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> int:
    """0: the output is a permutation (or, for Unfold, a gather with zero padding) of the input."""
    return 0


def _block_contributions(size: int, kernel: int, stride: int, padding: int,
                         dilation: int) -> list[int]:
    """How many sliding-block taps land on each of ``size`` output positions along one dim."""
    blocks = (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1
    counts = [0] * size
    for b in range(max(blocks, 0)):
        for j in range(kernel):
            position = b * stride - padding + j * dilation
            if 0 <= position < size:
                counts[position] += 1
    return counts


def fold_adds(output: Tensor, kernel: Sequence[int], stride: Sequence[int],
              padding: Sequence[int], dilation: Sequence[int]) -> int:
    """N*C * sum over output pixels of (contributions - 1) of a fold into ``output``'s last two
    dims (pixels no block touches: 0)."""
    sizes = [int(s) for s in output.shape[-2:]]
    per_dim = [
        _block_contributions(sizes[d], kernel[d], stride[d], padding[d], dilation[d])
        for d in range(2)
    ]
    # contributions at (h, w) are c_h * c_w, so the sums factorise per dimension
    total = math.prod(sum(counts) for counts in per_dim)
    covered = math.prod(sum(1 for c in counts if c) for counts in per_dim)
    maps = int(output.numel()) // (sizes[0] * sizes[1]) if sizes[0] * sizes[1] else 0
    return maps * (total - covered)


@register_ops(nn.Fold)
def fold_ops(module: nn.Fold, inputs: tuple[Any, ...], output: Any) -> int:
    """N*C * sum over output pixels of (contributions - 1) (pixels no block touches: 0)."""
    if not isinstance(output, Tensor) or output.dim() < 2:
        return 0
    kernel, dilation, padding, stride = (
        expand(value, 2, ())
        for value in (module.kernel_size, module.dilation, module.padding, module.stride)
    )
    return fold_adds(output, kernel, stride, padding, dilation)


register_macs(
    nn.Upsample, nn.PixelShuffle, nn.PixelUnshuffle, nn.ChannelShuffle, nn.Fold, nn.Unfold
)(no_macs)
