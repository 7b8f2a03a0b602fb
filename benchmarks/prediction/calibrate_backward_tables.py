"""Measure the training step's calibration tables (``moduleprofiler.prediction.calibrate``'s
backward-only tables: matrix products in each transposed layout, normalisation, pooling and
bias-gradient backwards) on this CUDA device, alone, for a calibration made before they
existed; ``--merge`` adds them to a calibration file and recomputes its held-out residuals.

    PYTHONPATH=. python3 benchmarks/prediction/calibrate_backward_tables.py --out tables.json
    python benchmarks/prediction/calibrate_backward_tables.py --merge tables.json \\
        moduleprofiler/prediction/calibrations/h200.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import torch

from moduleprofiler.efficiency.peaks import device_peaks
from moduleprofiler.prediction.calibrate import measure_backward_tables
from moduleprofiler.prediction.calibration import Calibration
from moduleprofiler.prediction.residuals import held_out_residuals


def merge(tables_path: str, calibration_path: str) -> None:
    """Add the tables of ``tables_path`` to the calibration at ``calibration_path`` (same
    device) and recompute its held-out residuals."""
    measured = json.loads(Path(tables_path).read_text(encoding="utf-8"))
    calibration = Calibration.load(calibration_path)
    if measured["device_name"] != calibration.device_name:
        raise SystemExit(f"{tables_path} measured {measured['device_name']}, "
                         f"{calibration_path} is {calibration.device_name}")
    tables = {dtype: {**rows, **measured["tables"].get(dtype, {})}
              for dtype, rows in calibration.tables.items()}
    merged = dataclasses.replace(calibration, tables=tables)
    merged = dataclasses.replace(merged, held_out=held_out_residuals(
        merged, device_peaks(calibration.name)))
    merged.save(calibration_path)
    print(f"{calibration_path}: + {sorted(measured['tables'].get('fp32', {}))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--merge", nargs=2, metavar=("TABLES", "CALIBRATION"))
    args = parser.parse_args()
    if args.merge:
        merge(*args.merge)
        return
    began = time.perf_counter()
    device = torch.device("cuda")
    tables = measure_backward_tables(device, quick=args.quick)
    Path(args.out).write_text(json.dumps({
        "device_name": torch.cuda.get_device_name(device), "torch": torch.__version__,
        "tables": tables}), encoding="utf-8")
    print({dtype: {name: len(rows) for name, rows in found.items()}
           for dtype, found in tables.items()}, f"{time.perf_counter() - began:.1f} s")


if __name__ == "__main__":
    main()
