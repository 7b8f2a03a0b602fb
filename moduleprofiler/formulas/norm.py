"""Normalisation layers: BatchNorm, InstanceNorm, LayerNorm, GroupNorm, RMSNorm, LRN.

Statistics-based norms share one decomposition (reference: ``docs/formulas/norm.md``). For a
group of ``M`` values normalised together:

* mean: ``M - 1`` adds + 1 divide = ``M``
* mean of squares: ``M`` squares + ``M - 1`` adds + 1 divide = ``2M``
* variance = mean of squares - mean²: 1 square + 1 subtract = ``2``
* ``sqrt(var + eps)``: 1 add + 1 sqrt = ``2`` (per group whose statistics are used)
* normalise ``(x - mean) / std``: 2 per element
* affine: 1 per element for the weight, 1 for the bias

so a group costs ``5M + 4`` plain and ``7M + 4`` with weight and bias, which are moduleprofiler
0.0.4's BatchNorm and LayerNorm numbers. With running statistics (BatchNorm / InstanceNorm in
eval mode) the statistics are not computed: only ``sqrt(var + eps)`` per channel and the
per-element normalisation remain.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from moduleprofiler.formulas._common import no_macs
from moduleprofiler.registry import register_macs, register_ops
from moduleprofiler.tensors import has_tensor

_VARIANCE_PER_GROUP = 2  # var = E[x²] - mean²: one square, one subtract
STD_PER_GROUP = 2  # sqrt(var + eps): one add, one sqrt
_NORMALISE_PER_ELEMENT = 2  # (x - mean) / std


def norm_ops(elements: int, stat_groups: int, std_groups: int, batch_stats: bool,
             weight: bool, bias: bool) -> int:
    """Statistics of ``stat_groups`` groups (mean ``M``, mean of squares ``2M``, variance 2;
    when computed from the input), ``sqrt(var + eps)`` of ``std_groups`` groups,
    ``(x - mean) / std`` of every element, and one op per element each for a weight and a
    bias."""
    if elements == 0:
        return 0
    ops = std_groups * STD_PER_GROUP + elements * _NORMALISE_PER_ELEMENT
    if batch_stats and stat_groups > 0:
        ops += stat_groups * (3 * (elements // stat_groups) + _VARIANCE_PER_GROUP)
    return ops + (int(weight) + int(bias)) * elements


def rms_ops(elements: int, size: int, weight: bool) -> int:
    """rows*(3E+2): mean of squares 2E, + eps and sqrt 2, divide E; + E with a weight."""
    rows = elements // size if size else 0
    return rows * (2 * size + STD_PER_GROUP) + elements * (1 + int(weight))


def _affine(module: nn.Module) -> tuple[bool, bool]:
    """Whether the module has a weight and a bias."""
    return has_tensor(module, "weight"), has_tensor(module, "bias")


def _uses_batch_stats(module: nn.Module) -> bool:
    """torch's ``bn_training``: batch statistics in training mode or without running buffers."""
    if module.training:
        return True
    return not has_tensor(module, "running_mean") and not has_tensor(module, "running_var")


@register_ops(nn.modules.batchnorm._BatchNorm)
def batchnorm_ops(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> int:
    """Batch stats: C*(5M+4) (+2*C*M affine); running stats: C*(2M+2) (+2*C*M affine)."""
    x: Tensor = inputs[0]
    numel = int(x.numel())
    channels = int(x.shape[1]) if x.dim() >= 2 else numel
    return norm_ops(numel, channels, channels, _uses_batch_stats(module), *_affine(module))


def _instance_count(module: nn.Module, x: Tensor) -> tuple[int, int]:
    """(instances N*C, channels C) of an InstanceNorm input, batched or not."""
    spatial_dims = module._get_no_batch_dim() - 1  # type: ignore[operator]
    channels = int(x.shape[-spatial_dims - 1]) if x.dim() > spatial_dims else 1
    spatial = int(torch.Size(x.shape[x.dim() - spatial_dims :]).numel())
    return (int(x.numel()) // spatial if spatial else 0), channels


@register_ops(nn.modules.instancenorm._InstanceNorm)
def instancenorm_ops(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> int:
    """Input stats: N*C*(5L+4) (+2*N*C*L affine); running stats: C*2 + 2*N*C*L (+affine)."""
    x: Tensor = inputs[0]
    numel = int(x.numel())
    instances, channels = _instance_count(module, x)
    # torch's F.instance_norm: use_input_stats = training or not track_running_stats
    input_stats = module.training or not module.track_running_stats
    std_groups = instances if input_stats else channels
    return norm_ops(numel, instances, std_groups, input_stats, *_affine(module))


@register_ops(nn.LayerNorm)
def layernorm_ops(module: nn.LayerNorm, inputs: tuple[Any, ...], output: Any) -> int:
    """rows*(5E+4); rows*(6E+4) with a weight only; rows*(7E+4) with weight and bias."""
    numel, size = int(inputs[0].numel()), int(torch.Size(module.normalized_shape).numel())
    rows = numel // size if size else 0
    return norm_ops(numel, rows, rows, True, *_affine(module))


@register_ops(nn.GroupNorm)
def groupnorm_ops(module: nn.GroupNorm, inputs: tuple[Any, ...], output: Any) -> int:
    """N*G*(5M+4) with M = numel/(N*G), plus 2*numel with affine."""
    x: Tensor = inputs[0]
    numel = int(x.numel())
    groups = (int(x.shape[0]) if x.dim() >= 1 else 1) * module.num_groups
    return norm_ops(numel, groups, groups, True, *_affine(module))


@register_ops(nn.RMSNorm)
def rmsnorm_ops(module: nn.RMSNorm, inputs: tuple[Any, ...], output: Any) -> int:
    """rows*(3E+2): mean of squares 2E, +eps and sqrt 2, divide E; +E with a weight."""
    size = int(torch.Size(module.normalized_shape).numel())
    return rms_ops(int(inputs[0].numel()), size, _affine(module)[0])


def _lrn_window_sizes(size: int, channels: int) -> list[int]:
    """Real (border-clipped) length of each channel's window ``[c - size//2, c + (size-1)//2]``."""
    return [
        min(channels, c + (size - 1) // 2 + 1) - max(0, c - size // 2) for c in range(channels)
    ]


@register_ops(nn.LocalResponseNorm)
def local_response_norm_ops(
    module: nn.LocalResponseNorm, inputs: tuple[Any, ...], output: Any
) -> int:
    """(numel/C) * sum_c (w_c + 5): square, w_c-1 window adds, *alpha/n, +k, pow beta, divide."""
    x: Tensor = inputs[0]
    if x.dim() < 2 or x.numel() == 0:
        return 0
    channels = int(x.shape[1])
    positions = int(x.numel()) // channels
    return positions * sum(w + 5 for w in _lrn_window_sizes(module.size, channels))


@register_ops(nn.CrossMapLRN2d)
def cross_map_lrn2d_ops(module: nn.CrossMapLRN2d, inputs: tuple[Any, ...], output: Any) -> int:
    """Running channel-window sum (1st window, then +1 and -1 per channel) + 5 per element."""
    x: Tensor = inputs[0]
    if x.dim() != 4 or x.numel() == 0:
        return 0
    channels = int(x.shape[1])
    positions = int(x.numel()) // channels
    # torch's legacy kernel: the first window sums ``pre_pad`` maps, then each next channel adds
    # the map entering the window and (past ``pre_pad``) subtracts the one leaving it.
    pre_pad = int((module.size - 1) / 2 + 1)
    window_adds = min(pre_pad, channels) - 1
    window_adds += sum(
        int(c < channels - pre_pad + 1) + int(c > pre_pad) for c in range(1, channels)
    )
    # square, * alpha/size, + k, pow -beta, * input
    return positions * window_adds + 5 * int(x.numel())


register_macs(
    nn.modules.batchnorm._BatchNorm,
    nn.modules.instancenorm._InstanceNorm,
    nn.LayerNorm,
    nn.GroupNorm,
    nn.RMSNorm,
    nn.LocalResponseNorm,
    nn.CrossMapLRN2d,
)(no_macs)
