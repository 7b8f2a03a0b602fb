"""Quantized operators (``torch.ops.quantized``): the int8 matrix products and convolutions of
models converted by ``torch.ao.quantization`` (``quantize_dynamic``, eager and FX static
quantization), and their elementwise operators.

A quantized product does the work of the float one it replaces, in the same convention
(``docs/conventions.md``): ``linear`` counts as ``nn.Linear`` (``k`` macs and ``2k - 1`` ops per
output, one op more with a bias), ``conv*d`` as ``nn.Conv*d``; a fused ``_relu`` adds the ReLU's
op per output element; ``conv_transpose*d`` counts as ``nn.ConvTranspose*d``, a dynamic
``quantized_*_cell_dynamic`` as the float recurrent cell, ``embedding_bag_*`` as
``nn.EmbeddingBag`` (a lookup, ``embedding_byte``, is free as ``embedding`` is). The weight is
packed into a ``ScriptObject``: its shape and bias are read
by unpacking it (a copy of the weight, on the CPU where these operators run). Requantising the
output (scale and zero point) is part of the kernel's epilogue and, like a dtype conversion,
costs no ops; so do ``quantize_per_tensor`` / ``dequantize``, which are conversions (``to``).
A dynamically quantized ``nn.LSTM`` / ``nn.GRU`` runs one ``aten.quantized_lstm`` /
``quantized_gru`` whose cell parameters hold each layer's packed weights: it counts as the float
recurrent layer (``formulas/recurrent.py``), sized from them. The aten integer and weight-only
products (``_int_mm``, ``_weight_int8pack_mm``, ``_weight_int4pack_mm``) count as ``mm`` plus
their scaling or dequantization.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from moduleprofiler.formulas.activation import PER_ELEMENT
from moduleprofiler.formulas.distance import dot_ops
from moduleprofiler.formulas.embedding import BAG_MEAN, bag_ops
from moduleprofiler.formulas.linear import leading_rows
from moduleprofiler.formulas.recurrent import GATES
from moduleprofiler.operators._common import ZERO, Args, Count, aten, named, register
from moduleprofiler.operators.matmul import transposed_conv_ops
from moduleprofiler.operators.pooling import bag_entries
from moduleprofiler.operators.recurrent import Layer, step_count
from moduleprofiler.operators.registry import MISSING, register_free

RELU_OPS = PER_ELEMENT[nn.ReLU]
"""Ops per element of the ReLU a fused ``*_relu`` operator applies."""


def quantized(*names: str) -> list[torch._ops.OpOverloadPacket]:
    """``torch.ops.quantized.<name>`` for each name this torch build has."""
    namespace = torch.ops.quantized
    found = []
    for name in names:
        try:
            found.append(getattr(namespace, name))
        except (AttributeError, RuntimeError):  # not in this build
            continue
    return found


def _unpacked(packed: Any) -> tuple[Tensor, Tensor | None] | None:
    """The (weight, bias) a packed-parameters object holds, or ``None`` if it cannot say."""
    unpack = getattr(packed, "unpack", None)
    try:
        weight, bias = unpack() if unpack is not None else \
            torch.ops.quantized.linear_unpack(packed)
    except Exception:  # an unknown packing: the count is unknown, never a guess
        return None
    return (weight, bias) if isinstance(weight, Tensor) else None


def _product(out: Any, inner: int, bias: bool, relu: bool) -> Count:
    """``out.numel()`` dot products of length ``inner``, plus the bias add and the ReLU."""
    if not isinstance(out, Tensor):
        return ZERO
    outputs = out.numel()
    ops = outputs * dot_ops(inner) + outputs * int(bias) + outputs * RELU_OPS * int(relu)
    return ops, outputs * inner


def _linear(relu: bool) -> Any:
    def formula(args: Args, out: Any) -> Count:
        x, unpacked = args.first(), _unpacked(args.get("W_prepack"))
        if not isinstance(x, Tensor) or x.dim() == 0 or unpacked is None:
            return MISSING  # type: ignore[return-value]
        return _product(out, int(x.shape[-1]), unpacked[1] is not None, relu)

    return named(formula, "quantized_linear_relu_ops" if relu else "quantized_linear_ops",
                 "as nn.Linear: outputs * (2 * in_features - 1) ops, outputs * in_features macs,"
                 " + outputs for a bias" + (" + the ReLU per output" if relu else ""))


def _convolution(relu: bool) -> Any:
    def formula(args: Args, out: Any) -> Count:
        unpacked = _unpacked(args.get("packed_weight"))
        if unpacked is None:
            return MISSING  # type: ignore[return-value]
        weight, bias = unpacked
        # [out_channels, in_channels / groups, *kernel]: each output reads one such slice
        return _product(out, math.prod(int(s) for s in weight.shape[1:]), bias is not None,
                        relu)

    return named(formula, "quantized_conv_relu_ops" if relu else "quantized_conv_ops",
                 "as nn.Conv*d: outputs * (2k - 1) ops, outputs * k macs with k = "
                 "in_channels / groups * kernel volume, + outputs for a bias"
                 + (" + the ReLU per output" if relu else ""))


def _convolution_transpose(args: Args, out: Any) -> Count:
    """As ``nn.ConvTranspose*d``: N*Cout * (2*(Cin/g)*landed - covered) ops, + outputs for a
    bias; inputs * (Cout/g) * K macs. Stride, padding, dilation and groups are the packed
    weight's."""
    x, packed = args.first(), args.get("packed_weight")
    unpacked = _unpacked(packed)
    if not isinstance(x, Tensor) or not isinstance(out, Tensor) or unpacked is None:
        return MISSING  # type: ignore[return-value]
    weight, bias = unpacked
    dims = x.dim() - 2
    try:
        stride, padding, dilation = ([int(n) for n in getter()][-dims:] for getter in (
            packed.stride, packed.padding, packed.dilation))
        groups = int(packed.groups())
    except Exception:  # a packing that does not say: unknown, never a guess
        return MISSING  # type: ignore[return-value]
    if weight.dim() - 2 > dims:  # a 1-d convolution runs as a 2-d one of height 1
        weight = weight.flatten(1, weight.dim() - dims - 1)
    ops = transposed_conv_ops(x, weight, out, stride, padding, dilation, groups)
    return ops + (out.numel() if bias is not None else 0), x.numel() * weight[0].numel()


def _embedding_bag(args: Args, out: Any) -> Count:
    """As ``nn.EmbeddingBag``: dim * (entries - bags) for sum, + dim * bags for mean, + dim *
    entries with per_sample_weights; the dim read from the output (bags x dim). Dequantizing a
    row is a conversion, free."""
    if not isinstance(out, Tensor) or out.dim() == 0:
        return MISSING  # type: ignore[return-value]
    entries, bags = bag_entries(args)
    return bag_ops(int(out.shape[-1]), entries, bags, args.get("mode") == BAG_MEAN,
                   args.tensor("per_sample_weights") is not None), 0


def _elementwise(per_element: int) -> Any:
    def formula(args: Args, out: Any) -> Count:
        return (out.numel() * per_element, 0) if isinstance(out, Tensor) else ZERO

    return named(formula, None, f"{per_element} op(s) per output element")


def _cell_layer(mode: str, cell: Any, bias: bool) -> Layer | None:
    """One layer and direction of a dynamically quantized recurrent stack, sized from the two
    packed weights (``w_ih``, ``w_hh``) its cell parameters hold: ``None`` when they cannot be
    read."""
    try:  # (kind, biases, doubles, longs, packed weights): the state torch serialises
        packed = cell.__getstate__()[0][4]
    except Exception:  # another cell kind: the count is unknown, never a guess
        return None
    weights = [_unpacked(one) for one in packed[:2]]
    if len(weights) != 2 or weights[0] is None or weights[1] is None:
        return None
    w_ih, w_hh = weights[0][0], weights[1][0]
    return Layer(int(w_ih.shape[1]), int(w_ih.shape[0]) // GATES[mode], int(w_hh.shape[1]), 0,
                 bias)


def _recurrent(mode: str) -> Any:
    def formula(args: Args, out: Any) -> Count:
        x = args.first()  # ``input`` (dense) or ``data`` (packed)
        bias = args.flag("has_biases")
        layers = [_cell_layer(mode, cell, bias) for cell in args.get("params") or ()]
        if not isinstance(x, Tensor) or x.dim() == 0 or not layers or None in layers:
            return MISSING  # type: ignore[return-value]
        rows = leading_rows(x)
        ops = macs = 0
        for layer in layers:
            assert layer is not None
            step_ops, step_macs = step_count(mode, layer)
            ops += rows * step_ops
            macs += rows * step_macs
        return ops, macs

    return named(formula, f"quantized_{mode.lower()}_ops",
                 f"as nn.{mode}: rows * the step of each layer and direction, sized from the "
                 "packed weights; rows = timesteps * batch, or sum(batch_sizes) when packed")


def _cell(mode: str) -> Any:
    def formula(args: Args, out: Any) -> Count:
        x = args.first()
        weights = [_unpacked(args.get(name)) for name in ("w_ih", "w_hh")]
        if not isinstance(x, Tensor) or x.dim() == 0 or weights[0] is None or \
                weights[1] is None:
            return MISSING  # type: ignore[return-value]
        w_ih, w_hh = weights[0][0], weights[1][0]
        layer = Layer(int(w_ih.shape[1]), int(w_ih.shape[0]) // GATES[mode],
                      int(w_hh.shape[1]), 0,  # the LSTM cell's schema names it bias_ih
                      args.get("b_ih", args.get("bias_ih")) is not None)
        ops, macs = step_count(mode, layer)
        rows = leading_rows(x)
        return rows * ops, rows * macs

    return named(formula, f"quantized_{mode.lower()}_cell_ops",
                 f"as the float cell ({mode}): rows * one step, sized from the packed weights")


# -- integer and weight-only quantized products (aten) ------------------------------------------
#
# ``torch._int_mm`` (int8 x int8 -> int32) and the weight-only kernels torchao and gpt-fast run
# (``_weight_int8pack_mm``, ``_weight_int4pack_mm`` and its CPU and XPU forms) are products of
# ``(m, k)`` activations and an ``(n, k)`` weight: ``m * n`` dot products of length ``k``, like
# ``mm``. Their weight layouts differ (packed, tiled), so the sizes are read from the activations
# and the result, never from the packed weight.

INT4_OFFSET_SCALE_ZERO = 3
"""Ops to dequantize one int4 weight: ``(w - 8) * scale + zero``."""


def _weight_only_product(args: Args, out: Any) -> tuple[int, int, int] | None:
    """``(outputs, k, n * k)`` of a weight-only product: its dot products, their length and the
    weight's elements; ``None`` when the shapes cannot say."""
    x = args.first()
    if not isinstance(x, Tensor) or not isinstance(out, Tensor) or x.dim() == 0 or out.dim() == 0:
        return None
    k, n = int(x.shape[-1]), int(out.shape[-1])
    return int(out.numel()), k, n * k


@register(*aten("_int_mm"))
def int_mm_ops(args: Args, out: Any) -> Count:
    """As ``mm``: outputs * (2k - 1) ops, outputs * k macs (int8 products summed in int32)."""
    found = _weight_only_product(args, out)
    if found is None:
        return ZERO
    outputs, k, _ = found
    return outputs * dot_ops(k), outputs * k


@register(*aten("_weight_int8pack_mm"))
def weight_int8pack_mm_ops(args: Args, out: Any) -> Count:
    """outputs * (2k - 1) + outputs ops, outputs * k macs: each dot product with the int8
    weight row, then times that row's scale."""
    found = _weight_only_product(args, out)
    if found is None:
        return ZERO
    outputs, k, _ = found
    return outputs * dot_ops(k) + outputs, outputs * k


@register(*aten("_weight_int4pack_mm", "_weight_int4pack_mm_for_cpu",
                "_weight_int4pack_mm_with_scales_and_zeros"))
def weight_int4pack_mm_ops(args: Args, out: Any) -> Count:
    """n * k * 3 + outputs * (2k - 1) ops, outputs * k macs: each weight dequantized once,
    ``(w - 8) * scale + zero`` with its group's scale and zero, then the product.

    NB: a kernel that dequantizes a weight tile again for each block of rows repeats that work;
    it is counted once, the work the result needs."""
    found = _weight_only_product(args, out)
    if found is None:
        return ZERO
    outputs, k, weights = found
    return INT4_OFFSET_SCALE_ZERO * weights + outputs * dot_ops(k), outputs * k


register(*quantized("linear", "linear_dynamic"))(_linear(relu=False))
register(*quantized("linear_relu", "linear_relu_dynamic"))(_linear(relu=True))
register(*quantized("conv1d", "conv2d", "conv3d"))(_convolution(relu=False))
register(*quantized("conv1d_relu", "conv2d_relu", "conv3d_relu"))(_convolution(relu=True))
register(*quantized("conv_transpose1d", "conv_transpose2d", "conv_transpose3d"))(
    named(_convolution_transpose, "quantized_conv_transpose_ops",
          "as nn.ConvTranspose*d: N*Cout * (2*(Cin/g)*landed - covered) ops (+ outputs for a "
          "bias), inputs * (Cout/g) * K macs"))
register(*quantized("add", "add_out", "add_scalar", "mul", "mul_out", "mul_scalar"))(
    _elementwise(1))
register(*quantized("add_relu", "add_relu_out", "mul_relu", "mul_relu_out"))(
    _elementwise(1 + RELU_OPS))
register(*quantized("embedding_bag_byte", "embedding_bag_4bit",
                    "embedding_bag_byte_rowwise_offsets", "embedding_bag_4bit_rowwise_offsets",
                    "embedding_bag_2bit_rowwise_offsets"))(
    named(_embedding_bag, "quantized_embedding_bag_ops",
          "as nn.EmbeddingBag: dim * (entries - bags) (+ dim * bags for mean, + dim * entries "
          "with per_sample_weights)"))
register(*quantized("quantized_lstm_cell_dynamic"))(_cell("LSTM"))
register(*quantized("quantized_gru_cell_dynamic"))(_cell("GRU"))
register(*quantized("quantized_rnn_tanh_cell_dynamic"))(_cell("RNN_TANH"))
register(*quantized("quantized_rnn_relu_cell_dynamic"))(_cell("RNN_RELU"))
register(*aten("quantized_lstm"))(_recurrent("LSTM"))
register(*aten("quantized_gru"))(_recurrent("GRU"))
# packing a weight for the kernels above moves its bits into their layout
register_free(*aten("_convert_weight_to_int4pack", "_convert_weight_to_int4pack_for_cpu"))
# a lookup of quantized rows (dequantized as they are read), as nn.Embedding's
register_free(*quantized("cat", "cat_out", "embedding_byte", "embedding_4bit"),
              *aten("quantize_per_tensor", "quantize_per_channel", "quantize_per_tensor_dynamic",
                    "dequantize", "int_repr", "q_scale", "q_zero_point", "_make_per_tensor_"
                    "quantized_tensor", "q_per_channel_scales", "q_per_channel_zero_points"))
