"""What the kernel clock hands a timing result for each traced iteration: every call's device
times, launches and busy time (booked by :mod:`moduleprofiler.timing.clocks.kernels`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from moduleprofiler.timing.iteration import IterationTimes


@dataclass
class DeviceIteration:
    """One traced iteration: device times (ns) per call and module, launches and busy time."""

    times: IterationTimes
    """Forward (and backward) device time, own and inclusive, as for any clock."""
    call_launches: NDArray[np.int64]
    """Device activities (kernels, copies, sets) each call launched in its forward, with its
    children's."""
    call_busy_ns: NDArray[np.float64]
    """Time the device ran at least one of the call's forward activities (children's too)."""
    call_span_ns: NDArray[np.float64]
    """From the start of the call's first forward activity to the end of its last."""
    total_ns: float
    """Device time booked to the iteration's calls, forward and backward."""
