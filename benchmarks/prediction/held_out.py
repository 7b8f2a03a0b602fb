"""Write each calibration's held-out residuals into it (``Calibration.held_out``): every
measured shape predicted from its table's other shapes, for the shipped calibrations measured
before ``calibrate()`` kept them. CPU only; the tables are not changed.

    python benchmarks/prediction/held_out.py moduleprofiler/prediction/calibrations/*.json
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from moduleprofiler.efficiency.peaks import device_peaks
from moduleprofiler.prediction.calibration import Calibration
from moduleprofiler.prediction.residuals import held_out_residuals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("paths", nargs="+")
    for path in parser.parse_args().paths:
        calibration = Calibration.load(path)
        held_out = held_out_residuals(calibration, device_peaks(calibration.name))
        dataclasses.replace(calibration, held_out=held_out).save(path)
        for dtype, tables in held_out.items():
            for table, (low, middle, high, rows) in tables.items():
                print(f"{Path(path).name} {dtype} {table:>18}: measured / predicted p10 "
                      f"{low:.3f}, median {middle:.3f}, p90 {high:.3f} ({rows:.0f} shapes)")


if __name__ == "__main__":
    main()
