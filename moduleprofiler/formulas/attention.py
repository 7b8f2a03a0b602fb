"""``nn.MultiheadAttention``: projections, scaled scores, masks, softmax, ``A·V``, out projection.

The count depends only on the module's configuration and the input shapes, never on which
kernel ran: the decomposed path (``F.multi_head_attention_forward`` + SDPA) and the fused fast
path (``torch._native_multi_head_attention``, taken in eval mode under ``no_grad`` for batch-first
self-attention) get the same numbers. ``out_proj`` is never called as a module (its weight is
used directly), so this formula counts it.

With batch ``N``, target length ``L``, source length ``S``, ``E = embed_dim``, ``h`` heads of
``d = E / h`` and ``S' = S + add_bias_kv + add_zero_attn`` keys (the extra key rows are
concatenated after the projections, so they cost no projection work):

====================  ===============================================  =====================
part                  ops                                              macs
====================  ===============================================  =====================
Q projection          ``N*L*E*(2*E - 1)`` (+ ``N*L*E`` bias)           ``N*L*E*E``
K projection          ``N*S*E*(2*kdim - 1)`` (+ ``N*S*E`` bias)        ``N*S*E*kdim``
V projection          ``N*S*E*(2*vdim - 1)`` (+ ``N*S*E`` bias)        ``N*S*E*vdim``
scale                 ``N*L*E`` (``q * d**-0.5``, on Q)                0
scores ``Q·Kᵀ``       ``N*h*L*S'*(2*d - 1)``                           ``N*h*L*S'*d``
masks                 ``N*h*L*S'`` per mask given (one add each)       0
softmax               ``softmax_ops(N*h*L, S')``                       0
``A·V``               ``N*h*L*d*(2*S' - 1)``                           ``N*h*L*S'*d``
head average          ``N*L*S'*h`` (when averaged weights returned)    0
out projection        ``N*L*E*(2*E - 1)`` (+ ``N*L*E`` bias)           ``N*L*E*E``
====================  ===============================================  =====================

Dropout on the weights costs what ``nn.Dropout`` costs: 0 in eval, ``3*N*h*L*S'`` in training
with ``dropout > 0``. See ``docs/formulas/attention.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from torch import Tensor, nn

# Re-exported: the attention softmax is priced exactly like ``nn.Softmax``, rows * (4D - 1).
from moduleprofiler.formulas.activation import softmax_ops
from moduleprofiler.formulas.distance import dot_ops
from moduleprofiler.formulas.linear import linear_layer_ops
from moduleprofiler.formulas.parts import (
    BUILT_IN_MACS,
    BUILT_IN_OPS,
    Parts,
    float_dtype,
    total,
    with_parts,
)
from moduleprofiler.formulas.zero import DROPOUT_ELEMENT_OPS, DROPOUT_MASK_OPS
from moduleprofiler.registry import Count, register_macs, register_ops

__all__ = ["multihead_attention_macs", "multihead_attention_ops", "softmax_ops"]

# Positions of ``MultiheadAttention.forward``'s parameters in ``inputs``.
_KEY, _KEY_PADDING_MASK, _NEED_WEIGHTS, _ATTN_MASK, _AVERAGE = 1, 3, 4, 5, 6


def _arg(inputs: tuple[Any, ...], index: int, default: Any) -> Any:
    return inputs[index] if len(inputs) > index else default


class _Shape(NamedTuple):
    """Batch, target length and source length of one attention call."""

    batch: int
    target: int
    source: int


def _shapes(module: nn.MultiheadAttention, inputs: tuple[Any, ...]) -> list[_Shape]:
    """The (batch, L, S) groups whose costs add up to the call's cost.

    One group for dense inputs. A nested query (only possible on the fused path, for
    self-attention, inside ``nn.TransformerEncoder`` with a padding mask) is one group per
    sequence, each attending over its own real length.
    """
    query: Tensor = inputs[0]
    key: Tensor = _arg(inputs, _KEY, query)
    if query.is_nested:
        return [_Shape(1, int(seq.shape[0]), int(seq.shape[0])) for seq in query.unbind()]
    if query.dim() == 2:  # unbatched (L, E); batch_first does not apply
        return [_Shape(1, int(query.shape[0]), int(key.shape[0]))]
    seq_dim, batch_dim = (1, 0) if module.batch_first else (0, 1)
    return [_Shape(int(query.shape[batch_dim]), int(query.shape[seq_dim]), int(key.shape[seq_dim]))]


def _extra_keys(module: nn.MultiheadAttention) -> int:
    """Key rows appended after projection: one for ``add_bias_kv``, one for ``add_zero_attn``."""
    return int(module.bias_k is not None) + int(module.add_zero_attn)


def _attention_ops(module: nn.MultiheadAttention, shape: _Shape, masks: int,
                   average_heads: bool, parts: Parts, query: Any) -> Count:
    embed, heads, head_dim = int(module.embed_dim), int(module.num_heads), int(module.head_dim)
    kdim, vdim = int(module.kdim), int(module.vdim)
    n, tgt, src = shape.batch, shape.target, shape.source
    keys = src + _extra_keys(module)
    in_bias = module.in_proj_bias is not None
    out_bias = module.out_proj.bias is not None
    score_rows = n * heads * tgt
    own = (
        n * tgt * embed  # q * head_dim ** -0.5
        + score_rows * keys * dot_ops(head_dim)  # Q·Kᵀ
        + masks * score_rows * keys  # each mask is added to every score
        + score_rows * head_dim * dot_ops(keys)  # A·V (no keys: nothing to sum, 0)
    )
    if average_heads:
        # (h - 1) adds and 1 division for each of the N*L*S' averaged weights.
        own += n * tgt * keys * heads
    q = linear_layer_ops(n * tgt, embed, embed, in_bias)
    k = linear_layer_ops(n * src, kdim, embed, in_bias)
    v = linear_layer_ops(n * src, vdim, embed, in_bias)
    out = linear_layer_ops(n * tgt, embed, embed, out_bias)
    softmax = softmax_ops(score_rows, keys)
    # dropout on the attention weights, priced as nn.Dropout in training; 0 in eval
    dropped = module.training and module.dropout > 0
    dropout = score_rows * keys * (DROPOUT_MASK_OPS + DROPOUT_ELEMENT_OPS) if dropped else 0
    if not parts:  # every part at its built-in count (a profiler without entries for them)
        return own + q + k + v + softmax + dropout + out
    dtype, scores = float_dtype(query), (n, heads, tgt, keys)
    return total(
        own,
        parts.linear((n, tgt), embed, embed, in_bias, q, dtype),
        parts.linear((n, src), kdim, embed, in_bias, k, dtype),
        parts.linear((n, src), vdim, embed, in_bias, v, dtype),
        parts.elementwise(nn.Softmax, scores, softmax, dtype, dim=-1),
        parts.elementwise(nn.Dropout, scores, dropout, dtype, p=float(module.dropout))
        if dropped else 0,
        parts.linear((n, tgt), embed, embed, out_bias, out, dtype, module=module.out_proj),
    )


def _attention_macs(module: nn.MultiheadAttention, shape: _Shape, parts: Parts,
                    query: Any) -> Count:
    embed, kdim, vdim = int(module.embed_dim), int(module.kdim), int(module.vdim)
    n, tgt, src = shape.batch, shape.target, shape.source
    keys = src + _extra_keys(module)
    # Q·Kᵀ and A·V: N*h*L*S'*d each, i.e. N*L*S'*E.
    products = 2 * n * tgt * keys * embed
    q, k, v = n * tgt * embed * embed, n * src * kdim * embed, n * src * vdim * embed
    out = n * tgt * embed * embed
    if not parts:
        return products + q + k + v + out
    in_bias, dtype = module.in_proj_bias is not None, float_dtype(query)
    return total(
        products,
        parts.linear((n, tgt), embed, embed, in_bias, q, dtype),
        parts.linear((n, src), kdim, embed, in_bias, k, dtype),
        parts.linear((n, src), vdim, embed, in_bias, v, dtype),
        parts.linear((n, tgt), embed, embed, module.out_proj.bias is not None, out, dtype,
                     module=module.out_proj),
    )


def _call_facts(inputs: tuple[Any, ...]) -> tuple[int, bool]:
    """Masks given, and whether averaged weights are returned."""
    masks = int(_arg(inputs, _KEY_PADDING_MASK, None) is not None) + int(
        _arg(inputs, _ATTN_MASK, None) is not None
    )
    average_heads = bool(_arg(inputs, _NEED_WEIGHTS, True)) and bool(
        _arg(inputs, _AVERAGE, True)
    )
    return masks, average_heads


def _ops(parts: Parts) -> Callable[..., Count]:
    def multihead_attention_ops(module: nn.MultiheadAttention, inputs: tuple[Any, ...],
                                output: Any) -> Count:
        """Projections + scale + Q·Kᵀ + masks + softmax + A·V + average + dropout + out_proj."""
        masks, average_heads = _call_facts(inputs)
        shapes = _shapes(module, inputs)
        if len(shapes) == 1:  # dense inputs
            return _attention_ops(module, shapes[0], masks, average_heads, parts, inputs[0])
        return total(*(_attention_ops(module, shape, masks, average_heads, parts, inputs[0])
                       for shape in shapes))

    return multihead_attention_ops


def _macs(parts: Parts) -> Callable[..., Count]:
    def multihead_attention_macs(module: nn.MultiheadAttention, inputs: tuple[Any, ...],
                                 output: Any) -> Count:
        """2*N*L*E² + N*S*E*(kdim + vdim) + 2*N*L*S'*E (projections, Q·Kᵀ, A·V)."""
        return total(*(_attention_macs(module, shape, parts, inputs[0])
                       for shape in _shapes(module, inputs)))

    return multihead_attention_macs


# the projections, softmax and dropout are priced as the profiler prices their layer types
multihead_attention_ops = register_ops(nn.MultiheadAttention)(with_parts(BUILT_IN_OPS, _ops))
multihead_attention_macs = register_macs(nn.MultiheadAttention)(
    with_parts(BUILT_IN_MACS, _macs))
