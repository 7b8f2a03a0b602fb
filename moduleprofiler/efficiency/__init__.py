"""How close each module gets to the hardware: bytes moved, device peaks, roofline, MFU.

* :class:`TrafficListener`: bytes each module call's aten operators read and write (forward,
  backward, activation-checkpoint recomputation), an opt-in listener;
* :func:`device_peaks` / :data:`DEVICE_PEAKS` / :func:`measure_peaks`: peak FLOP/s by dtype and
  memory bandwidth, from datasheets or measured;
* :func:`with_efficiency`: per call and module, achieved FLOP/s and bytes/s, % of peak,
  roofline time and a compute / memory / overhead label;
* :func:`utilization`: MFU and HFU of a forward or a training step;
* :func:`plot_roofline`: the roofline figure (matplotlib, the ``plot`` extra).

See ``docs/efficiency.md``.
"""

from moduleprofiler.efficiency.figure import plot_roofline
from moduleprofiler.efficiency.measure import measure_peaks
from moduleprofiler.efficiency.peaks import (
    DEVICE_PEAKS,
    DTYPES,
    AmbiguousDeviceError,
    DevicePeaks,
    UnknownDeviceError,
    device_peaks,
    match_device,
    peak_dtype,
)
from moduleprofiler.efficiency.roofline import (
    EfficiencyWarning,
    compute_dtype,
    roofline,
    with_efficiency,
)
from moduleprofiler.efficiency.traffic import TrafficListener, operator_bytes
from moduleprofiler.efficiency.utilization import (
    Utilization,
    transformer_flops_per_token,
    utilization,
)

__all__ = [
    "DEVICE_PEAKS",
    "DTYPES",
    "AmbiguousDeviceError",
    "DevicePeaks",
    "EfficiencyWarning",
    "TrafficListener",
    "UnknownDeviceError",
    "Utilization",
    "compute_dtype",
    "device_peaks",
    "match_device",
    "measure_peaks",
    "operator_bytes",
    "peak_dtype",
    "plot_roofline",
    "roofline",
    "transformer_flops_per_token",
    "utilization",
    "with_efficiency",
]
