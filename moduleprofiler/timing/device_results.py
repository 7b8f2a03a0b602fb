"""What the kernel clock found: device time per module and call, launches, the device's idle
share inside each module, and the model's regime (host-bound or device-bound)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from moduleprofiler.timing.iteration import IterationTimes
from moduleprofiler.timing.results import ModelLayout, PhaseSamples

DEVICE_BOUND_BUSY = 0.8
"""A model whose device is busy at least this share of the hook-free forward is device-bound:
the host keeps ahead, and faster kernels would make it faster."""


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
    clock's), each call's launches and busy/span times per traced iteration, and the hook-free
    trace."""

    samples: PhaseSamples
    """Device time per iteration: forward in ``samples``, backward in ``backward``."""
    backward: PhaseSamples | None
    call_launches: NDArray[np.float64]
    """Per call, laid out as ``samples``' ``call_*`` arrays: device activities its forward
    launched, with its children's."""
    call_busy_ms: NDArray[np.float64]
    """Time the device ran at least one of the call's forward activities (children's too)."""
    call_span_ms: NDArray[np.float64]
    """From the start of the call's first forward activity to the end of its last."""
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

        def per_call(values: Sequence[NDArray[Any]]) -> NDArray[np.float64]:
            rows = [v[t.call_done].astype(np.float64) for t, v in zip(times, values)]
            return np.concatenate(rows) if rows else np.zeros(0)

        booked = sum(it.total_ns for it in iterations)
        return cls(
            samples=PhaseSamples.collect("device forward", times, width),
            backward=(PhaseSamples.collect("device backward", times, width, backward=True)
                      if backward else None),
            call_launches=per_call([it.call_launches for it in iterations]),
            call_busy_ms=per_call([it.call_busy_ns for it in iterations]) / 1e6,
            call_span_ms=per_call([it.call_span_ns for it in iterations]) / 1e6,
            booked_ms=booked / 1e6,
            total_ms=(booked + outside_ns) / 1e6,
            hook_free=hook_free,
        )

    def call_samples(self, layout: ModelLayout) -> dict[tuple[str, int], dict[str, Any]]:
        """Per call ``(path, call_number)``, its launches, busy and span time in each traced
        iteration: the samples the module views' ``device_launches`` and
        ``device_idle_share`` are computed from."""
        names = ("device_launches_samples", "device_busy_samples_ms", "device_span_samples_ms")
        return {key: {name: tuple(values.tolist()) for name, values in zip(names, series)}
                for key, series in self.samples.call_series(
                    layout, (self.call_launches, self.call_busy_ms, self.call_span_ms)).items()}

    @property
    def booked_share(self) -> float:
        """Share of the traced device time that ran inside some module call."""
        return self.booked_ms / self.total_ms if self.total_ms > 0 else math.nan
