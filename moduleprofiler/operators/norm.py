"""Normalisation kernels: layer norm, every batch-norm entry point, group norm, RMS norm, and
instance norm as it lowers.

The decomposition is the module formulas' (``formulas/norm.py``): for each group of ``M``
values normalised together, mean ``M``, mean of squares ``2M`` and variance ``2`` when the
statistics come from the input; ``sqrt(var + eps)`` (2) per group whose statistics are used;
``(x - mean) / std`` (2 per element); and one op per element each for a weight and a bias. So a
group costs ``5M + 4``, ``6M + 4`` with a weight, ``7M + 4`` with weight and bias; with running
statistics (batch norm in eval) ``2`` per channel and ``2`` per element, plus the affine.
"""

from __future__ import annotations

import math
from typing import Any

from torch import Tensor

from moduleprofiler.formulas.norm import norm_ops, rms_ops
from moduleprofiler.operators._common import (
    ZERO,
    Args,
    Count,
    aten,
    by_decomposition,
    numel,
    register,
)


def layer_norm_count(rows: int, size: int, weight: bool, bias: bool) -> Count:
    """rows*(5E+4), + rows*E for a weight and rows*E for a bias (E = size); macs 0."""
    return norm_ops(rows * size, rows, rows, True, weight, bias), 0


def _affine(args: Args) -> tuple[bool, bool]:
    return args.tensor("weight") is not None, args.tensor("bias") is not None


def _normalized(args: Args) -> tuple[int, int]:
    """(elements of the input, elements of ``normalized_shape``); (0, 0) without a tensor."""
    x = args.first()
    size = math.prod(int(s) for s in args.get("normalized_shape") or ())
    return (numel(x), size) if isinstance(x, Tensor) else (0, 0)


@register(*aten("native_layer_norm", "layer_norm"))
def layer_norm_ops(args: Args, out: Any) -> Count:
    """rows*(5E+4); rows*(6E+4) with a weight only; rows*(7E+4) with weight and bias."""
    elements, size = _normalized(args)
    return layer_norm_count(elements // size, size, *_affine(args)) if size else ZERO


def _batch_norm_count(args: Args, always_batch_stats: bool) -> Count:
    x = args.first()
    if not isinstance(x, Tensor):
        return ZERO
    elements = numel(x)
    channels = int(x.shape[1]) if x.dim() >= 2 else elements
    batch_stats = always_batch_stats or args.flag("training") or args.tensor("running_mean") is None
    return norm_ops(elements, channels, channels, batch_stats, *_affine(args)), 0


@register(*aten(
    "native_batch_norm", "batch_norm", "_batch_norm_impl_index", "cudnn_batch_norm",
    "miopen_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
    "_native_batch_norm_legit_functional", "_batch_norm_no_update",
))  # fmt: skip
def batch_norm_ops(args: Args, out: Any) -> Count:
    """Batch statistics (training, or no running stats): C*(5M+4); running statistics:
    C*2 + 2*C*M; + C*M each for weight and bias (M = elements per channel)."""
    return _batch_norm_count(args, always_batch_stats=False)


# _batch_norm_with_update is what batch_norm lowers to in training: it always uses batch stats.
@register(*aten("_batch_norm_with_update", "_batch_norm_with_update_functional"))
def batch_norm_with_update_ops(args: Args, out: Any) -> Count:
    """C*(5M+4), + C*M each for weight and bias (batch statistics always)."""
    return _batch_norm_count(args, always_batch_stats=True)


def _group_norm_count(x: Tensor, groups: int, args: Args) -> Count:
    return norm_ops(numel(x), groups, groups, True, *_affine(args)), 0


@register(*aten("native_group_norm"))
def native_group_norm_ops(args: Args, out: Any) -> Count:
    """N*G*(5M+4) with M = numel/(N*G), + numel each for weight and bias."""
    x = args.first()
    if not isinstance(x, Tensor):
        return ZERO
    groups = int(args.get("N", 1)) * int(args.get("group", 1))
    return _group_norm_count(x, groups, args)


@register(*aten("group_norm"))
def group_norm_ops(args: Args, out: Any) -> Count:
    """N*G*(5M+4) with M = numel/(N*G), + numel each for weight and bias."""
    x = args.first()
    if not isinstance(x, Tensor):
        return ZERO
    batch = int(x.shape[0]) if x.dim() >= 1 else 1
    return _group_norm_count(x, batch * int(args.get("num_groups", 1)), args)


@register(*aten("rms_norm", "_fused_rms_norm"))
def rms_norm_ops(args: Args, out: Any) -> Count:
    """rows*(3E+2): mean of squares 2E, + eps and rsqrt 2, x * rsqrt E; + rows*E with a weight."""
    elements, size = _normalized(args)
    return (rms_ops(elements, size, args.tensor("weight") is not None), 0) if size else ZERO


# F.instance_norm lowers to batch norm over a (1, N*C, ...) view; count it as that.
# NB: with running statistics (eval) the lowering takes sqrt(var + eps) per (sample, channel),
# N*C*2 ops where nn.InstanceNorm's formula counts C*2; in training with running statistics
# it also averages the per-sample statistics back into the buffers (2*N*C ops).
by_decomposition(*aten("instance_norm"))
