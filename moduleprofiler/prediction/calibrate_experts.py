"""Micro-benchmarks of a mixture-of-experts layer's kernels, which no dense table times: rows of
their own tables (older calibrations without them still predict, from the tables named in
:data:`~moduleprofiler.prediction.device_model._FALLBACK`).

* ``grouped_gemm``: ``torch._grouped_mm`` of every expert's rows times its own transposed
  weight in one kernel (``[experts, rows per expert, n, k, us]``); the rows split evenly over
  the experts. The kernel runs each expert's slice as its own product, so its achieved rate is
  that of one expert's shape, not of all the rows at once (Mixtral's layout at batch 8 x 128
  tokens on an H200: 1.8x the time of one dense product of all the rows);
* ``mem_sort``: ``torch.sort`` of the flat expert ids (``[bytes, us]``), which routing runs to
  group the tokens by expert: several passes of a radix sort, tens of µs where a unary kernel
  of its bytes takes 2;
* ``mem_topk``: ``torch.topk`` of a router's scores, 2 of 8 or of 64 experts a token
  (``[bytes, us]``).

Each ``*_shapes`` function also names held-out shapes (``held_out=True``): shapes off the grid
that prove the rows cover their class.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from moduleprofiler.efficiency.traffic import operator_bytes
from moduleprofiler.prediction.calibrate_kernels import _SweepLike

GroupedShape = tuple[int, int, int, int]
"""(experts, rows per expert, output width n, input width k)."""

EXPERTS: tuple[int, ...] = (8, 32)
EXPERT_ROWS: tuple[int, ...] = tuple(2 ** i for i in range(4, 13))
"""Rows an expert: every power of two from 16 to 4,096 (a grouped kernel's time grows in
steps with its tiles, which a sparser grid interpolates across)."""
EXPERT_WIDTHS: tuple[tuple[int, int], ...] = ((2048, 1024), (1024, 2048), (5632, 1024),
                                              (1024, 2816))
"""(n, k) of the grouped rows: an expert's up and down projections, aligned and not."""
EXPERTS_HELD_OUT: tuple[int, ...] = (16,)
EXPERT_ROWS_HELD_OUT: tuple[int, ...] = (48, 768)
EXPERT_WIDTHS_HELD_OUT: tuple[tuple[int, int], ...] = ((3072, 1536), (1536, 3072))
SORT_SIZES: tuple[int, ...] = tuple(2 ** i for i in range(6, 23, 2))
"""Expert ids sorted: 64 to 4M (tokens times experts a token)."""
SORT_SIZES_HELD_OUT: tuple[int, ...] = (768, 24576, 393216)
TOPK_ROWS: tuple[int, ...] = tuple(2 ** i for i in range(4, 21, 2))
"""Tokens routed: 16 to 1M, over 8 and over 64 experts, 2 chosen."""
TOPK_ROWS_HELD_OUT: tuple[int, ...] = (96, 6144, 98304)


def grouped_shapes(held_out: bool = False) -> list[GroupedShape]:
    """The ``grouped_gemm`` rows' shapes (``held_out``: the held-out ones)."""
    experts = EXPERTS_HELD_OUT if held_out else EXPERTS
    rows = EXPERT_ROWS_HELD_OUT if held_out else EXPERT_ROWS
    widths = EXPERT_WIDTHS_HELD_OUT if held_out else EXPERT_WIDTHS
    return [(e, r, n, k) for e in experts for r in rows for n, k in widths]


def grouped_bench(shape: GroupedShape, device: torch.device,
                  dtype: torch.dtype) -> Callable[[], Any]:
    """One grouped product of ``shape``: ``experts * rows`` rows of width ``k``, each expert's
    rows times its ``(n, k)`` weight transposed, as a mixture-of-experts layer calls it."""
    experts, rows, n, k = shape
    a = torch.randn(experts * rows, k, device=device, dtype=dtype)
    weight = torch.randn(experts, n, k, device=device, dtype=dtype)
    offsets = torch.arange(1, experts + 1, device=device, dtype=torch.int32) * rows
    return lambda: torch._grouped_mm(a, weight.transpose(-2, -1), offsets)


def _sort_operands(numel: int, device: torch.device) -> tuple[torch.Tensor]:
    return (torch.randint(0, 8, (numel,), device=device),)


def _topk_operands(rows: int, experts: int, device: torch.device,
                   dtype: torch.dtype) -> tuple[torch.Tensor, int]:
    return torch.randn(rows, experts, device=device, dtype=dtype), 2


def _bytes(func: Any, args: tuple[Any, ...]) -> int:
    """What the prediction counts an operator moving (its operands and results), from a
    call on the meta device: the rows' bytes are the operators' own."""
    moved = operator_bytes(func, args, {}, func(*args))
    if moved is None:
        raise ValueError(f"{func} has no bytes on the meta device")
    return int(moved)


def routing_rows(held_out: bool, dtype: torch.dtype) -> list[tuple[str, int, Callable[
        [torch.device], tuple[Any, ...]]]]:
    """``(table, bytes, operands maker)`` of the ``mem_sort`` and ``mem_topk`` rows."""
    meta = torch.device("meta")
    found: list[tuple[str, int, Callable[[torch.device], tuple[Any, ...]]]] = []
    for numel in SORT_SIZES_HELD_OUT if held_out else SORT_SIZES:
        make = functools.partial(_sort_operands, numel)
        found.append(("mem_sort", _bytes(torch.ops.aten.sort.default, make(meta)), make))
    for experts in (8, 64):
        for rows in TOPK_ROWS_HELD_OUT if held_out else TOPK_ROWS:
            maker = functools.partial(_topk_operands, rows, experts, dtype=dtype)
            found.append(("mem_topk", _bytes(torch.ops.aten.topk.default, maker(meta)),
                          maker))
    return found


def _routing_bench(table: str, make: Callable[[torch.device], tuple[Any, ...]],
                   device: torch.device) -> Callable[[], Any]:
    args = make(device)
    func = torch.ops.aten.sort.default if table == "mem_sort" else torch.ops.aten.topk.default
    return lambda: func(*args)


def expert_tables(sweep: _SweepLike, device: torch.device, dtype: torch.dtype,
                  held_out: bool = False) -> dict[str, list[list[float]]]:
    """Measure the rows of the module docstring (``held_out``: the held-out shapes instead)
    on ``device`` in ``dtype``: ``{table: rows}``."""
    shapes = grouped_shapes(held_out)
    for shape in shapes:
        sweep.add(f"grouped:{shape}", functools.partial(grouped_bench, shape, device, dtype))
    routing = routing_rows(held_out, dtype)
    for table, nbytes, make in routing:
        sweep.add(f"{table}:{nbytes}", functools.partial(_routing_bench, table, make, device))
    times = sweep.run()
    tables: dict[str, list[list[float]]] = {
        "grouped_gemm": [[*shape, times[f"grouped:{shape}"]] for shape in shapes]}
    for table, nbytes, _ in routing:
        tables.setdefault(table, []).append([nbytes, times[f"{table}:{nbytes}"]])
    return tables
