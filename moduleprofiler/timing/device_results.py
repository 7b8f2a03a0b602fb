"""What the kernel clock found: device time per module and call, launches, the device's idle
share inside each module, and the model's regime (host-bound or device-bound)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from moduleprofiler.timing.iteration import per_module_sum
from moduleprofiler.timing.kernel_clock import DeviceIteration
from moduleprofiler.timing.results import ModelLayout, PhaseSamples

DEVICE_BOUND_BUSY = 0.8
"""A model whose device is busy at least this share of the hook-free forward is device-bound:
the host keeps ahead, and faster kernels would make it faster."""


@dataclass(frozen=True)
class HookFreeTrace:
    """One traced iteration without hooks: how busy the device is when nothing is measured."""

    host_ms: float
    """Host time to issue the iteration (the call returns before the device finishes)."""
    device_ms: float
    """Time the device ran at least one of the iteration's activities."""
    launches: int
    """Kernels, copies and sets the iteration ran."""
    latency_ms: float
    """The hook-free iteration's median latency (measured in the interleaved rounds)."""

    @property
    def busy_share(self) -> float:
        """Device busy time over latency."""
        return self.device_ms / self.latency_ms if self.latency_ms > 0 else math.nan

    @property
    def host_per_launch_us(self) -> float:
        """Host time per device launch (Python, dispatch, the launch itself)."""
        return 1e3 * self.host_ms / self.launches if self.launches else math.nan

    @property
    def bound(self) -> str:
        """``"device"`` when the device is busy at least :data:`DEVICE_BOUND_BUSY` of the
        forward, else ``"host"``."""
        return "device" if self.busy_share >= DEVICE_BOUND_BUSY else "host"

    def sentence(self) -> str:
        """One line: the regime, its evidence and what would change it."""
        evidence = (f"the GPU is busy {100 * self.busy_share:.0f} % of the hook-free "
                    f"iteration ({self.latency_ms:.3f} ms; {self.launches} launches, "
                    f"{self.host_per_launch_us:.1f} us of host time per launch)")
        if self.bound == "device":
            return (f"device-bound: {evidence}; faster kernels (lower precision, fused "
                    "operators, a better layout) make it faster")
        return (f"host-bound: {evidence}; the GPU waits for launches: a larger batch, CUDA "
                "graphs or torch.compile (fewer, larger launches) would keep it busy")


@dataclass(frozen=True, eq=False)
class DeviceTimes:
    """Kernel-clock results of a timing run: device time samples (the same statistics as any
    clock's), per iteration and module launches and busy/span times, and the hook-free
    trace."""

    samples: PhaseSamples
    """Device time per iteration: forward in ``samples``, backward in ``backward``."""
    backward: PhaseSamples | None
    launches: NDArray[np.float64]
    """``(iterations, modules)``: device activities each module's forward launched."""
    busy_ms: NDArray[np.float64]
    span_ms: NDArray[np.float64]
    booked_ms: float
    """Device time booked to module calls over the traced iterations."""
    total_ms: float
    """All device time over the traced session (the rest ran outside every module)."""
    hook_free: HookFreeTrace | None

    @classmethod
    def collect(cls, iterations: Sequence[DeviceIteration], layout: ModelLayout,
                backward: bool, outside_ns: float, hook_free: HookFreeTrace | None
                ) -> DeviceTimes:
        """Aggregate traced iterations."""
        width = len(layout.paths)
        times = [it.times for it in iterations]

        def per_module(values: Sequence[NDArray[Any]]) -> NDArray[np.float64]:
            rows = [per_module_sum(t.call_module, v.astype(np.float64), width, t.call_parent)
                    for t, v in zip(times, values)]
            return np.vstack(rows) if rows else np.zeros((0, width))

        booked = sum(it.total_ns for it in iterations)
        return cls(
            samples=PhaseSamples.collect("device forward", times, width),
            backward=(PhaseSamples.collect("device backward", times, width, backward=True)
                      if backward else None),
            launches=per_module([it.call_launches for it in iterations]),
            busy_ms=per_module([it.call_busy_ns for it in iterations]) / 1e6,
            span_ms=per_module([it.call_span_ns for it in iterations]) / 1e6,
            booked_ms=booked / 1e6,
            total_ms=(booked + outside_ns) / 1e6,
            hook_free=hook_free,
        )

    @property
    def booked_share(self) -> float:
        """Share of the traced device time that ran inside some module call."""
        return self.booked_ms / self.total_ms if self.total_ms > 0 else math.nan

    def module_launches(self) -> NDArray[np.float64]:
        """Median launches per iteration of each module (with its children's)."""
        return _median(self.launches)

    def module_idle_share(self) -> NDArray[np.float64]:
        """Per module: the share of the span of its device work (first start to last end,
        summed over its calls) in which the device ran none of it; the median over
        iterations (``nan`` for modules that launched nothing)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            idle = 1.0 - self.busy_ms / self.span_ms
        idle[~np.isfinite(idle)] = np.nan
        return _median(np.clip(idle, 0.0, 1.0))


def _median(matrix: NDArray[np.float64]) -> NDArray[np.float64]:
    if matrix.shape[0] == 0:
        return np.full(matrix.shape[1], np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-nan column's median is nan
        out: NDArray[np.float64] = np.nanmedian(matrix, axis=0)
    return out
