"""What one aten operator asks of a GPU: its class (the calibration table that times it), the
features that place it in that table, and the host-cost class of its launch."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import torch

from moduleprofiler.efficiency.peaks import peak_dtype
from moduleprofiler.efficiency.traffic import ROW_GATHERS, operator_bytes
from moduleprofiler.shapes import iter_tensors

VIEW = "view"
"""Host class of operators that launch nothing (views, metadata, allocations)."""


@dataclass(frozen=True)
class OpWork:
    """One operator call as the prediction model sees it."""

    name: str
    """The operator's name (``aten.mm``)."""
    table: str | None
    """The calibration table that times it (``gemm``, ``conv``, ``mem_binary``...);
    ``None``: it launches no device work."""
    features: tuple[float, ...]
    """Its coordinates in that table (log2 sizes, see :func:`classify`)."""
    dtype: str
    """``fp32``, ``bf16`` or ``fp16``: the dtype table that times it."""
    flops: float
    moved_bytes: float
    host: str
    """The host-cost class of its launch (:data:`.calibrate.HOST_BENCHES`)."""
    syncs: bool = False
    """It waits for the device (``.item()``, ``nonzero``)."""
    by_rule: bool = False
    """It has no class of its own (a cumulative product, an FFT, a solver): priced by the
    elementwise rule, on the bytes it moves, which the notes say."""
    prelude: OpWork | None = None
    """A kernel the operator runs besides its own, which the meta device does not show: the
    copy that makes a layer norm's strided input contiguous, the addition of a cuDNN
    convolution's bias, ``_safe_softmax``'s masking (priced by its own table, added to the
    operator's time; a prelude may have its own)."""


_UNARY = {"relu", "relu_", "gelu", "silu", "silu_", "sigmoid", "tanh", "hardswish",
          "hardswish_", "hardsigmoid", "hardsigmoid_", "neg", "exp", "rsqrt", "sqrt", "erf",
          "clamp", "clamp_", "clamp_min", "hardtanh", "hardtanh_", "native_dropout", "pow",
          "abs", "log", "sin", "cos", "reciprocal", "threshold_backward", "gelu_backward",
          "silu_backward", "sigmoid_backward", "tanh_backward", "hardswish_backward",
          "hardsigmoid_backward", "native_dropout_backward", "fill_", "zero_", "zeros",
          "ones", "full", "zeros_like", "ones_like", "full_like", "scalar_tensor", "tril",
          "triu", "arange", "masked_fill", "masked_fill_", "leaky_relu", "elu", "mish",
          "upsample_nearest2d", "upsample_bilinear2d", "constant_pad_nd", "flip",
          "logical_not", "bitwise_not", "eq", "ne", "lt", "gt", "le", "ge", "cumsum"}
_BINARY = {"add", "add_", "sub", "sub_", "mul", "mul_", "div", "div_", "where", "maximum",
           "minimum", "addcmul", "addcmul_", "addcdiv", "addcdiv_", "lerp", "lerp_",
           "logical_and", "logical_or", "bitwise_and", "bitwise_or", "rsub", "masked_scatter",
           "index_add", "index_add_"}
_REDUCTION = {"sum", "mean", "amax", "amin", "max", "min", "argmax", "argmin", "var_mean",
              "var", "std", "std_mean", "norm", "linalg_vector_norm", "prod", "any", "all",
              "max_pool2d_with_indices", "avg_pool2d", "_adaptive_avg_pool2d",
              "adaptive_max_pool2d", "max_pool2d_with_indices_backward", "avg_pool2d_backward",
              "_adaptive_avg_pool2d_backward", "_log_softmax_backward_data", "nll_loss_forward",
              "nll_loss_backward"}
_SOFTMAX = {"_softmax", "_log_softmax", "_safe_softmax", "_softmax_backward_data"}
_LAYER_NORM = {"native_layer_norm", "native_layer_norm_backward", "native_group_norm",
               "native_group_norm_backward", "_fused_rms_norm", "_fused_rms_norm_backward"}
_BATCH_NORM = {"native_batch_norm", "_native_batch_norm_legit_no_training",
               "_native_batch_norm_legit", "cudnn_batch_norm", "native_batch_norm_backward",
               "cudnn_batch_norm_backward", "_native_batch_norm_legit_functional"}
_COPY = {"clone", "copy_", "_to_copy", "contiguous", "_copy_from", "index_put", "index_put_",
         "slice_scatter", "select_scatter", "new_zeros", "new_ones"}
_GATHER = {"embedding", "index_select", "index", "gather", "embedding_dense_backward",
           "scatter", "scatter_add", "scatter_add_", "take"}
_CAT = {"cat", "stack"}
_SYNCS = {"_local_scalar_dense", "nonzero", "masked_select", "item", "unique",
          "_unique2"}
_GEMM = {"mm", "addmm", "_addmm_activation"}
_BMM = {"bmm", "baddbmm"}
_GROUPED_GEMM = {"_grouped_mm"}
"""A mixture-of-experts layer's products: each expert's rows of the first operand times its
own matrix, in one kernel."""
_LINEAR_TABLE = {(False, False): "gemm", (True, False): "gemm_nt", (False, True): "gemm_bias",
                 (True, True): "gemm_bias_nt"}
"""A matrix product's table by (its second operand is a transposed weight, a bias is added
in the kernel: ``addmm``)."""
GEMM_TABLES = frozenset(_LINEAR_TABLE.values())
"""The tables of a forward's plain matrix products (``mm``, ``addmm``)."""
_ATTENTION = {"_scaled_dot_product_efficient_attention", "_scaled_dot_product_flash_attention",
              "_scaled_dot_product_cudnn_attention", "_flash_attention_forward",
              "_efficient_attention_forward"}
_ATTENTION_BACKWARD = {f"{name}_backward" for name in _ATTENTION}
_CAUSAL_ARGUMENT = {"_scaled_dot_product_efficient_attention": 6,
                    "_scaled_dot_product_flash_attention": 4,
                    "_scaled_dot_product_efficient_attention_backward": 11,
                    "_scaled_dot_product_flash_attention_backward": 11}
"""Where each attention operator takes ``is_causal`` positionally."""
_MEMORY_HOST = {"mem_unary": "unary", "mem_binary": "binary", "mem_reduction": "reduction",
                "mem_softmax": "softmax", "mem_layer_norm": "layer_norm",
                "mem_batch_norm_2d": "batch_norm", "mem_copy": "copy",
                "mem_transpose_copy": "copy", "mem_gather": "gather", "mem_cat": "copy",
                "mem_broadcast": "binary", "mem_strided": "binary", "mem_permute_copy": "copy",
                "mem_convert": "copy", "mem_strided_cat": "copy",
                "mem_strided_inner_cat": "copy", "mem_roll": "unary"}
"""Each memory-bound table's host class (a router's sort and top-k have their own:
:data:`_OWN_HOST`)."""
_ROUTING = {"sort": "mem_sort", "topk": "mem_topk"}
"""A mixture-of-experts router's kernels, timed by their own tables
(:mod:`~moduleprofiler.prediction.calibrate_experts`): far slower than their bytes say."""
_OWN_HOST = {"sort": "sort", "topk": "topk", "cumsum": "scan", "histc": "histogram"}
"""Operators whose launch costs the host several kernels' work, timed by host classes of their
own (a sort 31 µs where a unary launch takes 7 on an H200's host); a calibration without
them prices them as :data:`~moduleprofiler.prediction.host_model.HOST_FALLBACK` says."""
_CLASSED = {"roll": "mem_roll", **_ROUTING, **{name: table for table, names in (
    ("mem_unary", _UNARY), ("mem_binary", _BINARY), ("mem_reduction", _REDUCTION),
    ("mem_softmax", _SOFTMAX), ("mem_layer_norm", _LAYER_NORM),
    ("mem_batch_norm_2d", _BATCH_NORM), ("mem_gather", _GATHER), ("mem_cat", _CAT),
    ("mem_copy", _COPY)) for name in names}}
"""The memory-bound operators with a class of their own, and its table (a copy's when its
source is contiguous); any other is priced as elementwise by its bytes
(:attr:`OpWork.by_rule`)."""
_PER_ELEMENT = {"mem_broadcast", "mem_strided"}
"""Elementwise kernels without vector loads: their index arithmetic, not their bytes, bounds
them, so they are priced per output element (two elements' bytes each, as calibrated)."""


WIDTH_TABLES = frozenset({"mem_layer_norm", "mem_layer_norm_backward", "mem_softmax"})
"""Tables of kernels that reduce rows: their second feature is the row's width (a narrow row
leaves most of a warp idle: a 48-wide layer norm moves its bytes ten times slower than a
1024-wide one on an H200)."""
DEFAULT_WIDTH = 1024
"""The width of the rows a calibration made before widths were measured timed."""
CHANNELS_LAST = 8.0
"""A channels-last convolution's last feature (set far apart: cuDNN runs other kernels)."""
ODD_GROUP_WIDTH = 2.0
"""A grouped convolution's feature when its group width is no power of two (24, 40, 48...):
cuDNN runs them through slower kernels than the powers of two, so the rows of such widths are
their nearest neighbours."""


def _log2(value: float) -> float:
    return math.log2(max(value, 1.0))


def _dtype_of(args: Any, out: Any) -> str:
    """The peak-table name of the first floating tensor's dtype (``fp64``, ``fp8`` too: a
    calibration without their tables times them from its fp32 ones, and the notes say so)."""
    for tensor in iter_tensors((out, args)):
        if tensor.is_floating_point():
            return peak_dtype(tensor.dtype) or "fp32"
    return "fp32"


def gemm_features(m: float, n: float, k: float, element_size: int) -> tuple[float, ...]:
    """A matrix product's coordinates in the ``gemm`` tables: its three sizes, and whether a
    row of either operand misses 16-byte alignment (set far apart: such widths, a
    vocabulary's, keep the fastest tensor-core kernels out)."""
    misaligned = (n * element_size) % 16 != 0 or (k * element_size) % 16 != 0
    return _log2(m), _log2(n), _log2(k), 6.0 if misaligned else 0.0


def _gemm_features(name: str, args: tuple[Any, ...]) -> tuple[str, tuple[float, ...], float]:
    if name in _GEMM:
        a, b = (args[1], args[2]) if name != "mm" else (args[0], args[1])
        m, k, n = a.shape[0], a.shape[1], b.shape[1]
        table = _LINEAR_TABLE[(_transposed(b), name != "mm")]
        return table, gemm_features(m, n, k, a.element_size()), 2.0 * m * n * k
    a, b = (args[1], args[2]) if name == "baddbmm" else (args[0], args[1])
    batch, m, k, n = a.shape[0], a.shape[1], a.shape[2], b.shape[2]
    return "bmm", bmm_features(batch, m, n, k, a.element_size()), 2.0 * batch * m * n * k


def grouped_gemm_features(experts: float, rows: float, n: float, k: float,
                          element_size: int) -> tuple[float, ...]:
    """A grouped product's coordinates in the ``grouped_gemm`` table: one expert's product
    (its share of the ``rows``, split evenly) and the number of experts (how many weights the
    kernel reads, and how many tiles it has to spread over the device)."""
    return (*gemm_features(max(1.0, rows / experts), n, k, element_size), _log2(experts))


def bmm_features(batch: float, m: float, n: float, k: float,
                 element_size: int) -> tuple[float, ...]:
    """A batched product's coordinates in the ``bmm`` table: its four sizes, and whether a
    row misses 16-byte alignment (set far apart: attention scores over 49 or 197 tokens run
    two to four times slower per FLOP than over 48 or 192)."""
    return (_log2(batch), *gemm_features(m, n, k, element_size))


def _transposed(matrix: torch.Tensor) -> bool:
    """Whether a matrix operand is the transpose of a contiguous one (``nn.Linear``'s
    ``x @ w.T``): cuBLAS runs other kernels for it than for a row-major operand."""
    return (matrix.dim() == 2 and matrix.shape[0] > 1 and matrix.shape[1] > 1
            and matrix.stride(0) == 1 and matrix.stride(1) >= matrix.shape[0])


def conv_features(batch: int, cin: int, cout: int, side: float, kernel: float, stride: float,
                  groups: int, channels_last: bool = False) -> tuple[float, ...]:
    """A convolution's coordinates in the ``conv`` tables: output pixels, channels per group,
    output channels, kernel side and stride, whether it is depthwise, the number of groups,
    whether it is grouped over a group width no power of two (cuDNN's kernels for those run
    1.3 to 2x slower than the powers of two around them) and whether its input or weight is
    channels-last (depthwise and channels-last set far apart: other kernels run)."""
    out_side = max(1.0, side / stride)
    depthwise = 8.0 if groups > 1 and groups == cin else 0.0
    width = cin // max(groups, 1)
    odd_width = ODD_GROUP_WIDTH if 1 < groups < cin and width & (width - 1) else 0.0
    return (_log2(batch * out_side * out_side), _log2(cin / groups), _log2(cout), kernel,
            stride, depthwise, _log2(groups), odd_width,
            CHANNELS_LAST if channels_last else 0.0)


def _channels_last(tensor: Any) -> bool:
    """Whether a 4-d ``tensor`` is stored channels-last (and not also contiguous, as a tensor
    of one channel or one pixel is): cuDNN then runs its channels-last kernels."""
    return (isinstance(tensor, torch.Tensor) and tensor.dim() == 4 and not tensor.is_contiguous()
            and tensor.is_contiguous(memory_format=torch.channels_last))


def _one_pixel_pointwise(args: tuple[Any, ...], output_shape: torch.Size | None) -> bool:
    """Whether a convolution is a 1 x 1 one, ungrouped, of one pixel per image (a
    squeeze-and-excitation block's): a matrix product of the batch's rows, which the
    ``conv`` tables (7 x 7 pixels and up) do not measure."""
    weight = args[1]
    groups = int(args[8]) if len(args) > 8 else 1
    return (output_shape is not None and len(output_shape) > 2 and groups == 1
            and math.prod(output_shape[2:]) == 1 and math.prod(weight.shape[2:]) == 1)


def _native_depthwise(args: tuple[Any, ...]) -> bool:
    """Whether a CUDA device runs a convolution with PyTorch's own depthwise kernel, which adds
    the bias itself (``_conv_depthwise2d``, ``conv_depthwise3d``): a depthwise one, 4-d or 5-d,
    not transposed, with a channels-first input and weight (cuDNN takes the channels-last
    ones). NB: cuDNN also takes some fp16 depthwise convolutions (a workload heuristic of
    PyTorch's); they are taken as native here."""
    x, weight = args[0], args[1]
    groups = int(args[8]) if len(args) > 8 else 1
    transposed = bool(args[6]) if len(args) > 6 else False
    return (x.dim() in (4, 5) and not transposed and groups > 1 and x.shape[1] == groups
            and weight.shape[0] % groups == 0
            and not (_channels_last(x) or _channels_last(weight)))


def _channels_last_weight(args: tuple[Any, ...], dtype: str) -> OpWork | None:
    """The copy cuDNN's convolution makes of a weight into its input's channels-last layout
    (PyTorch's ``cudnn_convolution`` calls ``weight.contiguous(memory_format)``; the meta
    device shows no such call), as ConvNeXt's downsampling layers have it, or ``None`` where the
    input is channels-first, PyTorch's own depthwise kernel runs, or the weight already is in
    that layout (a 1 x 1 or a depthwise one is both)."""
    x, weight = args[0], args[1]
    if not isinstance(weight, torch.Tensor) or weight.dim() != 4 or not _channels_last(x) or \
            _native_depthwise(args) or \
            weight.is_contiguous(memory_format=torch.channels_last):
        return None
    target = torch.empty_like(weight, memory_format=torch.channels_last)
    kind = _access_kind("mem_copy", "copy_", (target, weight), target)
    moved = 2 * weight.numel() * weight.element_size()
    return OpWork("aten.copy_", kind, (_log2(moved),), dtype, 0.0, float(moved),
                  _MEMORY_HOST[kind])


def _bias_addition(args: tuple[Any, ...], out: Any, dtype: str) -> OpWork | None:
    """The addition of a convolution's bias to its output, a kernel of its own after cuDNN's
    (PyTorch calls ``output.add_(bias)`` after ``cudnn_convolution``; the meta device shows
    no such call): an elementwise kernel with a broadcast operand, priced on the output's
    elements (:data:`_PER_ELEMENT`). ``None`` without a bias, or where PyTorch's own
    depthwise kernel adds it (:func:`_native_depthwise`)."""
    bias = args[2] if len(args) > 2 else None
    if not isinstance(bias, torch.Tensor) or not isinstance(out, torch.Tensor) or \
            _native_depthwise(args):
        return None
    moved = 2 * out.numel() * out.element_size()
    return OpWork("aten.add_", "mem_broadcast", (_log2(moved),), dtype, 0.0, float(moved),
                  _MEMORY_HOST["mem_broadcast"])


def _conv(args: tuple[Any, ...], output_shape: torch.Size | None
          ) -> tuple[tuple[float, ...], float]:
    x, weight = args[0], args[1]
    stride = args[3] if len(args) > 3 else (1,)
    groups = int(args[8]) if len(args) > 8 else 1
    spatial = list(x.shape[2:]) or [1]
    side = math.prod(spatial) ** (1.0 / len(spatial)) if spatial else 1.0
    kernel = math.prod(weight.shape[2:]) ** (1.0 / max(1, weight.dim() - 2))
    step = math.prod(stride) ** (1.0 / len(stride)) if stride else 1.0
    cout, cin = weight.shape[0], weight.shape[1] * groups
    out_pixels = math.prod(output_shape[2:]) if output_shape is not None else \
        math.prod(spatial) / step ** len(spatial)
    flops = 2.0 * x.shape[0] * out_pixels * cout * weight.shape[1] * math.prod(weight.shape[2:])
    return conv_features(int(x.shape[0]), int(cin), int(cout), side, kernel, step, groups,
                         _channels_last(x) or _channels_last(weight)), flops


ATTENTION_TILES = {("attention", "bf16"): 128, ("attention", "fp16"): 128}
"""The sequence tile of the fused attention kernels by table and dtype (else 64): a sequence
costs what its whole tiles do. Read from the H200's measurements: in fp32 50 tokens take as
long as 64, 145 about as long as 192 and 577 as 640; bf16's forward steps at 128."""


def tiled_sequence(seq: int, table: str = "attention", dtype: str = "fp32") -> int:
    """``seq`` rounded up to whole tiles of ``table``'s kernels in ``dtype``
    (:data:`ATTENTION_TILES`)."""
    tile = ATTENTION_TILES.get((table, dtype), 64)
    return -(-max(seq, 1) // tile) * tile


def attention_features(batch_heads: int, seq: int, head_dim: int,
                       causal: bool) -> tuple[float, ...]:
    """An attention call's coordinates in the ``attention`` tables (``seq`` in whole tiles,
    :func:`tiled_sequence`)."""
    return (_log2(batch_heads), _log2(seq), _log2(head_dim), 4.0 if causal else 0.0)


def classify(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> OpWork:
    """The work of one aten operator call (a view or an allocation launches nothing)."""
    packet = getattr(func, "overloadpacket", None)
    name = packet.__name__ if packet is not None else str(func)
    label = f"aten.{name}"
    moved = operator_bytes(func, args, kwargs, out)
    dtype = _dtype_of(args, out)
    if name in _SYNCS:
        return OpWork(label, "mem_copy", (_log2(moved or 1),), dtype, 0.0, float(moved or 0),
                      "copy", syncs=True)
    if _writes_nothing(out):  # PyTorch launches no kernel for an empty result (a batch of 0)
        return OpWork(label, None, (), dtype, 0.0, 0.0, VIEW)
    if name in _GEMM or name in _BMM:
        table, features, flops = _gemm_features(name, args)
        return OpWork(label, table, features, dtype, flops, float(moved or 0), "gemm")
    if name in _GROUPED_GEMM and len(args) > 1 and args[0].dim() == 2 and args[1].dim() == 3:
        # all the rows' work at the achieved rate of one expert's product (the ``grouped_gemm``
        # rows; older calibrations: a layer's product of one expert's rows): the rows split
        # evenly over the experts (the meta device does not say how the router split them)
        a, b = args[0], args[1]
        m, k, n, experts = a.shape[0], a.shape[1], b.shape[2], b.shape[0]
        return OpWork(label, "grouped_gemm", grouped_gemm_features(experts, m, n, k,
                                                                   a.element_size()),
                      dtype, 2.0 * m * n * k, float(moved or 0), "grouped_gemm")
    if name == "convolution":
        out_shape = out.shape if isinstance(out, torch.Tensor) else None
        bias = _bias_addition(args, out, dtype)
        if _one_pixel_pointwise(args, out_shape):
            # a squeeze-and-excitation projection: (batch x in) @ (in x out), one GEMM
            batch, cin, cout = args[0].shape[0], args[1].shape[1], args[1].shape[0]
            return OpWork(label, "gemm", gemm_features(batch, cout, cin, args[0].element_size()),
                          dtype, 2.0 * batch * cin * cout, float(moved or 0), "conv",
                          prelude=bias)
        features, flops = _conv(args, out_shape)
        copy = _channels_last_weight(args, dtype)
        if copy is not None:  # both kernels besides cuDNN's: the bias addition after the copy
            bias = copy if bias is None else dataclasses.replace(bias, prelude=copy)
        return OpWork(label, "conv", features, dtype, flops, float(moved or 0), "conv",
                      prelude=bias)
    if name == "convolution_backward":
        grad, x, weight = args[0], args[1], args[2]
        conv_args = (x, weight, None, *args[4:7], args[7], args[8], args[9])
        features, flops = _conv(conv_args, grad.shape)
        mask = args[10] if len(args) > 10 else (True, True, True)
        share = (0.5 if mask[0] else 0.0) + (0.5 if mask[1] else 0.0)
        return OpWork(label, "conv_backward", features, dtype, 2.0 * flops * share,
                      float(moved or 0), "conv")
    if name in _ATTENTION or name in _ATTENTION_BACKWARD:
        q = args[0] if name in _ATTENTION else args[1]
        position = _CAUSAL_ARGUMENT.get(name)
        causal = bool(args[position]) if position is not None and len(args) > position \
            else bool(kwargs.get("is_causal", False))
        b, h, s, d = q.shape
        table = "attention" if name in _ATTENTION else "attention_backward"
        tiled = tiled_sequence(s, table, dtype)  # the kernels compute whole tiles
        flops = 4.0 * b * h * tiled * tiled * d * (2.5 if table == "attention_backward" else 1.0)
        return OpWork(label, table, attention_features(b * h, tiled, d, causal), dtype,
                      flops, float(moved or 0), "attention")
    if moved is None:
        return OpWork(label, None, (), dtype, 0.0, 0.0, VIEW)
    kind = _access_kind(_memory_kind(name, args), name, args, out)
    moved = _priced_bytes(kind, name, args, out, moved)
    features = (_log2(moved), _log2(row_width(name, args))) if kind in WIDTH_TABLES \
        else (_log2(moved),)
    prelude = _contiguous_copy(args[0], dtype) if name in _CONTIGUOUS_INPUT and args else None
    if name == "_safe_softmax" and args:
        prelude = _safe_softmax_masking(args[0], row_width(name, args), dtype)
    return OpWork(label, kind, features, dtype, 0.0, float(moved),
                  _OWN_HOST.get(name) or _MEMORY_HOST[kind], by_rule=name not in _CLASSED,
                  prelude=prelude)


def _safe_softmax_masking(scores: Any, width: float, dtype: str) -> OpWork | None:
    """The kernels ``_safe_softmax`` (unfused attention's softmax) runs besides the softmax, to
    give rows of nothing but ``-inf`` zeros instead of NaNs: which elements are ``-inf``
    (``isneginf``: the scores read, one byte each written), whether all of a row's are
    (``all``: those bytes read, one per row written), and the softmax's output with such
    rows zeroed (``where``: the output read and written, the row flags broadcast over it)."""
    if not isinstance(scores, torch.Tensor):
        return None
    elements, size = scores.numel(), scores.element_size()
    rows = elements / max(width, 1.0)
    flags = OpWork("aten.isneginf", "mem_unary", (_log2(elements * (size + 1)),), dtype, 0.0,
                   float(elements * (size + 1)), "unary")
    rows_all = OpWork("aten.all", "mem_reduction", (_log2(elements + rows),), dtype, 0.0,
                      float(elements + rows), "reduction", prelude=flags)
    where_bytes = 2 * elements * size + rows
    return OpWork("aten.where", "mem_broadcast", (_log2(where_bytes),), dtype, 0.0,
                  float(where_bytes), "binary", prelude=rows_all)


_CONTIGUOUS_INPUT = {"native_layer_norm"}
"""Operators whose CUDA kernel makes a strided input contiguous first, a copy of its own (on
the meta device no copy is seen): a layer norm of tokens transposed from channels, as an MLP
mixer's token-mixing block hands its residual stream over."""


def _contiguous_copy(source: Any, dtype: str) -> OpWork | None:
    """The copy making ``source`` contiguous (its elements read, then written in order), or
    ``None`` where it already is, or where the meta device cannot tell: a 4-d input (an image
    permuted to channels last, as ConvNeXt's norms take it) comes from a convolution, whose
    output the meta device lays out contiguous where a GPU keeps its input's channels-last
    layout (the permuted image is then contiguous on the GPU)."""
    if not isinstance(source, torch.Tensor) or source.is_contiguous() or source.dim() > 3:
        return None
    target = torch.empty(source.shape, dtype=source.dtype, device="meta")
    kind = _access_kind("mem_transpose_copy", "clone", (source,), target)
    moved = 2 * source.numel() * source.element_size()
    return OpWork("aten.contiguous", kind, (_log2(moved),), dtype, 0.0, float(moved),
                  _MEMORY_HOST[kind])


_WIDTH_ARGUMENTS = {"native_layer_norm": 1, "_fused_rms_norm": 1, "native_layer_norm_backward": 2,
                    "_fused_rms_norm_backward": 2}
"""Where a norm takes its normalised shape."""
_SOFTMAX_DIM = {"_softmax": 1, "_log_softmax": 1, "_safe_softmax": 1,
                "_softmax_backward_data": 2}
"""Where a softmax takes the dimension it reduces."""
_GROUP_NORM = {"native_group_norm": 4, "native_group_norm_backward": 6}
"""Where a group norm takes its channels (then the pixels, then the groups)."""


def row_width(name: str, args: tuple[Any, ...]) -> float:
    """The length of the rows a norm or softmax reduces (:data:`DEFAULT_WIDTH` when the call
    does not say)."""
    try:
        if name in _WIDTH_ARGUMENTS:
            return float(math.prod(args[_WIDTH_ARGUMENTS[name]]))
        if name in _SOFTMAX_DIM:
            return float(args[0].shape[args[_SOFTMAX_DIM[name]]])
        if name in _GROUP_NORM:
            at = _GROUP_NORM[name]
            return float(args[at]) * float(args[at + 1]) / max(1.0, float(args[at + 2]))
    except (IndexError, TypeError, AttributeError):
        pass
    return float(DEFAULT_WIDTH)


def _writes_nothing(out: Any) -> bool:
    """Whether every tensor ``out`` holds is empty (and it holds one): TensorIterator's kernels,
    cuBLAS's and cuDNN's callers in PyTorch return before launching for an empty result,
    whatever the inputs (an ``addmm`` of 0 rows, a convolution of a batch of 0)."""
    tensors = list(iter_tensors(out))
    return bool(tensors) and all(tensor.numel() == 0 for tensor in tensors)


def _first_tensor(value: Any) -> torch.Tensor | None:
    return next(iter_tensors(value), None)


def _priced_bytes(kind: str, name: str, args: tuple[Any, ...], out: Any, moved: int) -> int:
    """The bytes a memory-bound operator is priced on: its traffic, except for a gather (the
    rows it returns, read once and written once, and its indices: never the whole table) and
    the elementwise kernels of :data:`_PER_ELEMENT`."""
    result = _first_tensor(out)
    if result is None:
        return moved
    out_bytes = result.numel() * result.element_size()
    if name in ROW_GATHERS:
        indices = sum(t.numel() * t.element_size() for t in iter_tensors(args)
                      if not t.is_floating_point())
        return 2 * out_bytes + indices
    if kind in _PER_ELEMENT:
        return 2 * out_bytes
    return moved


def _dense(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` covers a block of memory without gaps or overlaps, in any order of
    its dimensions (contiguous, or a permutation of a contiguous tensor)."""
    expected = 1
    for stride, size in sorted((s, n) for s, n in zip(tensor.stride(), tensor.shape) if n != 1):
        if stride != expected:
            return False
        expected *= size
    return True


def _same_layout(tensor: torch.Tensor, like: torch.Tensor) -> bool:
    """Whether ``tensor`` has ``like``'s shape and strides (strides of size-1 dimensions,
    which no element uses, aside)."""
    return tensor.shape == like.shape and all(
        a == b for a, b, n in zip(tensor.stride(), like.stride(), like.shape) if n != 1)


def _access_kind(kind: str, name: str, args: tuple[Any, ...], out: Any) -> str:
    """The table of an elementwise, copy or concatenation ``kind`` as its operands' layout
    asks: PyTorch's vectorised kernels need every operand contiguous and of the output's
    shape; a broadcast or permuted operand, a copy of a permuted or transposed tensor, one that
    changes the dtype and a concatenation of permuted tensors run other, slower kernels,
    calibrated apart."""
    result = _first_tensor(out)
    if result is None or result.is_nested or any(t.is_nested for t in iter_tensors(args)):
        # a nested tensor (a TransformerEncoder's fast path over padded rows) has no strides
        # to read: its components are packed in one buffer, read as the kind's own kernel
        return kind
    if kind in ("mem_unary", "mem_binary"):
        operands = [t for t in iter_tensors(args) if t.numel() > 1]
        if _dense(result) and all(_same_layout(t, result) for t in operands):
            return kind  # one layout (contiguous or all permuted alike): vectorised
        if result.is_contiguous() and all(t.is_contiguous() for t in operands):
            return "mem_broadcast"
        return "mem_strided"
    if kind == "mem_cat":
        tensors = [t for t in iter_tensors(args[0] if args else ()) if t.numel() > 0]
        if all(t.is_contiguous() for t in tensors):
            return kind
        dim = args[1] if len(args) > 1 else 0
        inner = isinstance(dim, int) and dim in (-1, result.dim() - 1)
        return "mem_strided_inner_cat" if inner else "mem_strided_cat"
    if kind in ("mem_copy", "mem_transpose_copy"):
        source = args[1] if name == "copy_" and len(args) > 1 else args[0] if args else None
        if not isinstance(source, torch.Tensor):
            return kind
        target = args[0] if name == "copy_" else result
        if source.is_contiguous() and target.is_contiguous():
            return "mem_convert" if source.dtype != target.dtype else "mem_copy"
        if source.dim() and source.stride(-1) != 1 and source.numel() > source.shape[-1]:
            return "mem_transpose_copy"
        return "mem_permute_copy"
    return kind


def _memory_kind(name: str, args: tuple[Any, ...]) -> str:
    if name in _COPY:
        source = args[1] if name == "copy_" and len(args) > 1 else args[0] if args else None
        if isinstance(source, torch.Tensor) and not source.is_contiguous():
            return "mem_transpose_copy"
    return _CLASSED.get(name, "mem_unary")  # the elementwise rule by bytes: also unlisted ones
