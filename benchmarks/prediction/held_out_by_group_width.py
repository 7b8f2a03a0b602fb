"""Held-out convolution shapes of a measured tables file (``calibrate_odd_shapes.py measure``'s
output) predicted from a calibration, by group width and batch: measured over predicted time
(median, 10th and 90th percentiles) and the measured median µs. CPU only.

    python benchmarks/prediction/held_out_by_group_width.py \\
        benchmarks/results/prediction/odd_group_tables_h200.json \\
        moduleprofiler/prediction/calibrations/h200.json
"""

from __future__ import annotations

import argparse
import collections
import json
from pathlib import Path

import numpy as np

from moduleprofiler.efficiency.peaks import device_peaks
from moduleprofiler.prediction.calibration import Calibration
from moduleprofiler.prediction.device_model import (
    _ELEMENT_BYTES,
    DeviceModel,
    _row_work,
    interpolate,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("tables")
    parser.add_argument("calibration")
    args = parser.parse_args()
    held = json.loads(Path(args.tables).read_text(encoding="utf-8"))["held_out"]
    calibration = Calibration.load(args.calibration)
    peaks = device_peaks(calibration.name)
    model = DeviceModel(calibration, peaks, peaks)
    for dtype, found in held.items():
        for name in ("conv", "conv_backward"):
            table = model.table(name, dtype)
            if table is None or name not in found:
                continue
            classes: dict[tuple[int, int], list[tuple[float, float]]] = \
                collections.defaultdict(list)
            for row in found[name]:
                features, flops, nbytes = _row_work(name, row, _ELEMENT_BYTES[dtype])
                roof = DeviceModel.roof_us(peaks, dtype, flops, nbytes, True)
                query = np.array(features, dtype=np.float64)[: table.features.shape[1]]
                n, cin, groups = int(row[0]), int(row[1]), int(row[6])
                classes[(cin // groups, n)].append((row[-1] / interpolate(table, query, roof),
                                                    row[-1]))
            for (width, batch), pairs in sorted(classes.items()):
                ratios = [ratio for ratio, _ in pairs]
                low, middle, high = np.percentile(ratios, (10, 50, 90))
                print(f"{dtype} {name:<13} width {width:>4} batch {batch:>2}: measured / "
                      f"predicted {middle:.2f} ({low:.2f}-{high:.2f}), measured "
                      f"{np.median([us for _, us in pairs]):.1f} us median, n={len(pairs)}")


if __name__ == "__main__":
    main()
