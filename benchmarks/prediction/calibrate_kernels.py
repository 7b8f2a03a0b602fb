"""Measure the kernel-choice rows of ``moduleprofiler.prediction.calibrate_kernels`` on this CUDA
device (narrow and wide normalisations and softmaxes, ``roll``, attention-shaped batched
products, grouped, odd-channel and channels-last convolutions, attention over sequences no
multiple of a tile), and the held-out shapes that prove them. ``merge`` adds the rows to a
calibration and recomputes its held-out residuals; ``check`` predicts the held-out shapes from a
calibration (CPU).

    PYTHONPATH=. python3 benchmarks/prediction/calibrate_kernels.py measure --out kernels.json
    python benchmarks/prediction/calibrate_kernels.py merge kernels.json \\
        moduleprofiler/prediction/calibrations/h200.json
    python benchmarks/prediction/calibrate_kernels.py check kernels.json --device H200
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from moduleprofiler.devices import tf32_math
from moduleprofiler.efficiency.peaks import device_peaks
from moduleprofiler.prediction.calibrate import _TORCH_DTYPE, _Sweep
from moduleprofiler.prediction.calibrate_kernels import kernel_tables
from moduleprofiler.prediction.calibration import Calibration
from moduleprofiler.prediction.device_model import (
    _COMPUTE_TABLES,
    _ELEMENT_BYTES,
    DeviceModel,
    _row_work,
    interpolate,
)
from moduleprofiler.prediction.residuals import held_out_residuals

Tables = Callable[[_Sweep, torch.device, torch.dtype, bool], dict[str, list[list[float]]]]
"""Measures one dtype's rows (``held_out``: the held-out shapes) with a sweep on a device."""


def measure(out: str, repeats: int, tables: Tables = kernel_tables) -> None:
    """``tables`` in fp32 and bf16, the rows and the held-out shapes, written to ``out``."""
    device = torch.device("cuda")
    began = time.perf_counter()
    found: dict[str, dict[str, dict[str, list[list[float]]]]] = {"tables": {}, "held_out": {}}
    with tf32_math(True):
        for name in ("fp32", "bf16"):
            for part in ("tables", "held_out"):
                found[part][name] = tables(_Sweep(device, repeats), device,
                                           _TORCH_DTYPE[name], part == "held_out")
                torch.cuda.empty_cache()
                print(name, part, {k: len(v) for k, v in found[part][name].items()},
                      f"{time.perf_counter() - began:.1f} s", flush=True)
                # written after each part: a run cut short keeps what it measured
                Path(out).write_text(json.dumps({
                    "device_name": torch.cuda.get_device_name(device),
                    "torch": torch.__version__, **found}), encoding="utf-8")


def measure_main(description: str | None, tables: Tables) -> None:
    """The command line of a script that measures ``tables`` alone: ``--out`` and
    ``--repeats``, then :func:`measure`."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", required=True)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    measure(args.out, args.repeats, tables)


def merge(tables_path: str, calibration_path: str) -> None:
    """Append the measured rows to the calibration's tables (same device) and recompute its
    held-out residuals."""
    measured = json.loads(Path(tables_path).read_text(encoding="utf-8"))
    calibration = Calibration.load(calibration_path)
    if measured["device_name"] != calibration.device_name:
        raise SystemExit(f"{tables_path} measured {measured['device_name']}, "
                         f"{calibration_path} is {calibration.device_name}")
    tables = {dtype: dict(rows) for dtype, rows in calibration.tables.items()}
    for dtype, found in measured["tables"].items():
        for name, rows in found.items():
            tables[dtype][name] = [*tables[dtype].get(name, []), *rows]
    merged = dataclasses.replace(calibration, tables=tables)
    merged = dataclasses.replace(merged, held_out=held_out_residuals(
        merged, device_peaks(calibration.name)))
    merged.save(calibration_path)
    print(f"{calibration_path}: + rows of {sorted(measured['tables'].get('fp32', {}))}")


def check(tables_path: str, calibrations: list[str]) -> None:
    """The held-out shapes' measured over predicted time (10th, 50th, 90th percentiles) by
    table, predicted from each calibration in turn (before and after the rows were merged)."""
    held_out = json.loads(Path(tables_path).read_text(encoding="utf-8"))["held_out"]
    for path in calibrations:
        calibration = Calibration.load(path)
        peaks = device_peaks(calibration.name)
        model = DeviceModel(calibration, peaks, peaks)
        print(f"held-out shapes predicted from {path}:")
        for dtype, found in held_out.items():
            for name, rows in found.items():
                table = model.table(name, dtype) or model.table(
                    {"mem_roll": "mem_unary"}.get(name, name), dtype)
                if table is None:
                    continue
                ratios = []
                for row in rows:
                    features, flops, nbytes = _row_work(name, row, _ELEMENT_BYTES[dtype])
                    roof = DeviceModel.roof_us(peaks, dtype, flops, nbytes,
                                               name in _COMPUTE_TABLES)
                    query = np.array(features, dtype=np.float64)[: table.features.shape[1]]
                    ratios.append(row[-1] / interpolate(table, query, roof))
                low, middle, high = np.percentile(ratios, (10, 50, 90))
                print(f"  {dtype} {name:>24}: measured / predicted p10 {low:.2f}, median "
                      f"{middle:.2f}, p90 {high:.2f} ({len(ratios)} shapes)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("measure")
    run.add_argument("--out", required=True)
    run.add_argument("--repeats", type=int, default=3)
    put = sub.add_parser("merge")
    put.add_argument("tables")
    put.add_argument("calibration")
    held = sub.add_parser("check")
    held.add_argument("tables")
    held.add_argument("calibrations", nargs="+")
    args = parser.parse_args()
    if args.command == "measure":
        measure(args.out, args.repeats)
    elif args.command == "check":
        check(args.tables, args.calibrations)
    else:
        merge(args.tables, args.calibration)


if __name__ == "__main__":
    main()
