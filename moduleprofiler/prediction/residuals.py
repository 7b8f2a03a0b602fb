"""How far the device model is from a device's own measurements: every measured shape of a
calibration table predicted from the table's other shapes (leave-one-out), as the ratio of
measured to predicted time. Its 10th and 90th percentiles per table are the error band every
prediction from the calibration carries (:meth:`.DeviceModel.error_band`).

A shape left out sits one grid step from its nearest measured neighbours, as far as an
operator of a real model sits at most; what the calibration grid cannot show (other kernels
chosen inside a model, caches warm or cold, operators outside the tables) is not in it, which
``docs/prediction.md`` measures against whole models.
"""

from __future__ import annotations

import numpy as np

from moduleprofiler.efficiency.peaks import DevicePeaks
from moduleprofiler.prediction.calibration import Calibration
from moduleprofiler.prediction.device_model import DeviceModel, floored

BAND = (10, 50, 90)
"""The percentiles kept: the band's low end, the median, its high end."""


def held_out_residuals(calibration: Calibration,
                       peaks: DevicePeaks) -> dict[str, dict[str, list[float]]]:
    """By dtype and table: ``[p10, p50, p90, rows]`` of measured over predicted time, each
    row predicted from the others as an operator is priced (its nearest rows, and a
    memory-bound one no faster than the others' rows from memory run; ``peaks``: the
    calibrated device's, for the roofline ratios). A table of one row has none."""
    model = DeviceModel(calibration, peaks, peaks)
    found: dict[str, dict[str, list[float]]] = {}
    for dtype, tables in calibration.tables.items():
        for name in tables:
            table = model.table(name, dtype)
            if table is None or len(table.us) < 2:
                continue
            predicted = np.array([floored(table, table.features[i], table.roof_us[i], i)
                                  for i in range(len(table.us))])
            ratios = table.us / predicted
            low, middle, high = (float(v) for v in np.percentile(ratios, BAND))
            found.setdefault(dtype, {})[name] = [round(low, 4), round(middle, 4),
                                                 round(high, 4), float(len(ratios))]
    return found
