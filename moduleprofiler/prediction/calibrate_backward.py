"""The training step's own micro-benchmarks, measured by
:func:`~moduleprofiler.prediction.calibrate` beside the forward's: matrix products in the three
layouts a backward runs them in, and the normalisation, pooling and bias-gradient kernels that
only a training step launches (:mod:`.backward_classes` says which operator each table times).

* ``gemm_grad_nn`` / ``gemm_grad_nt`` / ``gemm_grad_tn``: ``[m, n, k, us]`` of
  ``(m x k) @ (k x n)`` with the first (``t?``) or second (``?t``) operand stored
  transposed, on one grid that includes long reductions (a weight gradient reduces over every
  token) and vocabulary-sized widths in each of the three dimensions;
* ``mem_<kind>``: ``[bytes moved, us]`` for each of :data:`BACKWARD_MEMORY_KINDS`, the bytes
  counted as :func:`~moduleprofiler.efficiency.traffic.operator_bytes` counts the operator's.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from moduleprofiler.prediction.calibrate_kernels import (
    _SweepLike,
    add_memory,
    grad_bench,
    memory_rows,
    mm_bench,
)

GEMM_LAYOUTS: tuple[str, ...] = ("nn", "nt", "tn")
"""Which operand is stored transposed: neither, the second, the first."""

LAYOUT_DIMS: tuple[int, ...] = (128, 512, 768, 2304, 3072, 4096, 6304, 16384)
"""The aligned sizes of the layout grid (6304: 32 images of 197 tokens, a reduction length
no power of two reaches)."""
LAYOUT_UNALIGNED: tuple[int, ...] = (1000, 30522, 50257)
"""Widths no 16-byte row fits evenly (classes, vocabularies), set in one dimension at a time."""
LAYOUT_FLOP_CAP = 2 ** 38

BACKWARD_MEMORY_KINDS: tuple[str, ...] = ("batch_norm_train", "batch_norm_backward",
                                          "layer_norm_backward", "bias_grad",
                                          "max_pool_backward")
"""Memory-bound kernels of a training step: batch norm's training forward (batch statistics,
then the normalisation), batch and layer norm backward (a reduction over the saved input and the
gradient, then the input's gradient), a bias gradient (a sum over every row), max pooling's
backward (a scatter through the saved indices)."""


MEMORY_SIZES: tuple[int, ...] = tuple(2 ** i for i in range(10, 29, 2))
"""The element counts each memory kind is measured at."""


def layout_shapes(quick: bool) -> list[tuple[int, int, int]]:
    """The ``(m, n, k)`` shapes measured in each layout."""
    dims = LAYOUT_DIMS[::3] if quick else LAYOUT_DIMS
    shapes = [(m, n, k) for m in dims for n in dims for k in dims]
    around = (768, 4096, 16384)
    for odd in LAYOUT_UNALIGNED[::2] if quick else LAYOUT_UNALIGNED:
        for a in around:
            for b in around:
                shapes += [(odd, a, b), (a, odd, b), (a, b, odd)]
    return [s for s in dict.fromkeys(shapes) if 2 * s[0] * s[1] * s[2] <= LAYOUT_FLOP_CAP]


def _layout_operands(a_store: torch.Tensor, b_store: torch.Tensor, layout: str, m: int,
                     n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(m x k)`` and ``(k x n)`` views of the stores, stored as ``layout`` says."""
    a = a_store[:m * k].view(k, m).t() if layout[0] == "t" else a_store[:m * k].view(m, k)
    b = b_store[:k * n].view(n, k).t() if layout[1] == "t" else b_store[:k * n].view(k, n)
    return a, b


def add_gemms(sweep: _SweepLike, shapes: list[tuple[int, int, int]], device: torch.device,
              dtype: torch.dtype, layouts: dict[str, str]) -> None:
    """Add ``(m x k) @ (k x n)`` of every shape to ``sweep`` in every layout of ``layouts``
    (label prefix -> layout; labels ``<prefix>:m:n:k``), the operands views of two stores."""
    a_store = torch.randn(max(m * k for m, _, k in shapes), device=device, dtype=dtype)
    b_store = torch.randn(max(k * n for _, n, k in shapes), device=device, dtype=dtype)
    for name, layout in layouts.items():
        for m, n, k in shapes:
            a, b = _layout_operands(a_store, b_store, layout, m, n, k)
            sweep.add(f"{name}:{m}:{n}:{k}", functools.partial(mm_bench, a, b))


def backward_memory_bench(kind: str, numel: int, device: torch.device,
                          dtype: torch.dtype) -> tuple[Callable[[], Any], int]:
    """A benchmark of ``kind`` (:data:`BACKWARD_MEMORY_KINDS`) on about ``numel`` elements, and
    the bytes its operator reads and writes."""
    size = torch.tensor([], dtype=dtype).element_size()
    if kind in ("batch_norm_train", "batch_norm_backward"):
        # feature maps of 28 x 28 and 256 channels where they fit, as the forward's table
        batch = numel // (256 * 784)
        shape = (batch, 256, 28, 28) if batch else (1, max(1, numel // 784), 28, 28)
        x = torch.randn(shape, device=device, dtype=dtype,
                        requires_grad=kind == "batch_norm_backward")
        channels = shape[1]
        weight = torch.ones(channels, device=device, dtype=dtype, requires_grad=True)
        bias = torch.zeros(channels, device=device, dtype=dtype, requires_grad=True)
        mean, var = torch.zeros(channels, device=device, dtype=dtype), \
            torch.ones(channels, device=device, dtype=dtype)
        if kind == "batch_norm_train":
            return (lambda: F.batch_norm(x, mean, var, weight, bias, training=True)), \
                2 * x.numel() * size
        y = F.batch_norm(x, mean, var, weight, bias, training=True)
        return grad_bench(y, (x, weight, bias)), 3 * x.numel() * size
    rows = max(1, numel // 1024)
    x = torch.randn(rows, 1024, device=device, dtype=dtype,
                    requires_grad=kind == "layer_norm_backward")
    if kind == "layer_norm_backward":
        weight = torch.ones(1024, device=device, dtype=dtype, requires_grad=True)
        bias = torch.zeros(1024, device=device, dtype=dtype, requires_grad=True)
        y = F.layer_norm(x, (1024,), weight, bias)
        return grad_bench(y, (x, weight, bias)), 3 * x.numel() * size
    if kind == "bias_grad":
        return (lambda: x.sum(0, keepdim=True)), (x.numel() + 1024) * size
    if kind == "max_pool_backward":  # a stem's pooling: 3 x 3, stride 2, over 64 channels
        side = max(2, int((numel // 64) ** 0.5))
        images = torch.randn(1, 64, side, side, device=device, dtype=dtype, requires_grad=True)
        pooled = F.max_pool2d(images, 3, 2, 1)
        out = pooled.numel()
        # the gradient and the indices (int64) read, the input read, its gradient written
        return grad_bench(pooled, (images,)), out * (size + 8) + 2 * images.numel() * size
    raise ValueError(f"unknown backward memory kind {kind!r}")


def backward_tables(sweep: _SweepLike, device: torch.device, dtype: torch.dtype,
                    quick: bool) -> dict[str, list[list[float]]]:
    """Measure the training step's tables on ``device`` in ``dtype`` (see the module
    docstring): ``{table: rows}``."""
    shapes = layout_shapes(quick)
    add_gemms(sweep, shapes, device, dtype,
              {f"gemm_grad_{layout}": layout for layout in GEMM_LAYOUTS})
    times = sweep.run()
    tables: dict[str, list[list[float]]] = {
        f"gemm_grad_{layout}": [[m, n, k, times[f"gemm_grad_{layout}:{m}:{n}:{k}"]]
                           for m, n, k in shapes] for layout in GEMM_LAYOUTS}
    moved = add_memory(sweep, BACKWARD_MEMORY_KINDS, MEMORY_SIZES[::2] if quick else
                       MEMORY_SIZES, backward_memory_bench, device, dtype)
    return {**tables, **memory_rows(sweep.run(), moved)}

