"""Attention kernels: every scaled-dot-product-attention variant, ``_native_multi_head_attention``
and the fused ``_transformer_encoder_layer_fwd``.

Scaled dot-product attention of ``B`` (batch x heads) rows of queries ``(L, E)`` against keys
``(S, E)`` and values ``(S, Ev)`` counts, whichever kernel runs, what the math reference
(``_scaled_dot_product_attention_math``, the path taken on the meta device) dispatches:

=====================  =========================================  =================
part                   ops                                        macs
=====================  =========================================  =================
scale                  ``B*L*E + B*S*E``                          0
scores ``Q·Kᵀ``        ``B*L*S*(2E - 1)``                         ``B*L*S*E``
mask                   ``B*L*S`` (a mask / bias, or ``is_causal``)  0
softmax                ``B*L*(4S - 1)``                           0
dropout (p > 0)        ``3*B*L*S`` (as ``native_dropout``)        0
``A·V``                ``B*L*Ev*(2S - 1)``                        ``B*L*S*Ev``
=====================  =========================================  =================

NB: the reference scales queries *and* keys by ``sqrt(scale)`` (keys after grouped-query
expansion, so ``S*E`` per query head; keys broadcast over the batch are scaled once), and the
fused kernels count the same so that CPU and meta agree. ``nn.MultiheadAttention`` scales only
the queries, and so do ``_native_multi_head_attention`` and ``_transformer_encoder_layer_fwd``
below, which count exactly what the module formulas of the same layers count.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

from torch import Tensor, nn

from moduleprofiler.formulas.activation import GELU_ERF, PER_ELEMENT, softmax_ops
from moduleprofiler.formulas.distance import dot_ops
from moduleprofiler.formulas.linear import linear_layer_ops
from moduleprofiler.operators._common import (
    ZERO,
    Args,
    BoundFormula,
    Count,
    add_counts,
    aten,
    named,
    numel,
    register,
)
from moduleprofiler.operators.norm import layer_norm_count

_DROPOUT_PER_SCORE = 3  # mask draw, 1 / (1 - p), multiply: as native_dropout


class Problem(NamedTuple):
    """One attention problem: ``rows`` independent (batch x head) rows of queries."""

    rows: int
    target: int  # L
    source: int  # S
    qk_dim: int  # E
    v_dim: int  # Ev


def core_count(p: Problem, masks: int, dropout: bool) -> Count:
    """``Q·Kᵀ`` + mask adds + softmax + dropout + ``A·V`` (no scaling)."""
    if p.rows * p.target * p.source == 0:
        return ZERO
    scores = p.rows * p.target * p.source
    ops = (
        scores * dot_ops(p.qk_dim)
        + masks * scores
        + softmax_ops(p.rows * p.target, p.source)
        + (_DROPOUT_PER_SCORE * scores if dropout else 0)
        + p.rows * p.target * p.v_dim * dot_ops(p.source)
    )
    return ops, scores * (p.qk_dim + p.v_dim)


def sdpa_count(p: Problem, masked: bool, dropout: bool, scaled_keys: int | None = None) -> Count:
    """Scale of queries and keys, then :func:`core_count`.

    ``scaled_keys``: key elements the scale multiplies, by default one key matrix per query row
    (``B*S*E``; grouped-query keys are scaled after their expansion).
    """
    ops, macs = core_count(p, int(masked), dropout)
    if macs == 0:
        return ZERO
    if scaled_keys is None:
        scaled_keys = p.rows * p.source * p.qk_dim
    return ops + p.rows * p.target * p.qk_dim + scaled_keys, macs


def _problem(q: Tensor, k: Tensor, v: Tensor) -> Problem:
    """The problem of ``(..., L, E)`` queries, ``(..., S, E)`` keys, ``(..., S, Ev)`` values."""
    target, qk_dim = int(q.shape[-2]), int(q.shape[-1])
    per_row = target * qk_dim
    rows = numel(q) // per_row if per_row else 0
    return Problem(rows, target, int(k.shape[-2]), qk_dim, int(v.shape[-1]))


def _sdpa(mask_name: str | None) -> BoundFormula:
    """An SDPA formula for a kernel with ``(B, H, L, E)`` inputs and a mask argument
    ``mask_name`` (``None``: the kernel takes no mask)."""

    def formula(args: Args, out: Any) -> Count:
        q, k, v = args.first(), args.tensor("key"), args.tensor("value")
        if not isinstance(q, Tensor) or k is None or v is None:
            return ZERO
        masked = args.flag("is_causal") or (
            mask_name is not None and args.tensor(mask_name) is not None
        )
        dropout = args.number("dropout_p", 0.0) > 0
        # Without enable_gqa the math reference scales the keys as given, so keys broadcast
        # over the batch are scaled once.
        scaled_keys = numel(k) if args.get("enable_gqa") is False else None
        return sdpa_count(_problem(q, k, v), masked, dropout, scaled_keys)

    return named(formula, "sdpa_ops",
                 "B*(L+S)*E (scale) + B*L*S*(2E-1) + [B*L*S mask] + B*L*(4S-1) + "
                 "[3*B*L*S dropout] + B*L*Ev*(2S-1); macs B*L*S*(E+Ev).")


register(*aten(
    "scaled_dot_product_attention", "_scaled_dot_product_attention_math",
    "_scaled_dot_product_attention_math_for_mps", "_scaled_dot_product_flash_attention_for_cpu",
))(_sdpa("attn_mask"))  # fmt: skip
register(*aten(
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_fused_attention_overrideable", "_cudnn_attention_forward",
))(_sdpa("attn_bias"))  # fmt: skip
register(*aten("_scaled_dot_product_flash_attention"))(_sdpa(None))


# -- varlen kernels: (B, L, H, E) dense or (total, H, E) packed with cumulative lengths ---------

def _lengths(offsets: Any, count_hint: int, longest: Any) -> list[int]:
    """Sequence lengths from cumulative offsets; on meta (no data) every one is ``longest``."""
    if not isinstance(offsets, Tensor):
        return []
    if offsets.device.type == "meta":
        return [int(longest or 0)] * max(count_hint, 0)
    return [int(n) for n in offsets.diff().tolist()]


def _varlen_problems(args: Args, q_offsets: str, k_offsets: str, q_max: str,
                     k_max: str) -> Iterator[Problem]:
    q, k, v = args.first(), args.tensor("key"), args.tensor("value")
    if not isinstance(q, Tensor) or k is None or v is None:
        return
    cum_q, cum_k = args.tensor(q_offsets), args.tensor(k_offsets)
    if cum_q is None or cum_k is None:  # dense (B, L, H, E)
        batch, target, heads, qk_dim = (int(s) for s in q.shape)
        yield Problem(batch * heads, target, int(k.shape[1]), qk_dim, int(v.shape[-1]))
        return
    heads, qk_dim, v_dim = int(q.shape[-2]), int(q.shape[-1]), int(v.shape[-1])
    sequences = numel(cum_q) - 1
    targets = _lengths(cum_q, sequences, args.get(q_max))
    sources = _lengths(cum_k, sequences, args.get(k_max))
    for target, source in zip(targets, sources):
        yield Problem(heads, target, source, qk_dim, v_dim)


@register(*aten("_flash_attention_forward"))
def flash_attention_forward_ops(args: Args, out: Any) -> Count:
    """Sum over sequences of the SDPA count (``is_causal``: one mask add per score)."""
    masked, dropout = args.flag("is_causal"), args.number("dropout_p", 0.0) > 0
    counts = [sdpa_count(p, masked, dropout)
              for p in _varlen_problems(args, "cum_seq_q", "cum_seq_k", "max_q", "max_k")]
    return add_counts(*counts)


@register(*aten("_efficient_attention_forward"))
def efficient_attention_forward_ops(args: Args, out: Any) -> Count:
    """Sum over sequences of the SDPA count (a bias or a causal ``custom_mask_type``: mask)."""
    masked = args.tensor("bias") is not None or bool(args.get("custom_mask_type"))
    dropout = args.number("dropout_p", 0.0) > 0
    problems = _varlen_problems(args, "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q",
                                "max_seqlen_k")
    counts = [sdpa_count(p, masked, dropout) for p in problems]
    return add_counts(*counts)


# -- nn.MultiheadAttention's and nn.TransformerEncoderLayer's fused kernels ---------------------

def linear_count(rows: int, in_features: int, out_features: int, bias: bool) -> Count:
    """``rows`` rows through a Linear layer: rows*out*(2*in - 1) (+ rows*out); macs rows*in*out."""
    macs = rows * in_features * out_features
    return linear_layer_ops(rows, in_features, out_features, bias), macs


class _Sequence(NamedTuple):
    batch: int
    target: int
    source: int


def _sequences(query: Tensor, key: Tensor | None) -> list[_Sequence]:
    """(batch, L, S) groups: one for dense ``(N, L, E)`` input, one per sequence when nested."""
    if query.is_nested:
        return [_Sequence(1, int(s.shape[0]), int(s.shape[0])) for s in query.unbind()]
    source = key if isinstance(key, Tensor) and not key.is_nested else query
    if query.dim() == 2:
        return [_Sequence(1, int(query.shape[0]), int(source.shape[0]))]
    return [_Sequence(int(query.shape[0]), int(query.shape[1]), int(source.shape[1]))]


def mha_count(seq: _Sequence, embed: int, heads: int, in_bias: bool, out_bias: bool,
              masks: int, average_heads: bool) -> Count:
    """``nn.MultiheadAttention`` (self-attention, kdim = vdim = E) as its module formula counts:
    Q/K/V projections, Q scale, Q·Kᵀ, masks, softmax, A·V, head average, out projection."""
    n, tgt, src = seq
    head_dim = embed // heads if heads else 0
    core_ops, core_macs = core_count(Problem(n * heads, tgt, src, head_dim, head_dim), masks,
                                     dropout=False)
    ops, macs = add_counts(
        linear_count(n * tgt, embed, embed, in_bias),
        linear_count(n * src, embed, embed, in_bias),
        linear_count(n * src, embed, embed, in_bias),
        linear_count(n * tgt, embed, embed, out_bias),
        (core_ops + n * tgt * embed, core_macs),  # + q * head_dim ** -0.5
    )
    if average_heads:  # (h - 1) adds and 1 divide per averaged weight
        ops += n * tgt * src * heads
    return ops, macs


@register(*aten("_native_multi_head_attention"))
def native_multi_head_attention_ops(args: Args, out: Any) -> Count:
    """As nn.MultiheadAttention's formula: 2*N*L*E*(2E) + 2*N*S*E*(2E) projections (with bias),
    N*L*E scale, Q·Kᵀ, one mask add when a (merged) mask is given, softmax, A·V, head average
    when weights are returned averaged; macs 2*N*L*E² + 2*N*S*E² + 2*N*L*S*E."""
    query = args.first()
    if not isinstance(query, Tensor):
        return ZERO
    embed, heads = int(args.get("embed_dim")), int(args.get("num_head"))
    masks = int(args.tensor("mask") is not None)
    average = args.flag("need_weights") and args.flag("average_attn_weights")
    in_bias = args.tensor("qkv_bias") is not None
    out_bias = args.tensor("proj_bias") is not None
    return add_counts(*(
        mha_count(seq, embed, heads, in_bias, out_bias, masks, average)
        for seq in _sequences(query, args.tensor("key"))
    ))


def _present(args: Args, *names: str) -> list[bool]:
    return [args.tensor(name) is not None for name in names]


@register(*aten("_transformer_encoder_layer_fwd"))
def transformer_encoder_layer_ops(args: Args, out: Any) -> Count:
    """One nn.TransformerEncoderLayer (eval), as the sum of its module formulas: self-attention
    (as nn.MultiheadAttention, need_weights=False), 2 LayerNorms, linear1, ReLU (1) or GELU (5)
    on rows*dim_ff, linear2 and 2 residual adds (rows*E each). Dropout is 0 in eval."""
    src = args.first()
    ffn_1 = args.tensor("ffn_weight_1")
    if not isinstance(src, Tensor) or ffn_1 is None:
        return ZERO
    embed, heads = int(args.get("embed_dim")), int(args.get("num_heads"))
    feedforward = int(ffn_1.shape[0])
    in_bias, out_bias, bias_1, bias_2 = _present(
        args, "qkv_bias", "proj_bias", "ffn_bias_1", "ffn_bias_2"
    )
    norms = [_present(args, f"norm_weight_{i}", f"norm_bias_{i}") for i in (1, 2)]
    activation = GELU_ERF if args.flag("use_gelu") else PER_ELEMENT[nn.ReLU]
    masks = int(args.tensor("mask") is not None)
    counts = []
    for seq in _sequences(src, None):
        rows = seq.batch * seq.target
        counts += [
            mha_count(seq, embed, heads, in_bias, out_bias, masks, average_heads=False),
            *(layer_norm_count(rows, embed, weight, bias) for weight, bias in norms),
            linear_count(rows, embed, feedforward, bias_1),
            linear_count(rows, feedforward, embed, bias_2),
            (rows * feedforward * activation + 2 * rows * embed, 0),
        ]
    return add_counts(*counts)

