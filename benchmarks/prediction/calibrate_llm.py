"""Measure the calibration tables of language-model operators on this CUDA device (the
``gemm_nt`` table and the memory kinds ``broadcast``, ``strided``, ``permute_copy`` and
``convert`` of ``calibrate()``), without re-measuring the rest, and the same operators in other
access patterns that the model prices from those tables (``held_out_kinds``: the proof that one
table per pattern covers them). Writes one JSON file of tables by dtype; ``merge`` puts the
tables into a shipped calibration and recomputes its held-out residuals. Outputs under
``benchmarks/results/prediction/``.

    PYTHONPATH=. python3 benchmarks/prediction/calibrate_llm.py measure --out tables.json
    PYTHONPATH=. python3 benchmarks/prediction/calibrate_llm.py measure --tables linear \
        --out linear.json    # [--tables gemm_bias]
    python benchmarks/prediction/calibrate_llm.py merge tables.json \\
        moduleprofiler/prediction/calibrations/h200.json
    python benchmarks/prediction/calibrate_llm.py check tables.json --device H200
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from moduleprofiler.devices import tf32_math
from moduleprofiler.efficiency.peaks import device_peaks
from moduleprofiler.prediction.calibrate import (
    _TORCH_DTYPE,
    LINEAR_TABLES,
    _linears,
    _memory_bench,
    _Sweep,
    heads_view,
)
from moduleprofiler.prediction.calibration import Calibration
from moduleprofiler.prediction.device_model import DeviceModel
from moduleprofiler.prediction.op_classes import classify
from moduleprofiler.prediction.residuals import held_out_residuals

SHIPPED_KINDS = ("broadcast", "strided", "permute_copy", "convert", "strided_cat",
                 "strided_inner_cat")
MEASURED_AS = {"strided_inner_cat": "rotate_half_cat"}
"""A kind measured under another name by the first run of this script (same benchmark)."""
HELD_OUT_KINDS = ("rows_broadcast", "strided_add", "strided_unary")
"""Operators of the same patterns in other shapes: a norm's per-row scale, a sum of a permuted
and a contiguous tensor, a unary on half of permuted heads."""


def held_out_bench(kind: str, numel: int, device: torch.device,
                   dtype: torch.dtype) -> tuple[Any, Any]:
    """A benchmark of held-out ``kind`` and the operator call the model classifies for it:
    ``(bench, (func, args))``."""
    if kind == "rows_broadcast":
        x = torch.randn(max(1, numel // 1024), 1024, device=device, dtype=dtype)
        scale = torch.randn(x.shape[0], 1, device=device, dtype=dtype)
        return (lambda: x * scale), (torch.ops.aten.mul.Tensor, (x, scale))
    heads = heads_view(numel, device, dtype)
    if kind == "strided_add":
        other = torch.randn(heads.shape, device=device, dtype=dtype)
        return (lambda: heads + other), (torch.ops.aten.add.Tensor, (heads, other))
    if kind == "strided_unary":
        half = heads[..., : heads.shape[-1] // 2]
        return (lambda: -half), (torch.ops.aten.neg.default, (half,))
    raise ValueError(kind)


def _bench_of(kind: str, numel: int, device: torch.device, dtype: torch.dtype) -> Any:
    if kind in SHIPPED_KINDS:
        return _memory_bench(kind, numel, device, dtype)[0]
    return held_out_bench(kind, numel, device, dtype)[0]


def measure(out: str, repeats: int, tables: str) -> None:
    """``tables``: ``all`` (the memory kinds and ``gemm_nt``, the first run), ``linear``
    (``gemm_nt``, ``gemm_bias_nt`` and ``gemm_bias`` with the weights read from memory, as
    ``calibrate()`` measures them) or ``gemm_bias`` alone (the third run)."""
    device = torch.device("cuda")
    sizes = [2 ** i for i in range(10, 29)]
    found: dict[str, dict[str, list[list[float]]]] = {}
    began = time.perf_counter()
    with tf32_math(True):
        for name in ("fp32", "bf16"):
            dtype = _TORCH_DTYPE[name]
            tables_of = found.setdefault(name, {})
            sweep = _Sweep(device, repeats)
            for table in (LINEAR_TABLES if tables == "linear" else
                          ("gemm_bias",) if tables == "gemm_bias" else ("gemm_nt",)):
                linears = _linears(sweep, dtype, False, table)
                times = sweep.run()
                tables_of[table] = [[m, n, k, times[f"{table}:{m}:{n}:{k}"]]
                                    for m, n, k in linears]
                torch.cuda.empty_cache()
            for kind in (SHIPPED_KINDS + HELD_OUT_KINDS if tables == "all" else ()):
                labels = []
                for numel in sizes:
                    label = f"{MEASURED_AS.get(kind, kind)}:{numel}"
                    labels.append((numel, label))
                    sweep.add(label, functools.partial(_bench_of, kind, numel, device, dtype))
                times = sweep.run()
                tables_of[f"mem_{MEASURED_AS.get(kind, kind)}"] = [[numel, times[label]]
                                                                  for numel, label in labels]
                torch.cuda.empty_cache()
            print(name, {k: len(v) for k, v in tables_of.items()},
                  f"{time.perf_counter() - began:.1f} s", flush=True)
    header = {"device": torch.cuda.get_device_name(device), "torch": torch.__version__,
              "note": "mem_* rows are [numel, us] here; merge turns them into [bytes, us]"}
    Path(out).write_text(json.dumps({"header": header, "tables": found}))


def _bytes_rows(kind: str, rows: list[list[float]], dtype: str) -> list[list[float]]:
    meta = torch.device("meta")
    return [[float(_memory_bench(kind, int(numel), meta, _TORCH_DTYPE[dtype])[1]), us]
            for numel, us in rows]


def merge(tables_path: str, calibration_path: str) -> None:
    tables = json.loads(Path(tables_path).read_text())["tables"]
    calibration = Calibration.load(calibration_path)
    merged = {dtype: dict(t) for dtype, t in calibration.tables.items()}
    for dtype, found in tables.items():
        for name, rows in found.items():
            if name in LINEAR_TABLES:
                merged[dtype][name] = rows
        for kind in SHIPPED_KINDS:
            if f"mem_{MEASURED_AS.get(kind, kind)}" in found:
                merged[dtype][f"mem_{kind}"] = _bytes_rows(
                    kind, found[f"mem_{MEASURED_AS.get(kind, kind)}"], dtype)
    calibration = dataclasses.replace(calibration, tables=merged)
    calibration = dataclasses.replace(calibration, held_out=held_out_residuals(
        calibration, device_peaks(calibration.name)))
    calibration.save(calibration_path)
    for dtype, found in calibration.held_out.items():
        for name in [*LINEAR_TABLES, *(f"mem_{kind}" for kind in SHIPPED_KINDS)]:
            if name not in found:
                continue
            low, middle, high, count = found[name]
            print(f"{dtype} {name:>17}: held out, measured / predicted p10 {low:.3f}, "
                  f"median {middle:.3f}, p90 {high:.3f} ({count:.0f} shapes)")


def check(tables_path: str, device: str) -> None:
    """Each held-out kind's measured times against what the shipped calibration predicts
    for the operator as the model classifies it."""
    from moduleprofiler.prediction.predict import resolve_device
    model: DeviceModel = resolve_device(device)[0]
    tables = json.loads(Path(tables_path).read_text())["tables"]
    meta = torch.device("meta")
    for dtype, found in tables.items():
        for kind in HELD_OUT_KINDS:
            ratios, classes = [], set()
            for numel, us in found[f"mem_{kind}"]:
                _, (func, args) = held_out_bench(kind, int(numel), meta, _TORCH_DTYPE[dtype])
                out = func(*args)
                work = classify(func, args, {}, out)
                predicted = model.op_us(work)
                classes.add(work.table)
                if predicted and us > 0:
                    ratios.append(us / predicted)
            low, middle, high = np.percentile(ratios, (10, 50, 90))
            print(f"{dtype} {kind:>16} ({', '.join(sorted(map(str, classes)))}): measured / "
                  f"predicted p10 {low:.3f}, median {middle:.3f}, p90 {high:.3f} "
                  f"({len(ratios)} sizes, 1 KiB to 512 MiB of elements)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("measure")
    run.add_argument("--out", required=True)
    run.add_argument("--repeats", type=int, default=3)
    run.add_argument("--tables", choices=("all", "linear", "gemm_bias"), default="all")
    put = sub.add_parser("merge")
    put.add_argument("tables")
    put.add_argument("calibration")
    held = sub.add_parser("check")
    held.add_argument("tables")
    held.add_argument("--device", default="H200")
    args = parser.parse_args()
    if args.command == "measure":
        measure(args.out, args.repeats, args.tables)
    elif args.command == "merge":
        merge(args.tables, args.calibration)
    else:
        check(args.tables, args.device)


if __name__ == "__main__":
    main()
