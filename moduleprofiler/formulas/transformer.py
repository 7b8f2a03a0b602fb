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
  ``nn.GELU`` (5, erf form) so both spellings count the same (a profiler with its own formula
  for ``nn.ReLU`` or ``nn.GELU`` prices the function with it: ``formulas/parts.py``). Any other
  function (``F.silu``, a
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
from moduleprofiler.formulas.parts import BUILT_IN_OPS, Parts, float_dtype, total, with_parts
from moduleprofiler.registry import COVERS, Count, register_macs, register_ops

_LAYERS = (nn.TransformerEncoderLayer, nn.TransformerDecoderLayer)
_STACKS = (nn.TransformerEncoder, nn.TransformerDecoder, nn.Transformer)

_FUNCTION_MODULES: dict[Callable[..., Any], tuple[type[nn.Module], int]] = {
    F.relu: (nn.ReLU, PER_ELEMENT[nn.ReLU]),
    torch.relu: (nn.ReLU, PER_ELEMENT[nn.ReLU]),
    F.gelu: (nn.GELU, GELU_ERF),  # the layers call it with the default approximate="none"
}
"""Activation functions the layers accept, each as the module type that computes the same and
its built-in per-element cost: the function is priced as the profiler prices that type (built
in, both spellings count the same)."""


def _ops(parts: Parts) -> Callable[..., Count]:
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
        activation = _function_module(module.activation)
        if activation is None:  # an unrecognised function: its operators count instead
            return None
        cls, per_element = activation
        rows = elements // module.linear1.in_features
        shape = (rows, module.linear1.out_features)
        return total(residuals * elements, parts.elementwise(
            cls, shape, rows * module.linear1.out_features * per_element, float_dtype(x)))

    return transformer_layer_ops


def _function_module(activation: Any) -> tuple[type[nn.Module], int] | None:
    """The module of :data:`_FUNCTION_MODULES` for an activation function (found by identity:
    a callable object need not be hashable), else ``None``."""
    for function, module in _FUNCTION_MODULES.items():
        if activation is function:
            return module
    return None


def _prices_activation(module: nn.TransformerEncoderLayer | nn.TransformerDecoderLayer) -> bool:
    """Whether :func:`transformer_layer_ops` prices this layer: its activation is a child
    module (which counts itself) or a function it has a module for."""
    activation = getattr(module, "activation", None)
    return isinstance(activation, nn.Module) or _function_module(activation) is not None


# the activation function is priced as the profiler prices its module type
transformer_layer_ops = register_ops(*_LAYERS)(with_parts(BUILT_IN_OPS, _ops))
# a layer with any other activation function has its own operators observed and counted
setattr(transformer_layer_ops, COVERS, _prices_activation)


@register_ops(*_STACKS)
def transformer_stack_ops(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> int:
    """0: the stacks only call their layers and final norms, which count themselves."""
    return 0


register_macs(*_LAYERS, *_STACKS)(no_macs)
