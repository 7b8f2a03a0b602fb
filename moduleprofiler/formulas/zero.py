"""Modules whose forward only moves data: dropout at inference, reshapes, padding, containers.

Dropout is the exception in training mode, where it draws and applies a mask (see
``docs/formulas/zero.md``): per mask entry 1 comparison (the Bernoulli draw ``u < 1 - p``) and 1
divide (the mask is scaled by ``1 / (1 - p)``), then 1 multiply per element. Feature dropouts
(Dropout1d/2d/3d, FeatureAlphaDropout) draw one mask entry per (sample, channel).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from moduleprofiler.formulas._common import no_macs, numel_of_first
from moduleprofiler.registry import register_macs, register_ops

_PADDING: tuple[type[nn.Module], ...] = (
    nn.modules.padding._ConstantPadNd,  # ZeroPad*d subclass ConstantPad*d
    nn.modules.padding._ReflectionPadNd,
    nn.modules.padding._ReplicationPadNd,
    nn.modules.padding._CircularPadNd,
)
_RESHAPE: tuple[type[nn.Module], ...] = (nn.Flatten, nn.Unflatten)
# Containers: their own forward (Sequential) only calls the children, whose work is counted on
# the children's records. ModuleList/ModuleDict have no forward; registered so that a subclass
# that adds one without arithmetic of its own is not reported as unsupported.
_CONTAINERS: tuple[type[nn.Module], ...] = (nn.Sequential, nn.ModuleList, nn.ModuleDict)

DROPOUT_MASK_OPS = 2  # u < 1 - p, then mask / (1 - p)
DROPOUT_ELEMENT_OPS = 1  # x * mask
# alpha dropout, as torch computes it: per mask entry the draw, (mask - 1) * (alpha' * a)
# + alpha' * a * p (3 ops) and mask * a; per element x * mask + b
_ALPHA_MASK_OPS = 5
_ALPHA_ELEMENT_OPS = 2

_FEATURE_BATCHED_NDIM: dict[type[nn.Module], int] = {
    nn.Dropout1d: 3,
    nn.Dropout3d: 5,
}


@register_ops(*_PADDING, *_RESHAPE, *_CONTAINERS)
def zero_ops(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> int:
    """0: the module copies, views or pads data and does no arithmetic of its own."""
    return 0


def _mask_entries(module: nn.Module, x: Tensor) -> int:
    """Elements of the random mask: every element, or one per (sample, channel) for feature
    dropout (torch's feature noise has shape ``(N, C, 1, ...)``; an unbatched input of
    Dropout1d/3d gets a batch of 1 first)."""
    if not isinstance(module, (nn.Dropout1d, nn.Dropout2d, nn.Dropout3d,
                               nn.FeatureAlphaDropout)):
        return int(x.numel())
    batched_ndim = next(
        (n for cls, n in _FEATURE_BATCHED_NDIM.items() if isinstance(module, cls)), None
    )
    if batched_ndim is not None and x.dim() == batched_ndim - 1:
        return int(x.shape[0]) if x.dim() else 1
    return int(x.shape[0]) * int(x.shape[1]) if x.dim() >= 2 else int(x.numel())


@register_ops(nn.modules.dropout._DropoutNd)
def dropout_ops(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> int:
    """eval or p == 0: 0; training: 2 * mask + numel (alpha dropout: 5 * mask + 2 * numel);
    p == 1: numel (torch multiplies by zero and draws no mask)."""
    x = inputs[0] if inputs else None
    if not module.training or getattr(module, "p", 0.0) == 0 or not isinstance(x, Tensor):
        return 0
    if module.p == 1:
        return numel_of_first(inputs)
    mask = _mask_entries(module, x)
    if isinstance(module, (nn.AlphaDropout, nn.FeatureAlphaDropout)):
        return _ALPHA_MASK_OPS * mask + _ALPHA_ELEMENT_OPS * numel_of_first(inputs)
    return DROPOUT_MASK_OPS * mask + DROPOUT_ELEMENT_OPS * numel_of_first(inputs)


register_macs(nn.modules.dropout._DropoutNd, *_PADDING, *_RESHAPE, *_CONTAINERS)(no_macs)
