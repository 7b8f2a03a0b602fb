"""Micro-benchmarks of shapes off the main grids' powers of two, where other kernels run: rows
added to the tables that time them (older calibrations without them still predict, from their
rows, and say what they did not measure).

* batched products whose rows miss 16-byte alignment (``bmm``: attention over 25 to 401 tokens,
  odd or twice an odd number, so misaligned in fp32 and bf16): cuBLAS leaves its vectorised
  kernels for them;
* layers' matrix products with an input or output width that misses the alignment
  (``gemm_nt``, ``gemm_bias_nt``: 50 to 602 wide, as a token-mixing layer over 196 patches);
* grouped convolutions over channel counts no power of two, few groups among them (``conv`` /
  ``conv_backward``, group widths 8 to 64, 2 to 12 groups: cuDNN's fp32 kernels for few groups
  are erratic);
* channels-first depthwise convolutions over channel counts no power of two (3 x 3 and 5 x 5);
* grouped convolutions whose group width is no power of two (24 and 48, 2 to 37 groups).

Each ``*_shapes`` function also names held-out shapes (``held_out=True``): shapes off the grid
that prove the rows cover their class.
"""

from __future__ import annotations

import functools

import torch

from moduleprofiler.prediction.calibrate import _ColdPool, _linear_bench
from moduleprofiler.prediction.calibrate_kernels import (
    BmmShape,
    ConvShape,
    _SweepLike,
    add_passes,
    bmm_bench,
    bmm_shapes,
    conv_bench,
    pass_rows,
    within_cap,
)

MISALIGNED_SEQS: tuple[int, ...] = (25, 37, 50, 61, 81, 101, 151, 226, 301, 401)
"""Sequence lengths of the ``bmm`` rows: each odd or twice an odd number, so a row of them
misses 16-byte alignment in fp32 (4 bytes) and in bf16 (2 bytes)."""
MISALIGNED_SEQS_HELD_OUT: tuple[int, ...] = (49, 98, 197)
MISALIGNED_WIDTHS: tuple[int, ...] = (50, 75, 98, 150, 226, 302, 450, 602)
"""Layer widths of the ``gemm_nt`` / ``gemm_bias_nt`` rows, misaligned in fp32 and bf16."""
MISALIGNED_WIDTHS_HELD_OUT: tuple[int, ...] = (196, 258)
"""Held out: 196 (a token-mixing layer over 14 x 14 patches: misaligned in bf16 only) and 258."""
GROUP_WIDTHS: tuple[int, ...] = (8, 16, 32, 64)
GROUP_COUNTS: tuple[int, ...] = (2, 3, 5, 6, 12)
"""Grouped convolutions measured: every group width with every group count (channels their
product, 16 to 768: no power of two among most)."""
GROUP_WIDTHS_HELD_OUT: tuple[int, ...] = (24, 48)
GROUP_COUNTS_HELD_OUT: tuple[int, ...] = (2, 5, 14)
ODD_GROUP_WIDTHS: tuple[int, ...] = (24, 48)
ODD_GROUP_COUNTS: tuple[int, ...] = (2, 3, 5, 9, 14, 24, 37)
"""Grouped convolutions whose group width is no power of two (a RegNet's 24 and 48, over 2 to
37 groups): cuDNN runs them 1.4 to 1.8x slower than the powers of two around them predict."""
ODD_GROUP_WIDTHS_HELD_OUT: tuple[int, ...] = (40, 56, 72)
ODD_GROUP_COUNTS_HELD_OUT: tuple[int, ...] = (4, 11, 28)
DEPTHWISE_CHANNELS: tuple[int, ...] = (24, 40, 96, 160, 384, 640, 1536)
DEPTHWISE_CHANNELS_HELD_OUT: tuple[int, ...] = (72, 240, 672)
LARGE_DEPTHWISE_CHANNELS: tuple[int, ...] = (448, 896, 1280, 1792)
"""Depthwise convolutions over many channels no power of two on few pixels (7 x 7, 14 x 14),
where cuDNN's backward runs 1.4x slower than the powers of two around them predict."""
LARGE_DEPTHWISE_CHANNELS_HELD_OUT: tuple[int, ...] = (576, 1344)
POINTWISE_ODD_CHANNELS: tuple[int, ...] = (24, 40, 72, 120, 200, 336, 576, 960)
"""Pointwise convolutions' channel counts no power of two (the kernel-choice rows' own, which
measure batches 1, 8 and 64 on 7 to 56 pixels a side): measured again at batch 16 and on
112 pixels a side."""
POINTWISE_ODD_CHANNELS_HELD_OUT: tuple[int, ...] = (48, 144, 480)
LinearShape = tuple[int, int, int]
"""(rows, output width, input width) of ``x @ w.T``."""


def misaligned_bmm_shapes(held_out: bool = False) -> list[tuple[str, BmmShape]]:
    """Attention-shaped batched products over misaligned sequences, as
    :func:`~.calibrate_kernels.bmm_shapes` lays them out (scores, then context)."""
    return bmm_shapes(held_out, MISALIGNED_SEQS_HELD_OUT if held_out else MISALIGNED_SEQS)


def misaligned_linear_shapes(held_out: bool = False) -> list[LinearShape]:
    """Layers' products with the input or the output width misaligned, the other one
    aligned."""
    widths = MISALIGNED_WIDTHS_HELD_OUT if held_out else MISALIGNED_WIDTHS
    rows = (512, 2048, 8192) if held_out else (256, 1024, 4096, 16384)
    aligned = (384, 1536) if held_out else (256, 768, 2048)
    shapes: list[LinearShape] = []
    for m in rows:
        for odd in widths:
            for even in aligned:
                shapes += [(m, odd, even), (m, even, odd)]
    return shapes


_SIDES: tuple[tuple[int, int], ...] = (
    (7, 1), (14, 1), (28, 1), (56, 1), (28, 2), (56, 2), (112, 2))
"""Input side and stride of the convolutions measured (stride 2 not at batch 1)."""


def _grouped_shapes(widths: tuple[int, ...], counts: tuple[int, ...]) -> list[ConvShape]:
    """Grouped 3 x 3 convolutions of every width in ``widths`` with every count in
    ``counts``, at batches 1, 8 and 64 over :data:`_SIDES` (not capped)."""
    return [(n, width * groups, width * groups, h, 3, stride, groups, 0)
            for n in (1, 8, 64) for h, stride in _SIDES if not (stride == 2 and n == 1)
            for width in widths for groups in counts]


def odd_conv_shapes(held_out: bool = False) -> list[ConvShape]:
    """Grouped 3 x 3 convolutions over :data:`GROUP_WIDTHS` x :data:`GROUP_COUNTS` channels
    and channels-first depthwise 3 x 3 and 5 x 5 ones over :data:`DEPTHWISE_CHANNELS`
    (``held_out``: the ``_HELD_OUT`` widths, counts and channels)."""
    widths = GROUP_WIDTHS_HELD_OUT if held_out else GROUP_WIDTHS
    counts = GROUP_COUNTS_HELD_OUT if held_out else GROUP_COUNTS
    depthwise = DEPTHWISE_CHANNELS_HELD_OUT if held_out else DEPTHWISE_CHANNELS
    shapes = _grouped_shapes(widths, counts) + [
        (n, c, c, h, kernel, stride, c, 0)
        for n in (8, 64) for h, stride in _SIDES for c in depthwise for kernel in (3, 5)]
    return within_cap(shapes)


def odd_group_shapes(held_out: bool = False) -> list[ConvShape]:
    """Grouped 3 x 3 convolutions over :data:`ODD_GROUP_WIDTHS` x :data:`ODD_GROUP_COUNTS`
    (``held_out``: the ``_HELD_OUT`` widths and counts, widths no power of two either)."""
    if held_out:
        return within_cap(_grouped_shapes(ODD_GROUP_WIDTHS_HELD_OUT, ODD_GROUP_COUNTS_HELD_OUT))
    return within_cap(_grouped_shapes(ODD_GROUP_WIDTHS, ODD_GROUP_COUNTS))


def dense_conv_shapes(held_out: bool = False) -> list[ConvShape]:
    """Channels-first depthwise convolutions over :data:`LARGE_DEPTHWISE_CHANNELS` on 7 and
    14 pixels a side, and pointwise ones over :data:`POINTWISE_ODD_CHANNELS` at batch 16 and
    on 112 pixels a side: regions the other rows leave sparse (``held_out``: the
    ``_HELD_OUT`` channels)."""
    large = LARGE_DEPTHWISE_CHANNELS_HELD_OUT if held_out else LARGE_DEPTHWISE_CHANNELS
    odd = POINTWISE_ODD_CHANNELS_HELD_OUT if held_out else POINTWISE_ODD_CHANNELS
    shapes: list[ConvShape] = []
    for n in (8, 16, 64):
        for c in large:
            for h in (7, 14):
                for kernel in (3, 5, 7):
                    for stride in (1, 2):
                        shapes.append((n, c, c, h, kernel, stride, c, 0))
    for n, sides in ((16, (7, 14, 28, 56, 112)), (8, (112,)), (64, (112,))):
        for h in sides:
            for c in odd:
                for out in {max(8, c // 6 // 8 * 8), c, min(1152, 6 * c)}:
                    shapes.append((n, c, out, h, 1, 1, 1, 0))
    return within_cap(shapes)


LINEAR_ROWS_DENSE: tuple[int, ...] = (512, 1536, 3072, 6144, 12288)
LINEAR_WIDTHS_DENSE: tuple[int, ...] = (384, 768, 1536, 3072, 6144)
"""Layers' products between the main grid's powers of two (its rows) and its widths (256 to
8192 without 768): a transformer's 768-wide layers over 8 x 197 tokens run TF32 kernels
20 to 30 % slower than the powers of two around them predict."""
LINEAR_ROWS_DENSE_HELD_OUT: tuple[int, ...] = (1200, 2400, 4800)
LINEAR_WIDTHS_DENSE_HELD_OUT: tuple[int, ...] = (640, 1280, 2560)


def dense_linear_shapes(held_out: bool = False) -> list[LinearShape]:
    """Layers' products at :data:`LINEAR_ROWS_DENSE` x :data:`LINEAR_WIDTHS_DENSE` squared
    (``held_out``: the ``_HELD_OUT`` sizes), all aligned."""
    rows = LINEAR_ROWS_DENSE_HELD_OUT if held_out else LINEAR_ROWS_DENSE
    widths = LINEAR_WIDTHS_DENSE_HELD_OUT if held_out else LINEAR_WIDTHS_DENSE
    return [(m, n, k) for m in rows for n in widths for k in widths]


PARTS: tuple[str, ...] = ("bmm", "conv", "linear", "dense_conv", "dense_linear", "odd_groups")
"""What :func:`odd_shape_tables` measures, each part apart."""


def odd_shape_tables(sweep: _SweepLike, device: torch.device, dtype: torch.dtype,
                     held_out: bool = False,
                     parts: tuple[str, ...] = PARTS) -> dict[str, list[list[float]]]:
    """Measure the rows of the module docstring (``held_out``: the held-out shapes instead)
    on ``device`` in ``dtype``: ``{table: rows}``, rows in the tables' formats (``bmm``:
    ``[b, m, n, k, us]``; ``gemm_nt`` / ``gemm_bias_nt``: ``[m, n, k, us]``; ``conv`` /
    ``conv_backward``: nine entries, the eighth ``0``, channels-first)."""
    tables: dict[str, list[list[float]]] = {}
    bmms = misaligned_bmm_shapes(held_out) if "bmm" in parts else []
    for pattern, shape in bmms:
        sweep.add(f"bmm:{pattern}:{shape}", functools.partial(bmm_bench, pattern, shape,
                                                              device, dtype))
    times = sweep.run()
    tables["bmm"] = [[*shape, times[f"bmm:{pattern}:{shape}"]] for pattern, shape in bmms]
    convs = (odd_conv_shapes(held_out) if "conv" in parts else []) + \
        (dense_conv_shapes(held_out) if "dense_conv" in parts else []) + \
        (odd_group_shapes(held_out) if "odd_groups" in parts else [])
    add_passes(sweep, "conv", convs, conv_bench, device, dtype)
    tables.update(pass_rows(sweep.run(), "conv", convs))
    linears = (misaligned_linear_shapes(held_out) if "linear" in parts else []) + \
        (dense_linear_shapes(held_out) if "dense_linear" in parts else [])
    # as the main grid measures layers: each call's weight read from memory, not a cache
    pool = _ColdPool(device, dtype)
    for table, bias in (("gemm_nt", False), ("gemm_bias_nt", True)):
        for m, n, k in linears:
            sweep.add(f"{table}:{(m, n, k)}", functools.partial(_linear_bench, m, n, k, pool,
                                                                True, bias))
    times = sweep.run()
    del pool
    for table in ("gemm_nt", "gemm_bias_nt"):
        tables[table] = [[*shape, times[f"{table}:{shape}"]] for shape in linears]
    return {name: rows for name, rows in tables.items() if rows}
