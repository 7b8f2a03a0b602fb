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
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calibrate_kernels import measure

from moduleprofiler.prediction.calibrate_odd_shapes import PARTS, odd_shape_tables


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("measure")
    run.add_argument("--out", required=True)
    run.add_argument("--repeats", type=int, default=3)
    run.add_argument("--parts", default=",".join(PARTS), help="comma-separated: " + ", ".join(
        PARTS))
    args = parser.parse_args()
    parts = tuple(args.parts.split(","))
    measure(args.out, args.repeats,
            lambda sweep, device, dtype, held_out: odd_shape_tables(sweep, device, dtype,
                                                                    held_out, parts))


if __name__ == "__main__":
    main()
