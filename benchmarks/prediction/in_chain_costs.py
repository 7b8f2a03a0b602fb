"""Write the in-chain costs of small kernels (``Calibration.in_chain``) measured by
``in_model_kernels.py`` into a calibration. CPU only; the tables are not changed.

    python benchmarks/prediction/in_chain_costs.py \\
        benchmarks/results/prediction/in_model_kernels_h200.json \\
        moduleprofiler/prediction/calibrations/h200.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from moduleprofiler.prediction.calibration import Calibration
from moduleprofiler.prediction.in_chain import in_chain_costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("measured")
    parser.add_argument("calibration")
    args = parser.parse_args()
    measured = json.loads(Path(args.measured).read_text())
    costs = in_chain_costs({dtype: measured[dtype] for dtype in ("fp32", "bf16")})
    calibration = Calibration.load(args.calibration)
    dataclasses.replace(calibration, in_chain=costs).save(args.calibration)
    for dtype, tables in costs.items():
        for table, us in tables.items():
            print(f"{dtype} {table:<16} {us:.3f} us")


if __name__ == "__main__":
    main()
