"""Formulas for convolutions: ``nn.Conv1d/2d/3d`` and ``nn.ConvTranspose1d/2d/3d``.

The counts depend on the input and output shapes only, so batched and unbatched inputs need no
special case: the number of output elements is ``output.numel()`` and the number of input
elements ``inputs[0].numel()``, whatever the batch. (moduleprofiler 0.0.4 guessed the batch from
the input rank and was wrong for unbatched inputs, bug B5.) Stride, padding (``'same'``
included), dilation and ``padding_mode`` act through the output shape. ``Lazy*`` variants
resolve through the MRO once materialised.

The channel counts are those of the call's input and output and the kernel that of the weight
itself, not ``in_channels`` / ``out_channels`` / ``kernel_size``: those attributes go stale
when the weight is replaced by one of another shape. (A parametrized weight is not read: that
would compute it again; its kernel is taken from ``kernel_size``.)
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

from torch import Tensor, nn
from torch.nn import Parameter
from torch.nn.modules.conv import _ConvNd, _ConvTransposeNd

from moduleprofiler.registry import register_macs, register_ops
from moduleprofiler.tensors import has_tensor


def _plain_weight(module: _ConvNd) -> Tensor | None:
    """The module's weight when it is a plain parameter (not parametrized, lazy or sharded)."""
    weight = module._parameters.get("weight")
    return weight if type(weight) is Parameter else None


def _kernel(module: _ConvNd) -> tuple[int, ...]:
    """The kernel's spatial size: the weight's ``(C, C' / groups, *kernel)`` shape when it is a
    plain parameter, else ``kernel_size`` (a parametrized weight is not computed again)."""
    weight = _plain_weight(module)
    return tuple(module.kernel_size) if weight is None else weight.shape[2:]


def _per_first_dim(module: _ConvNd) -> int | None:
    """Elements of the plain weight per index of its first dim (``Cin / groups * K`` for a
    convolution, ``Cout / groups * K`` for a transposed one), else ``None``."""
    weight = _plain_weight(module)
    if weight is None:
        return None
    first = int(weight.shape[0])
    return int(weight.numel()) // first if first else 0


def _channels(module: _ConvNd, x: Tensor) -> int:
    """Channels of a ``([N,] C, *spatial)`` input or output of ``module``."""
    return int(x.shape[-len(module.kernel_size) - 1])


# -- Conv1d / Conv2d / Conv3d ------------------------------------------------------------------

def _dot_length(module: _ConvNd, x: Tensor) -> int:
    # Each output element is one dot product over its group's input channels and the kernel:
    # the weight's (Cin / groups, *kernel) elements per output channel.
    per_output = _per_first_dim(module)
    if per_output is not None:
        return per_output
    return _channels(module, x) // module.groups * math.prod(module.kernel_size)


@register_ops(nn.Conv1d, nn.Conv2d, nn.Conv3d)
def conv_ops(module: _ConvNd, inputs: tuple[Any, ...], output: Tensor) -> int:
    """outputs * (2 * (Cin / groups) * K - 1), plus outputs with bias (outputs = N*Cout*spatial)."""
    per_output = 2 * _dot_length(module, inputs[0]) - 1
    if has_tensor(module, "bias"):
        per_output += 1
    return int(output.numel()) * per_output


@register_macs(nn.Conv1d, nn.Conv2d, nn.Conv3d)
def conv_macs(module: _ConvNd, inputs: tuple[Any, ...], output: Tensor) -> int:
    """outputs * (Cin / groups) * K (outputs = N*Cout*spatial)."""
    return int(output.numel()) * _dot_length(module, inputs[0])


# -- ConvTranspose1d / 2d / 3d ---------------------------------------------------------------
#
# A transposed convolution scatters: input position i, kernel tap k lands on output position
# p = i * stride - padding + k * dilation (per spatial dim). Products landing outside
# [0, out) are cropped away by ``padding``; output positions that no product reaches (gaps left
# by a stride or dilation larger than the taps can fill, and ``output_padding``) hold only the
# bias.


def _merged_length(runs: list[tuple[int, int]]) -> int:
    """Number of integers in the union of inclusive, non-negative ranges ``(first, last)``."""
    total, reach = 0, -1  # reach: the largest integer counted so far
    for first, last in sorted(runs):
        first = max(first, reach + 1)
        if last >= first:
            total += last - first + 1
        reach = max(reach, last)
    return total


@lru_cache(maxsize=4096)
def transposed_reach(n_in: int, n_out: int, stride: int, padding: int, dilation: int,
                     kernel: int) -> tuple[int, int]:
    """``(covered, landed)`` along one spatial dim of a transposed convolution.

    ``covered``: output positions in ``[0, n_out)`` reached by at least one product;
    ``landed``: ``(i, k)`` pairs whose product lands inside ``[0, n_out)``.
    """
    # For each tap k the landing positions form an arithmetic progression of step ``stride``;
    # progressions with the same residue modulo ``stride`` overlap as ranges of the quotient.
    runs: dict[int, list[tuple[int, int]]] = {}
    landed = 0
    for k in range(kernel):
        offset = k * dilation - padding  # where input position 0 lands
        lo = max(0, -(offset // stride))  # first i with offset + i * stride >= 0
        hi = min(n_in - 1, (n_out - 1 - offset) // stride)  # last i landing below n_out
        if lo > hi:
            continue
        landed += hi - lo + 1
        start = offset + lo * stride
        runs.setdefault(start % stride, []).append(
            (start // stride, start // stride + hi - lo)
        )
    covered = sum(_merged_length(residue_runs) for residue_runs in runs.values())
    return covered, landed


def _transposed_spatial_reach(module: _ConvTransposeNd, x: Tensor,
                              output: Tensor) -> tuple[int, int]:
    """Products of ``covered`` and ``landed`` over the spatial dims (see ``transposed_reach``)."""
    kernel = _kernel(module)
    dims = len(kernel)
    covered, landed = 1, 1
    for d in range(dims):
        dim_covered, dim_landed = transposed_reach(
            int(x.shape[d - dims]), int(output.shape[d - dims]), int(module.stride[d]),
            int(module.padding[d]), int(module.dilation[d]), int(kernel[d]),
        )
        covered *= dim_covered
        landed *= dim_landed
    return covered, landed


@register_ops(nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
def conv_transpose_ops(module: _ConvTransposeNd, inputs: tuple[Any, ...], output: Tensor) -> int:
    """N*Cout * (2 * (Cin/groups) * landed - covered), plus outputs with bias."""
    x = inputs[0]
    dims = len(module.kernel_size)
    spatial_out = math.prod(output.shape[-dims:])
    planes = int(output.numel()) // spatial_out if spatial_out else 0  # N * Cout
    covered, landed = _transposed_spatial_reach(module, x, output)
    # An output element that receives m >= 1 products costs m multiplies and m - 1 adds; every
    # output element has m = (Cin / groups) * (taps landing on it).
    products = _channels(module, x) // module.groups * landed
    ops = planes * (2 * products - covered)
    if has_tensor(module, "bias"):
        ops += int(output.numel())
    return ops


@register_macs(nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
def conv_transpose_macs(module: _ConvTransposeNd, inputs: tuple[Any, ...],
                        output: Tensor) -> int:
    """inputs * (Cout / groups) * K (inputs = N*Cin*spatial_in): every input meets every tap."""
    # This is what the kernels compute and FlopCounterMode counts, including the products that
    # ``padding`` crops away afterwards.
    per_input = _per_first_dim(module)
    if per_input is None:
        per_input = _channels(module, output) // module.groups * math.prod(module.kernel_size)
    return int(inputs[0].numel()) * per_input
