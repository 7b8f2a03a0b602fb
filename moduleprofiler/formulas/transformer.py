"""``nn.Transformer`` and its encoder/decoder stacks and layers: only their own work.

The profiler hooks every module, and a ``TransformerEncoderLayer`` whose modules carry hooks
skips its fused fast path (``torch._transformer_encoder_layer_fwd``), so under the profiler the
children (``self_attn``, ``linear1``, ``linear2``, ``norm*``, ``dropout*`` and an ``activation``
given as a module) are always called and counted by their own formulas. These formulas count
only what the layer's own ``forward`` computes outside its children:

* one add per element for each residual connection (2 in an encoder layer, 3 in a decoder
  layer; ``norm_first`` moves the norms, not the adds),
* the activation between ``linear1`` and ``linear2`` when it is a plain function (``"relu"`` and
  ``"gelu"`` become ``F.relu`` / ``F.gelu``), at the per-element cost of ``nn.ReLU`` (1) and
  ``nn.GELU`` (5, erf form) so both spellings count the same. Any other function (``F.silu``, a
  lambda) is not priced here: the formula's ``covers`` test says so before the layer runs, and
  the layer's own operators (the residual adds and the activation) are counted instead
  (``ops_source == "operator"``); with ``operators=False`` its own count is unknown (``None``).

``TransformerEncoder``, ``TransformerDecoder`` and ``Transformer`` only call children (the final
``norm`` is a child too); converting to and from nested tensors moves data: 0 ops. ``macs`` are
0 throughout: the matmuls belong to the children. See ``docs/formulas/attention.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from moduleprofiler.formulas._common import no_macs
from moduleprofiler.formulas.activation import GELU_ERF, PER_ELEMENT
from moduleprofiler.registry import COVERS, Count, register_macs, register_ops

_LAYERS = (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)
_STACKS = (nn.TransformerEncoder, nn.TransformerDecoder, nn.Transformer)

_FUNCTION_OPS_PER_ELEMENT: dict[Callable[..., Any], int] = {
    F.relu: PER_ELEMENT[nn.ReLU],
    torch.relu: PER_ELEMENT[nn.ReLU],
    F.gelu: GELU_ERF,  # the layers call it with the default approximate="none"
}
"""Activation functions the layers accept, at the per-element cost of their module form."""


@register_ops(*_LAYERS)
def transformer_layer_ops(module: nn.TransformerEncoderLayer | nn.TransformerDecoderLayer,
                          inputs: tuple[Any, ...], output: Any) -> Count:
    """residuals * numel(x) + activation(rows * dim_feedforward) when it is a function."""
    x = inputs[0] if inputs else None
    if not isinstance(x, Tensor):  # not the call the layer's forward takes: unknown
        return None
    elements = int(x.numel())  # also right for the nested tensors TransformerEncoder passes
    # self-attention and feed-forward residuals, plus cross-attention in a decoder layer
    residuals = 3 if isinstance(module, nn.TransformerDecoderLayer) else 2
    if isinstance(module.activation, nn.Module):  # a child: it counts itself
        return residuals * elements
    per_element = _function_cost(module.activation)
    if per_element is None:  # an unrecognised function: its operators count instead
        return None
    rows = elements // module.linear1.in_features
    return residuals * elements + rows * module.linear1.out_features * per_element


def _function_cost(activation: Any) -> int | None:
    """Per-element ops of an activation function of :data:`_FUNCTION_OPS_PER_ELEMENT` (found by
    identity: a callable object need not be hashable), else ``None``."""
    for function, per_element in _FUNCTION_OPS_PER_ELEMENT.items():
        if activation is function:
            return per_element
    return None


def _prices_activation(module: nn.TransformerEncoderLayer | nn.TransformerDecoderLayer) -> bool:
    """Whether :func:`transformer_layer_ops` prices this layer: its activation is a child
    module (which counts itself) or a function it has a cost for."""
    activation = getattr(module, "activation", None)
    return isinstance(activation, nn.Module) or _function_cost(activation) is not None


# a layer with any other activation function has its own operators observed and counted
setattr(transformer_layer_ops, COVERS, _prices_activation)


@register_ops(*_STACKS)
def transformer_stack_ops(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> int:
    """0: the stacks only call their layers and final norms, which count themselves."""
    return 0


register_macs(*_LAYERS, *_STACKS)(no_macs)
