"""What a training step's operators ask of a GPU where the forward's classes
(:func:`~moduleprofiler.prediction.op_classes.classify`) would misprice them: the tables of
:mod:`.calibrate_backward` that time them.

* A backward's matrix products run with an operand stored transposed: the input gradient
  ``grad @ W`` (or ``grad @ W.t()`` for a weight kept ``in x out``), the weight gradient
  ``grad.t() @ x``, which reduces over every token of the batch. cuBLAS picks other kernels for
  each layout, and a row whose bytes are no multiple of 16 keeps the fast ones out: the
  alignment is read from the *stored* rows (a vocabulary-sized weight gradient stores the
  vocabulary as its rows' length). Tables ``gemm_grad_nn`` / ``gemm_grad_nt`` / ``gemm_grad_tn``.
* Batch norm in training computes its batch statistics before normalising
  (``mem_batch_norm_train``); batch and layer norm backward reduce over the saved input and the
  gradient, then write the input's gradient (``mem_batch_norm_backward``,
  ``mem_layer_norm_backward``): each reads its tensors more than once, more slowly than a
  streaming kernel, so they are timed by their own tables, keyed by the bytes the operator reads
  and writes (:func:`~moduleprofiler.efficiency.traffic.operator_bytes`).
  A batch norm spreads its channels' reductions over the streaming multiprocessors, one
  channel to one: with fewer channels than the device has, the others idle, and it takes as
  long as one of as many channels as SMs (:class:`ChannelWork`).
* A bias gradient sums a gradient over its rows, keeping the last dimension: a column reduction
  (``mem_bias_grad``), slower per byte than the row reduction ``mem_reduction`` times; so does
  a sum keeping only an image's channels, and the sum a convolution's backward runs for its
  bias (the meta device shows none: it is the backward's prelude).
* Max pooling's backward scatters through the saved indices (``mem_max_pool_backward``).

A calibration made before these tables existed times the operators by the forward's tables
(:data:`FALLBACK`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from moduleprofiler.prediction.op_classes import GEMM_TABLES, OpWork, _log2, classify

GEMM_LAYOUT_TABLES = frozenset({"gemm_grad_nn", "gemm_grad_nt", "gemm_grad_tn"})
"""The tables of a backward's matrix products, by which operand is stored transposed."""

FALLBACK: dict[str, str] = {
    "gemm_grad_nn": "gemm", "gemm_grad_nt": "gemm", "gemm_grad_tn": "gemm",
    "mem_batch_norm_train": "mem_batch_norm_2d", "mem_batch_norm_backward": "mem_batch_norm_2d",
    "mem_layer_norm_backward": "mem_layer_norm", "mem_bias_grad": "mem_reduction",
    "mem_max_pool_backward": "mem_reduction"}
"""The table that times a training step's operator where a calibration lacks its own."""

_BATCH_NORM = frozenset({"native_batch_norm", "_native_batch_norm_legit", "cudnn_batch_norm",
                         "_native_batch_norm_legit_functional", "miopen_batch_norm"})
_BATCH_NORM_BACKWARD = frozenset({"native_batch_norm_backward", "cudnn_batch_norm_backward",
                                  "miopen_batch_norm_backward"})
_LAYER_NORM_BACKWARD = frozenset({"native_layer_norm_backward", "_fused_rms_norm_backward"})
_MATMUL = frozenset({"mm", "addmm"})


@dataclass(frozen=True)
class ChannelWork(OpWork):
    """A batch norm's work: an :class:`OpWork` that knows its channels, over which its
    kernels spread their reductions, a channel to a streaming multiprocessor."""

    channels: int = 0

    def spread_over(self, sms: int) -> OpWork:
        """The work as a device of ``sms`` streaming multiprocessors times it: with fewer
        channels than SMs, that of ``sms`` channels of the same size (the idle SMs' share is
        time, not work); else the work itself."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(OpWork)}
        if 0 < self.channels < sms:
            moved = self.moved_bytes * sms / self.channels
            fields.update(moved_bytes=moved, features=(_log2(moved),))
        return OpWork(**fields)


def stored_transposed(matrix: torch.Tensor) -> bool:
    """Whether the 2-D ``matrix`` is the transpose of a row-major one (a column-major view,
    as ``weight.t()``): cuBLAS reads it as stored, transposed."""
    return (not matrix.is_contiguous() and matrix.dim() == 2
            and matrix.t().is_contiguous())


def layout_gemm_features(m: float, n: float, k: float, element_size: int,
                         layout: str) -> tuple[float, ...]:
    """A matrix product's coordinates in a ``gemm_<layout>`` table: its three sizes, and
    whether a stored row of an operand or of the output misses 16-byte alignment (set far
    apart). ``layout``: ``"nn"``, ``"nt"`` or ``"tn"``, which operand is stored transposed;
    the rows stored are ``k`` long for ``A`` as given, ``m`` for ``A`` transposed, ``n`` for
    ``B`` as given, ``k`` for ``B`` transposed, and ``n`` for the output."""
    rows = (k if layout[0] == "n" else m, n if layout[1] == "n" else k, n)
    misaligned = any((length * element_size) % 16 != 0 for length in rows)
    return _log2(m), _log2(n), _log2(k), 6.0 if misaligned else 0.0


def _training_flag(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """The ``training`` argument of a batch norm call (found by name in its schema)."""
    schema = getattr(func, "_schema", None)
    for position, argument in enumerate(schema.arguments if schema is not None else ()):
        if argument.name == "training":
            value = args[position] if position < len(args) else kwargs.get("training")
            return bool(value)
    return False


def _reduces_rows_only(args: tuple[Any, ...]) -> bool:
    """Whether a ``sum`` call keeps its input's last dimension (a column reduction), or only
    the channels of an image (dimension 1 of 3 or more: a convolution's bias or a per-channel
    scale's gradient, which runs as slowly as the column reduction of as many bytes)."""
    source = args[0] if args else None
    dims = args[1] if len(args) > 1 else None
    if not isinstance(source, torch.Tensor) or source.dim() < 2 or not dims:
        return False
    last = source.dim() - 1
    reduced = {d % source.dim() for d in (dims if isinstance(dims, (list, tuple)) else (dims,))}
    channels_only = source.dim() >= 3 and reduced == set(range(source.dim())) - {1}
    return last not in reduced or channels_only


def _bias_gradient(args: tuple[Any, ...], dtype: str) -> OpWork | None:
    """The sum a convolution's backward runs for its bias's gradient (the output gradient
    summed over all but its channels; the meta device shows no such kernel), or ``None``
    without a bias."""
    grad = args[0] if args else None
    mask = args[10] if len(args) > 10 else (True, True, True)
    if not isinstance(grad, torch.Tensor) or grad.dim() < 3 or args[3] is None or \
            not mask[2]:
        return None
    moved = (grad.numel() + grad.shape[1]) * grad.element_size()
    return OpWork("aten.sum", "mem_bias_grad", (_log2(moved),), dtype, 0.0, float(moved),
                  "reduction")


def _layout_work(work: OpWork, name: str, args: tuple[Any, ...]) -> OpWork:
    a, b = (args[0], args[1]) if name == "mm" else (args[1], args[2])
    layout = ("t" if stored_transposed(a) else "n") + ("t" if stored_transposed(b) else "n")
    if layout == "tt":  # no such table: cuBLAS computes (B A)^T in the "nn" layout
        layout = "nn"
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    return dataclasses.replace(work, table=f"gemm_grad_{layout}", features=layout_gemm_features(
        m, n, k, a.element_size(), layout))


def training_work(work: OpWork, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                  backward: bool) -> OpWork:
    """``work`` (``classify``'s) retimed by a training step's table where one fits (the
    module docstring): a backward operator's (``backward``), or batch norm's in training."""
    name = work.name.removeprefix("aten.")
    table = None
    if name in _BATCH_NORM and _training_flag(func, args, kwargs):
        table = "mem_batch_norm_train"
    elif not backward:
        return work
    elif name in _MATMUL and work.table in GEMM_TABLES:
        return _layout_work(work, name, args)
    elif name == "convolution_backward":
        bias = _bias_gradient(args, work.dtype)
        return work if bias is None else dataclasses.replace(work, prelude=bias)
    elif name in _BATCH_NORM_BACKWARD:
        table = "mem_batch_norm_backward"
    elif name in _LAYER_NORM_BACKWARD:
        table = "mem_layer_norm_backward"
    elif name == "sum" and _reduces_rows_only(args):
        table = "mem_bias_grad"
    elif name == "max_pool2d_with_indices_backward":
        table = "mem_max_pool_backward"
    if table is None or work.table is None:
        return work
    if table.startswith("mem_batch_norm"):
        # the input: a forward's first argument, a backward's second (after the gradient)
        source = args[1 if backward else 0] if len(args) > 1 else None
        channels = int(source.shape[1]) if isinstance(source, torch.Tensor) and \
            source.dim() > 1 else 0
        fields = {f.name: getattr(work, f.name) for f in dataclasses.fields(OpWork)}
        return ChannelWork(**{**fields, "table": table}, channels=channels)
    return dataclasses.replace(work, table=table)


def step_work(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any,
              backward: bool) -> OpWork:
    """The work of one aten operator call of a pass, forward or ``backward``: its forward
    class (:func:`~moduleprofiler.prediction.op_classes.classify`), retimed by a training
    step's table where one fits (:func:`training_work`)."""
    return training_work(classify(func, args, kwargs, out), func, args, kwargs, backward)
