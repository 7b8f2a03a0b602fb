"""Measure the odd-shape rows of ``moduleprofiler.prediction.calibrate_odd_shapes`` on this CUDA
device (misaligned batched products and layer widths, grouped convolutions over channel counts
no power of two, channels-first depthwise ones over odd channel counts), and the held-out
shapes that prove them; ``merge`` and ``check`` as ``calibrate_kernels.py``'s.

    PYTHONPATH=. python3 benchmarks/prediction/calibrate_odd_shapes.py measure --out odd.json
    python benchmarks/prediction/calibrate_kernels.py merge odd.json \\
        moduleprofiler/prediction/calibrations/h200.json
    python benchmarks/prediction/calibrate_kernels.py check odd.json CALIBRATION...
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from moduleprofiler.prediction.calibrate import _TORCH_DTYPE, _Sweep, _tf32
from moduleprofiler.prediction.calibrate_odd_shapes import PARTS, odd_shape_tables


def measure(out: str, repeats: int, parts: tuple[str, ...]) -> None:
    device = torch.device("cuda")
    began = time.perf_counter()
    found: dict[str, dict[str, dict[str, list[list[float]]]]] = {"tables": {}, "held_out": {}}
    with _tf32(True):
        for name in ("fp32", "bf16"):
            for part in ("tables", "held_out"):
                found[part][name] = odd_shape_tables(_Sweep(device, repeats), device,
                                                     _TORCH_DTYPE[name], part == "held_out",
                                                     parts)
                torch.cuda.empty_cache()
                print(name, part, {k: len(v) for k, v in found[part][name].items()},
                      f"{time.perf_counter() - began:.1f} s", flush=True)
                # written after each part: a run cut short keeps what it measured
                Path(out).write_text(json.dumps({
                    "device_name": torch.cuda.get_device_name(device),
                    "torch": torch.__version__, **found}), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("measure")
    run.add_argument("--out", required=True)
    run.add_argument("--repeats", type=int, default=3)
    run.add_argument("--parts", default=",".join(PARTS), help="comma-separated: " + ", ".join(
        PARTS))
    args = parser.parse_args()
    measure(args.out, args.repeats, tuple(args.parts.split(",")))


if __name__ == "__main__":
    main()
