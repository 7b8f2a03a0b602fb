"""Backward operators: the kernels autograd runs for ``profile(..., backward=True)``.

Matmul-type gradients are exact in ``macs``: every gradient of a product is a product of the same
size. A convolution's input gradient and weight gradient each cost the forward's
multiply-accumulates — per group, so a depthwise convolution's backward is twice its forward,
not the 65x FlopCounterMode reports (its ``conv_backward_flop`` ignores ``groups`` in the weight
gradient). ``ops`` count ``2 * macs`` for those products (one multiply, one add per MAC).

Element-wise and normalisation gradients follow the per-element costs in the tables below.
NB: these are conventions (the standard textbook expressions of each derivative), not a
transcript of any kernel; they are written out in ``docs/operators.md``.
"""

from __future__ import annotations

import math
from typing import Any

from torch import Tensor

from moduleprofiler.formulas.distance import dot_ops
from moduleprofiler.formulas.embedding import BAG_MAX, BAG_MEAN
from moduleprofiler.formulas.linear import leading_rows
from moduleprofiler.operators._common import ZERO, Args, Count, aten, free, named, numel, register

# Per-element cost of each activation's derivative times the incoming gradient.
ACTIVATION_BACKWARD: dict[str, int] = {
    "threshold_backward": 1,      # select g where x > threshold
    "hardtanh_backward": 2,       # two comparisons select g
    "leaky_relu_backward": 2,     # comparison, multiply by slope
    "_prelu_kernel_backward": 3,  # comparison, g * weight (input), g * x (weight, summed later)
    "hardsigmoid_backward": 2,    # range test, multiply by 1/6
    "tanh_backward": 3,           # g * (1 - y^2)
    "sigmoid_backward": 3,        # g * y * (1 - y)
    "elu_backward": 3,            # comparison, exp-derived factor, multiply
    "hardswish_backward": 4,      # range tests, (2x + 3) / 6, multiply
    "softplus_backward": 5,       # sigmoid(beta x) (3) + threshold test + multiply
    "silu_backward": 7,           # sigmoid (3) + g * s * (1 + x * (1 - s)) (4)
    "mish_backward": 15,          # softplus, tanh and their chain
    "log_sigmoid_backward": 5,
    "hardshrink_backward": 2,     # two comparisons (x > lambd, x < -lambd) select g
    "softshrink_backward": 2,     # two comparisons select g
}
# glu: grad_a = g * s and grad_b = g * a * s * (1 - s), s = sigmoid(b) recomputed: 3 + 1 + 4 per
# output element
GLU_BACKWARD = 8
# rrelu: the gradient times the slope drawn per element in training (1); otherwise as
# leaky_relu_backward with the mean slope (2), as the kernel does when lower == upper too
RRELU_TRAIN_BACKWARD = 1
RRELU_SLOPE_EPSILON = 1e-6  # the kernel's test of upper - lower for "a slope was drawn"
_GELU_ERF_BACKWARD = 9    # erf form: cdf (3) + x * pdf (exp, 3 multiplies) + multiply
_GELU_TANH_BACKWARD = 17  # tanh form: the inner polynomial, tanh, and its derivative

# Normalisation gradients, per element: grad_input (batch statistics / fixed statistics),
# grad_weight and grad_bias.
NORM_INPUT_TRAIN = 7  # g*w, two channel means (2), xhat (2), the combination (2)
NORM_INPUT_EVAL = 2   # g * w * invstd
NORM_WEIGHT = 3       # xhat (2) and the multiply-accumulate
NORM_BIAS = 1         # the accumulate

# Softmax gradients: y * (g - sum(g * y)) and g - exp(y) * sum(g): 4 per element each.
SOFTMAX_BACKWARD = 4


def _mask(args: Args, default: tuple[bool, ...]) -> tuple[bool, ...]:
    mask = args.get("output_mask")
    return tuple(bool(flag) for flag in mask) if mask is not None else default


def _product(count: int) -> Count:
    return 2 * count, count


@register(*aten("convolution_backward"))
def convolution_backward_ops(args: Args, out: Any) -> Count:
    """grad_input and grad_weight: the forward's macs each; grad_bias: one add per output."""
    grad_output, weight = args.tensor("grad_output"), args.tensor("weight")
    source = args.tensor("input")
    if grad_output is None or weight is None or source is None:
        return ZERO
    per_output = int(weight[0].numel())
    # the forward's products: (N, Cout, out...) outputs, or, transposed, (N, Cin, in...) inputs
    forward_macs = (numel(source) if args.flag("transposed") else numel(grad_output)) * per_output
    want_input, want_weight, want_bias = _mask(args, (True, True, True))
    macs = forward_macs * (int(want_input) + int(want_weight))
    bias_adds = numel(grad_output) if want_bias else 0
    return 2 * macs + bias_adds, macs


@register(*aten("linear_backward"))
def linear_backward_ops(args: Args, out: Any) -> Count:
    """The gradients ``output_mask`` asks of a linear layer's ``rows`` rows (a nested input's
    ``F.linear`` runs this one operator): grad_input rows * in dot products of length out,
    grad_weight out * in of length rows, grad_bias out sums of rows; macs rows * in * out per
    product.

    NB: the matrix products of a dense layer's backward (``mm``) count the same, so a layer
    counts alike on dense and nested rows."""
    source, weight = args.first(), args.tensor("weight")
    if not isinstance(source, Tensor) or weight is None or weight.dim() != 2:
        return ZERO
    rows = leading_rows(source)
    out_features, in_features = int(weight.shape[0]), int(weight.shape[1])
    want_input, want_weight, want_bias = _mask(args, (True, True, True))
    ops = macs = 0
    if want_input:
        ops += rows * in_features * dot_ops(out_features)
        macs += rows * in_features * out_features
    if want_weight:
        ops += out_features * in_features * dot_ops(rows)
        macs += rows * in_features * out_features
    if want_bias:
        ops += out_features * max(rows - 1, 0)
    return ops, macs


def _elementwise_backward(per_element: int) -> Any:
    def formula(args: Args, out: Any) -> Count:
        return per_element * numel(args.first()), 0

    return named(formula, None, f"{per_element} ops per element of the gradient.")


for _name, _cost in ACTIVATION_BACKWARD.items():
    register(*aten(_name))(_elementwise_backward(_cost))


@register(*aten("glu_backward"))
def glu_backward_ops(args: Args, out: Any) -> Count:
    """8 ops per element of the gradient: sigmoid of the gate (3), its half's gradient (1) and
    the gate's, ``g * a * s * (1 - s)`` (4)."""
    return GLU_BACKWARD * numel(args.first()), 0


@register(*aten("rrelu_with_noise_backward"))
def rrelu_backward_ops(args: Args, out: Any) -> Count:
    """1 op per element in training (the gradient times the slope drawn), else 2 (as
    ``leaky_relu_backward``: a comparison and the multiply by the mean slope)."""
    drawn = args.flag("training") and (
        args.number("upper", 1 / 3) - args.number("lower", 1 / 8) > RRELU_SLOPE_EPSILON)
    per = RRELU_TRAIN_BACKWARD if drawn else ACTIVATION_BACKWARD["leaky_relu_backward"]
    return per * numel(args.first()), 0


@register(*aten("gelu_backward"))
def gelu_backward_ops(args: Args, out: Any) -> Count:
    """9 ops per element (erf form), 17 with ``approximate='tanh'``."""
    cost = _GELU_TANH_BACKWARD if args.get("approximate") == "tanh" else _GELU_ERF_BACKWARD
    return cost * numel(args.first()), 0


LOGIT_BACKWARD = 3  # g / (x * (1 - x)): subtract, multiply, divide
LOGIT_EPS_TEST = 2  # with ``eps`` the gradient is 0 outside [eps, 1 - eps]: two comparisons


@register(*aten("logit_backward"))
def logit_backward_ops(args: Args, out: Any) -> Count:
    """3 ops per element, + 2 with ``eps``."""
    per_element = LOGIT_BACKWARD + LOGIT_EPS_TEST * int(args.get("eps") is not None)
    return per_element * numel(args.first()), 0


@register(*aten("_softmax_backward_data", "_log_softmax_backward_data",
                "_masked_softmax_backward"))
def softmax_backward_ops(args: Args, out: Any) -> Count:
    """4 ops per element (``_masked_softmax_backward``: the masked-out elements' zero
    gradient is a selection, free)."""
    return SOFTMAX_BACKWARD * numel(args.first()), 0


def _norm_backward(args: Args, train: bool, weight: Tensor | None) -> Count:
    elements = numel(args.first())
    want_input, want_weight, want_bias = _mask(args, (True, True, True))
    ops = 0
    if want_input:
        ops += (NORM_INPUT_TRAIN if train else NORM_INPUT_EVAL) * elements
        if weight is None and not train:
            ops -= elements  # no weight to multiply by
    if want_weight and weight is not None:
        ops += NORM_WEIGHT * elements
    if want_bias:
        ops += NORM_BIAS * elements
    return ops, 0


@register(*aten("native_batch_norm_backward"))
def batch_norm_backward_ops(args: Args, out: Any) -> Count:
    """7 (batch statistics) or 2 (running statistics) per element for grad_input, 3 for
    grad_weight, 1 for grad_bias."""
    return _norm_backward(args, args.flag("train"), args.tensor("weight"))


@register(*aten("batch_norm_backward"))
def batch_norm_update_backward_ops(args: Args, out: Any) -> Count:
    """The backward of ``_batch_norm_with_update`` / ``_no_update`` (exported and compiled
    graphs): :func:`batch_norm_backward_ops` with batch statistics when ``update``."""
    return _norm_backward(args, args.flag("update"), args.tensor("weight"))


@register(*aten("cudnn_batch_norm_backward", "miopen_batch_norm_backward"))
def fused_batch_norm_backward_ops(args: Args, out: Any) -> Count:
    """cuDNN's and MIOpen's batch norm backward (a training batch norm on the GPU): every
    gradient with batch statistics, 7 + 3 + 1 per element."""
    return _norm_backward(args, True, args.tensor("weight"))


# SyncBatchNorm's backward on CUDA splits the batch-statistics gradient in two kernels around
# the all-reduce of the channel sums: the reduction (the input gradient's two channel means,
# the weight and bias gradients) and the element-wise rest (7 - 2 per element), so the two
# together count as ``native_batch_norm_backward`` in training.
NORM_INPUT_MEANS = 2


@register(*aten("batch_norm_backward_reduce"))
def batch_norm_backward_reduce_ops(args: Args, out: Any) -> Count:
    """Per element: 2 for the input gradient's channel sums (``input_g``), 3 for the weight
    gradient (``weight_g``, with a weight), 1 for the bias gradient (``bias_g``)."""
    elements = numel(args.first())
    ops = NORM_INPUT_MEANS * elements if args.flag("input_g") else 0
    if args.flag("weight_g") and args.tensor("weight") is not None:
        ops += NORM_WEIGHT * elements
    if args.flag("bias_g"):
        ops += NORM_BIAS * elements
    return ops, 0


@register(*aten("batch_norm_backward_elemt"))
def batch_norm_backward_elemt_ops(args: Args, out: Any) -> Count:
    """5 per element: the input gradient from the all-reduced channel sums (7 in all with
    the 2 of :func:`batch_norm_backward_reduce_ops`)."""
    return (NORM_INPUT_TRAIN - NORM_INPUT_MEANS) * numel(args.first()), 0


@register(*aten("native_layer_norm_backward", "native_group_norm_backward"))
def layer_norm_backward_ops(args: Args, out: Any) -> Count:
    """7 per element for grad_input, 3 for grad_weight, 1 for grad_bias."""
    return _norm_backward(args, True, args.tensor("weight"))


@register(*aten("_fused_rms_norm_backward"))
def rms_norm_backward_ops(args: Args, out: Any) -> Count:
    """The fused RMS norm's backward (CUDA's ``nn.RMSNorm``): 7 per element for grad_input
    (``g * w``, ``x * rstd``, the row's multiply-accumulate of the two, ``xhat`` times that,
    the subtraction and the multiply by ``rstd``), 3 for grad_weight, as for a layer norm."""
    elements = numel(args.tensor("grad_out"))
    want_input, want_weight = _mask(args, (True, True))[:2]
    ops = NORM_INPUT_TRAIN * elements if want_input else 0
    if want_weight and args.tensor("weight") is not None:
        ops += NORM_WEIGHT * elements
    return ops, 0


@register(*aten("max_pool2d_with_indices_backward",
                "max_pool3d_with_indices_backward", "adaptive_max_pool2d_backward",
                "adaptive_max_pool3d_backward", "fractional_max_pool2d_backward",
                "fractional_max_pool3d_backward", "embedding_dense_backward"))
def scatter_add_backward_ops(args: Args, out: Any) -> Count:
    """One add per element of the incoming gradient (scattered into the input's gradient)."""
    return numel(args.first()), 0


def _bag_rows(args: Args) -> int:
    """Entries of an embedding bag's backward that are not ``padding_idx`` (every entry on the
    meta device, where the indices cannot be read)."""
    indices, padding_idx = args.tensor("indices"), args.get("padding_idx")
    if indices is None:
        return 0
    if indices.device.type == "meta" or not isinstance(padding_idx, int) or padding_idx < 0:
        return numel(indices)
    return int((indices != padding_idx).sum())


@register(*aten("_embedding_bag_backward", "_embedding_bag_dense_backward"))
def embedding_bag_backward_ops(args: Args, out: Any) -> Count:
    """The weight gradient: each entry's bag gradient added into its row, ``dim`` adds per entry
    (sum), times ``1 / size`` of its bag or its per-sample weight first (mean, weighted: ``dim``
    multiplies more); max: each bag's gradient added into its maxima's rows, one add per
    gradient element.

    NB: ``scale_grad_by_freq``'s divides by each index's count are not counted."""
    grad = args.first()
    if not isinstance(grad, Tensor) or grad.dim() < 2:
        return ZERO
    dim = int(grad.shape[-1])
    mode = args.get("mode")
    if mode == BAG_MAX:
        return numel(grad), 0
    scaled = mode == BAG_MEAN or args.tensor("per_sample_weights") is not None
    return _bag_rows(args) * dim * (1 + int(scaled)), 0


@register(*aten("_embedding_bag_per_sample_weights_backward"))
def embedding_bag_sample_weights_backward_ops(args: Args, out: Any) -> Count:
    """Each entry's weight gradient: the dot product of its bag's gradient with its row,
    ``2 * dim - 1`` ops per entry."""
    grad = args.first()
    if not isinstance(grad, Tensor) or grad.dim() < 2:
        return ZERO
    return _bag_rows(args) * dot_ops(int(grad.shape[-1])), 0


def _avg_pool_backward(dims: int) -> Any:
    def formula(args: Args, out: Any) -> Count:
        kernel = [int(k) for k in args.get("kernel_size") or [1]]
        window = kernel[0] ** dims if len(kernel) == 1 else math.prod(kernel)
        return numel(args.first()) * (window + 1), 0

    return named(formula, None, "Each output gradient is divided once and added into its window.")


register(*aten("avg_pool2d_backward"))(_avg_pool_backward(2))
register(*aten("avg_pool3d_backward"))(_avg_pool_backward(3))


@register(*aten("_adaptive_avg_pool2d_backward", "_adaptive_avg_pool3d_backward"))
def adaptive_avg_pool_backward_ops(args: Args, out: Any) -> Count:
    """One divide and one add per element of the input's gradient."""
    return 2 * numel(out), 0


@register(*aten("native_dropout_backward"))
def dropout_backward_ops(args: Args, out: Any) -> Count:
    """Mask multiply and scale: 2 per element."""
    return 2 * numel(args.first()), 0


def _attention_backward(query: Tensor | None, key: Tensor | None, value: Tensor | None) -> Count:
    """Four products of the forward's size (dV, dP, dQ, dK) plus the softmax gradient."""
    if query is None or key is None or value is None:
        return ZERO
    *batch, length, depth = query.shape
    source = int(key.shape[-2])
    heads_batch = math.prod(int(b) for b in batch)
    scores = heads_batch * int(length) * source
    macs = 2 * scores * int(depth) + 2 * scores * int(value.shape[-1])
    return 2 * macs + SOFTMAX_BACKWARD * scores, macs


@register(*aten("_scaled_dot_product_flash_attention_for_cpu_backward",
                "_scaled_dot_product_flash_attention_backward",
                "_scaled_dot_product_efficient_attention_backward",
                "_scaled_dot_product_cudnn_attention_backward", "_cudnn_attention_backward"))
def sdpa_backward_ops(args: Args, out: Any) -> Count:
    """Four attention-sized products and the softmax gradient (recomputation not counted)."""
    return _attention_backward(args.tensor("query"), args.tensor("key"), args.tensor("value"))


@register(*aten("_flash_attention_backward", "_efficient_attention_backward"))
def packed_attention_backward_ops(args: Args, out: Any) -> Count:
    """As :func:`sdpa_backward_ops`, for the (batch, seq, heads, dim) layout."""
    query, key, value = args.tensor("query"), args.tensor("key"), args.tensor("value")
    if query is None or key is None or value is None:
        return ZERO
    return _attention_backward(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2))


@register(*aten("mkldnn_rnn_layer_backward"))
def rnn_layer_backward_ops(args: Args, out: Any) -> Count:
    """Per timestep the input, hidden and both weight gradients: twice the forward's gate
    products."""
    source = args.first()
    weight_ih, weight_hh = args.tensor("weight1"), args.tensor("weight2")
    if not isinstance(source, Tensor) or weight_ih is None or weight_hh is None:
        return ZERO
    rows = int(source.numel()) // int(source.shape[-1])
    forward = rows * (int(weight_ih.numel()) + int(weight_hh.numel()))
    return _product(2 * forward)


# Upsampling gradients: every incoming gradient element is scattered to the taps it was
# interpolated from: a multiply by the tap's weight and an add per tap (nearest: one add).
UPSAMPLE_BACKWARD: dict[str, int] = {
    "upsample_nearest1d_backward": 1, "upsample_nearest2d_backward": 1,
    "upsample_nearest3d_backward": 1, "_upsample_nearest_exact1d_backward": 1,
    "_upsample_nearest_exact2d_backward": 1, "_upsample_nearest_exact3d_backward": 1,
    "upsample_linear1d_backward": 4, "upsample_bilinear2d_backward": 8,
    "_upsample_bilinear2d_aa_backward": 8, "upsample_bicubic2d_backward": 32,
    "_upsample_bicubic2d_aa_backward": 32, "upsample_trilinear3d_backward": 16,
}
for _name, _cost in UPSAMPLE_BACKWARD.items():
    register(*aten(_name))(_elementwise_backward(_cost))


# The gate arithmetic's gradient of CUDA's fused LSTM and GRU cells (``nn.LSTMCell``,
# ``nn.GRUCell``; their matmuls' gradients run as separate ``mm``), per hidden element, as the
# CPU's decomposed cell backward counts it: LSTM 3 sigmoid gradients (9), 2 tanh gradients (6),
# 6 multiplies and an add; GRU 2 sigmoid gradients (6), 1 tanh gradient (3), 4 multiplies and
# 2 adds.
LSTM_CELL_BACKWARD = 22
GRU_CELL_BACKWARD = 15


def _bias_sum(rows: int, width: int) -> int:
    """A bias gradient: the gate gradients summed over the rows."""
    return max(rows - 1, 0) * width


@register(*aten("_thnn_fused_lstm_cell_backward_impl"))
def fused_lstm_cell_backward_ops(args: Args, out: Any) -> Count:
    """rows * H * 22, plus the bias gradient (the 4H gate gradients summed over the rows) when
    ``has_bias``: the kernel sums once for both biases (the decomposed CPU cell sums twice)."""
    cx, workspace = args.tensor("cx"), args.tensor("workspace")
    if cx is None or workspace is None:
        return ZERO
    rows = numel(cx) // int(cx.shape[-1]) if cx.dim() else 1
    bias = _bias_sum(rows, int(workspace.shape[-1])) if args.flag("has_bias") else 0
    return LSTM_CELL_BACKWARD * numel(cx) + bias, 0


@register(*aten("_thnn_fused_gru_cell_backward"))
def fused_gru_cell_backward_ops(args: Args, out: Any) -> Count:
    """rows * H * 15, plus both bias gradients (3H gate gradients summed over the rows each)
    when ``has_bias``."""
    grad = args.first()
    if not isinstance(grad, Tensor) or grad.dim() == 0:
        return ZERO
    hidden = int(grad.shape[-1])
    rows = numel(grad) // hidden
    bias = 2 * _bias_sum(rows, 3 * hidden) if args.flag("has_bias") else 0
    return GRU_CELL_BACKWARD * numel(grad) + bias, 0


@register(*aten("_cudnn_rnn_backward"))
def cudnn_rnn_backward_ops(args: Args, out: Any) -> Count:
    """A whole cuDNN RNN's backward: the forward's gate products over every layer and
    direction for the input and hidden gradients (always computed), and as many again for the
    weight gradients when ``output_mask`` asks for them (frozen weights: they are skipped)."""
    source = args.first()
    weights = args.get("weight") or []
    if not isinstance(source, Tensor):
        return ZERO
    batch_sizes = args.tensor("batch_sizes")
    if batch_sizes is not None and batch_sizes.numel():
        rows = int(source.shape[0])  # packed: one row per real timestep
    else:
        rows = int(source.numel()) // int(source.shape[-1])
    per_row = sum(int(w.numel()) for w in weights if isinstance(w, Tensor) and w.dim() == 2)
    want_weight = _mask(args, (True, True, True, True))[3]
    return _product((1 + int(want_weight)) * rows * per_row)


free("select_backward", "slice_backward", "index_select_backward", "diagonal_backward",
     "_unsafe_index_put", "new_zeros", "zeros_like",
     # the source's gradient of ``masked_scatter``: the masked elements of the gradient, moved
     "masked_scatter_backward")


@register(*aten("unfold_backward"))
def unfold_backward_ops(args: Args, out: Any) -> Count:
    """Overlap-add of ``Tensor.unfold``'s windows: one add per window element landing on a
    position an earlier window already wrote (windows x size - positions covered, per line);
    0 when the windows do not overlap."""
    sizes = [int(s) for s in args.get("input_sizes") or ()]
    if not sizes:
        return ZERO
    dim, size, step = int(args.get("dim")), int(args.get("size")), int(args.get("step"))
    dim = dim % len(sizes)
    length = sizes[dim]
    windows = (length - size) // step + 1 if length >= size else 0
    covered = min(length, (windows - 1) * step + size) if step < size and windows else \
        windows * size
    lines = math.prod(sizes) // length if length else 0
    return lines * (windows * size - covered), 0


@register(*aten("reflection_pad1d_backward", "reflection_pad2d_backward",
                "reflection_pad3d_backward", "replication_pad1d_backward",
                "replication_pad2d_backward", "replication_pad3d_backward"))
def pad_backward_ops(args: Args, out: Any) -> Count:
    """Fold of a reflection or replication pad's gradient: each padded position's gradient is
    added to the input position it copied (one add each), the rest are moved: per padded
    plane ``prod(out) - prod(kept)``, ``kept`` the input positions a negative pad does not crop.
    """
    grad_output, source = args.tensor("grad_output"), args.tensor("self")
    padding = [int(p) for p in args.get("padding") or ()]
    if grad_output is None or source is None or not padding:
        return ZERO
    dims = len(padding) // 2  # (left, right) of the last dim first, as in F.pad
    kept = 1
    for i in range(dims):
        size = int(source.shape[-1 - i])
        kept *= max(size + min(padding[2 * i], 0) + min(padding[2 * i + 1], 0), 0)
    planes = numel(source) // math.prod(int(s) for s in source.shape[-dims:]) \
        if numel(source) else 0
    padded = math.prod(int(s) for s in grad_output.shape[-dims:])
    return planes * max(padded - kept, 0), 0


@register(*aten("_weight_norm_interface_backward"))
def weight_norm_backward_ops(args: Args, out: Any) -> Count:
    """5 * numel(v) + 2 * groups: per group the dot product of the gradient with ``v``
    (2M - 1 per group) divided by the norm (g's gradient) and the two factors g / norm and
    g's gradient / norm; per element ``(g / norm) * (grad - v * that)`` (3M).

    Groups as in the forward (:func:`~moduleprofiler.operators.elementwise.weight_norm_ops`).
    """
    v, dim = args.tensor("saved_v"), args.get("dim", 0)
    if v is None or numel(v) == 0:
        return ZERO
    groups = 1 if dim == -1 or v.dim() == 0 else int(v.shape[dim])
    return 5 * numel(v) + 2 * groups, 0


_SEGMENT_GRADIENT = {"sum": 0, "mean": 1, "prod": 3}
"""Per data element, the gradient of a ``segment_reduce``: a sum's is its segment's gradient
(a copy), a mean's that divided by the length, a product's ``grad * output / x`` after a test
for zero (NB: a segment holding a zero recomputes its product without it: not counted)."""


@register(*aten("_segment_reduce_backward"))
def segment_reduce_backward_ops(args: Args, out: Any) -> Count:
    """numel(data) * (0 sum, 1 mean, 3 prod); max / min: numel(data) comparisons with the
    segment's result + numel(output) divides of the gradient among the ties (one per segment:
    NB more ties are more divides, in the data)."""
    data, output = args.tensor("data"), args.tensor("output")
    if data is None:
        return ZERO
    reduce = args.get("reduce")
    if reduce in _SEGMENT_GRADIENT:
        return _SEGMENT_GRADIENT[reduce] * numel(data), 0
    return numel(data) + numel(output), 0
