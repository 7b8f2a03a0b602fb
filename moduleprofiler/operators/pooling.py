"""Pooling, upsampling, folding and table lookups.

Counts follow the module formulas (``formulas/pooling.py``, ``resample.py``, ``embedding.py``),
whose window helpers are reused: a max pool costs ``w - 1`` comparisons per output and an average
pool ``w`` (``w - 1`` adds and a divide), with ``w`` the real window (taps in the padding or past
the border do not count); adaptive pools use their variable windows; ``adaptive_avg_pool2d`` to
``1x1`` lowers to ``mean``, which counts the same. Interpolation costs the separable weighted
sums per output element (linear 3, bilinear 9, trilinear 21, bicubic 35), nearest modes nothing.
An embedding lookup is free; a bag reduction costs its adds, comparisons or divides.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from moduleprofiler.formulas.embedding import BAG_MEAN, bag_ops, max_norm_ops
from moduleprofiler.formulas.pooling import pooled_elements
from moduleprofiler.formulas.resample import fold_adds, interpolation_ops_per_output
from moduleprofiler.operators._common import (
    ZERO,
    Args,
    BoundFormula,
    Count,
    aten,
    first_tensor,
    free,
    ints,
    named,
    numel,
    register,
)


def window_elements(args: Args, out: Any, dims: int, adaptive: bool = False) -> int:
    """Real input elements summed over all windows of a strided, padded, dilated pool (or of an
    adaptive one) over the last ``dims`` dims."""
    x, pooled = args.first(), first_tensor(out)
    if not isinstance(x, Tensor) or pooled is None or x.dim() < dims or pooled.dim() < dims:
        return 0
    if adaptive:
        return pooled_elements(x, pooled, dims)
    kernel = ints(args.get("kernel_size"), dims, 1)
    stride = [s or k for s, k in zip(ints(args.get("stride"), dims, 0), kernel)]  # []: kernel
    padding = ints(args.get("padding"), dims, 0)
    dilation = ints(args.get("dilation"), dims, 1)
    return pooled_elements(x, pooled, dims, (kernel, stride, padding, dilation))


def _pool(dims: int, adaptive: bool, max_pool: bool) -> BoundFormula:
    def formula(args: Args, out: Any) -> Count:
        ops = window_elements(args, out, dims, adaptive)
        if max_pool and ops:
            ops -= numel(first_tensor(out))
        return ops, 0

    kind = ("adaptive " if adaptive else "") + ("max" if max_pool else "average")
    return named(formula, f"{kind.replace(' ', '_')}_pool{dims}d_ops",
                 f"{kind} pool over {dims} dims: sum over outputs of "
                 + ("(w - 1) comparisons." if max_pool else "w (w - 1 adds, 1 divide)."))


_POOLS: dict[int, dict[str, tuple[str, ...]]] = {
    1: {"max": ("max_pool1d", "max_pool1d_with_indices", "quantized_max_pool1d"),
        "avg": ("avg_pool1d",),
        "adaptive_max": ("adaptive_max_pool1d",),
        "adaptive_avg": ("adaptive_avg_pool1d",)},
    2: {"max": ("max_pool2d", "max_pool2d_with_indices", "mkldnn_max_pool2d",
                "quantized_max_pool2d"),
        "avg": ("avg_pool2d",),
        "adaptive_max": ("adaptive_max_pool2d",),
        "adaptive_avg": ("adaptive_avg_pool2d", "_adaptive_avg_pool2d",
                         "mkldnn_adaptive_avg_pool2d")},
    3: {"max": ("max_pool3d", "max_pool3d_with_indices", "mkldnn_max_pool3d",
                "quantized_max_pool3d"),
        "avg": ("avg_pool3d",),
        "adaptive_max": ("adaptive_max_pool3d",),
        "adaptive_avg": ("adaptive_avg_pool3d", "_adaptive_avg_pool3d")},
}  # fmt: skip

for _dims, _kinds in _POOLS.items():
    for _kind, _names in _kinds.items():
        register(*aten(*_names))(
            _pool(_dims, adaptive=_kind.startswith("adaptive"), max_pool=_kind.endswith("max"))
        )


@register(*aten("fractional_max_pool2d", "fractional_max_pool3d"))
def fractional_max_pool_ops(args: Args, out: Any) -> Count:
    """outputs * (prod(kernel_size) - 1): the random windows always lie inside the input."""
    pooled = first_tensor(out)
    dims = 2 if pooled is None or pooled.dim() < 5 else 3
    kernel = ints(args.get("kernel_size"), dims, 1)
    return numel(pooled) * (math.prod(kernel) - 1), 0


# -- upsampling --------------------------------------------------------------------------------

def _interpolation(taps: int, dims: int) -> BoundFormula:
    per_output = interpolation_ops_per_output(taps, dims)

    def formula(args: Args, out: Any) -> Count:
        return numel(first_tensor(out)) * per_output, 0

    return named(formula, f"interpolate_{taps}tap_{dims}d_ops",
                 f"numel(out) * {per_output}: separable {taps}-tap sums over {dims} dims.")


# NB: the antialiased kernels (_aa) widen their filters when downsampling; they are priced as
# the plain mode, like nn.Upsample (which has no antialias option).
register(*aten("upsample_linear1d"))(_interpolation(2, 1))
register(*aten("upsample_bilinear2d", "_upsample_bilinear2d_aa"))(_interpolation(2, 2))
register(*aten("upsample_trilinear3d"))(_interpolation(2, 3))
register(*aten("upsample_bicubic2d", "_upsample_bicubic2d_aa"))(_interpolation(4, 2))
free(
    "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d",
    "_upsample_nearest_exact1d", "_upsample_nearest_exact2d", "_upsample_nearest_exact3d",
    "max_unpool2d", "max_unpool3d", "im2col", "embedding",
)  # fmt: skip


@register(*aten("col2im"))
def col2im_ops(args: Args, out: Any) -> Count:
    """N*C * sum over output pixels of (contributions - 1), as nn.Fold."""
    folded = first_tensor(out)
    if folded is None or folded.dim() < 2:
        return ZERO
    kernel, dilation, padding, stride = (
        ints(args.get(name), 2, default)
        for name, default in (("kernel_size", 1), ("dilation", 1), ("padding", 0), ("stride", 1))
    )
    return fold_adds(folded, kernel, stride, padding, dilation), 0


# -- embeddings --------------------------------------------------------------------------------

def _distinct(indices: Tensor) -> int:
    """Distinct indices (all of them on meta, where values are unknown)."""
    if indices.device.type == "meta":
        return numel(indices)
    return int(torch.unique(indices).numel())


@register(*aten("embedding_renorm_", "embedding_renorm"))
def embedding_renorm_ops(args: Args, out: Any) -> Count:
    """distinct rows * (2 * dim + 1): the norm of each looked-up row and its max_norm test.

    NB: on the meta device the indices are unknown and every index counts as distinct.
    """
    weight, indices = args.first(), args.tensor("indices")
    if not isinstance(weight, Tensor) or indices is None or weight.dim() < 2:
        return ZERO
    return max_norm_ops(_distinct(indices), int(weight.shape[1])), 0


def bag_entries(args: Args) -> tuple[int, int]:
    """(entries reduced, non-empty bags) of an embedding-bag call.

    NB: on the meta device padding entries cannot be seen and no bag is taken to be empty.
    """
    indices, offsets = args.tensor("indices"), args.tensor("offsets")
    if indices is None or offsets is None:
        return 0, 0
    include_last = args.flag("include_last_offset")
    padding_idx = args.get("padding_idx")
    if indices.device.type == "meta" or offsets.device.type == "meta":
        return numel(indices), max(numel(offsets) - int(include_last), 0)
    flat = indices.reshape(-1)
    bounds = offsets.reshape(-1).long()
    if not include_last:  # the last bag runs to the end of the input
        bounds = torch.cat([bounds, bounds.new_tensor([flat.numel()])])
    kept = torch.ones_like(flat, dtype=torch.long)
    if isinstance(padding_idx, int) and padding_idx >= 0:
        kept = (flat != padding_idx).long()
    before = torch.cat([kept.new_zeros(1), kept.cumsum(dim=0)])  # kept entries before i
    sizes = before[bounds[1:]] - before[bounds[:-1]]
    return int(sizes.sum()), int((sizes > 0).sum())


@register(*aten("_embedding_bag", "_embedding_bag_forward_only", "embedding_bag"))
def embedding_bag_ops(args: Args, out: Any) -> Count:
    """dim * (entries - bags) for sum / max, + dim * bags for mean (the divides), + dim * entries
    with per_sample_weights; empty bags and padding entries cost nothing."""
    weight = args.first()
    if not isinstance(weight, Tensor) or weight.dim() < 2:
        return ZERO
    entries, bags = bag_entries(args)
    return bag_ops(int(weight.shape[1]), entries, bags, args.get("mode") == BAG_MEAN,
                   args.tensor("per_sample_weights") is not None), 0
