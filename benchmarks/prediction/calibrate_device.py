"""Measure this CUDA device with ``moduleprofiler.prediction.calibrate`` and save the file the
package ships (``moduleprofiler/prediction/calibrations/``).

    PYTHONPATH=. python3 benchmarks/prediction/calibrate_device.py --out h100_sxm.json [--quick]
"""

from __future__ import annotations

import argparse
import time

from moduleprofiler.prediction import calibrate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    began = time.perf_counter()
    calibration = calibrate(quick=args.quick)
    calibration.save(args.out)
    sizes = {dtype: {name: len(rows) for name, rows in table.items()}
             for dtype, table in calibration.tables.items()}
    print(f"{calibration.name} ({calibration.device_name}, {calibration.sms} SMs): "
          f"{sizes}; host {calibration.host}; {time.perf_counter() - began:.1f} s")


if __name__ == "__main__":
    main()
