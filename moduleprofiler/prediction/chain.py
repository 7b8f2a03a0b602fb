"""The host and the device as two chains: the host issues operators one after another; the
device runs each operator's kernels once they are issued and the previous ones are done. A
device waiting for launches is idle, a host running ahead is hidden."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

LAUNCH_LATENCY_US = 2.0
"""From the end of a launch on the host to the start of its kernel on an idle device."""


@dataclass(frozen=True)
class Step:
    """One host event: ``host_us`` of host work, then ``device_us`` of device work issued
    (0: none); ``syncs``: the host waits for the device before going on."""

    host_us: float
    device_us: float
    syncs: bool = False


@dataclass(frozen=True)
class ChainResult:
    latency_us: float
    """From the pass's start (device idle) to the end of its last kernel or host step."""
    host_us: float
    """The host's own work, waits excluded."""
    device_us: float
    """The device's busy time."""

    @property
    def host_bound(self) -> bool:
        """Whether the device is idle more than half the pass."""
        return self.device_us < 0.5 * self.latency_us


def run_chain(steps: Iterable[Step]) -> ChainResult:
    """Simulate the two chains over ``steps`` in issue order."""
    host = device = host_work = busy = 0.0
    for step in steps:
        if step.syncs:
            host = max(host, device)
        host += step.host_us
        host_work += step.host_us
        if step.device_us > 0:
            device = max(device, host + LAUNCH_LATENCY_US) + step.device_us
            busy += step.device_us
    return ChainResult(max(host, device), host_work, busy)
