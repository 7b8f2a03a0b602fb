"""The host and the device as two chains: the host issues operators one after another; the
device runs each operator's kernels once they are issued and the previous ones are done. A
device waiting for launches is idle, a host running ahead is hidden."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

LAUNCH_LATENCY_US = 2.0
"""From the end of a launch on the host to the start of its kernel on an idle device."""

QUEUED_GAP_US = 1.2
"""From the end of a kernel to the start of the next one already queued behind it: the device
is not busy in between. On an H200, over the kernels of ten device-bound forwards (ResNet-50,
ViT-B/16, BERT, GPT-2 and a Llama at batch 64, fp32 and bf16) launched before the one before
them ended, the median gap by configuration was 1.17 to 1.60 µs
(``benchmarks/prediction/kernel_gaps.py``, ``kernel_gaps_h200_2026-11-30.txt``); 1.2 µs is
their median. The calibrated tables time kernels alone, without it."""


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
            device = max(device + QUEUED_GAP_US if busy else device,
                         host + LAUNCH_LATENCY_US) + step.device_us
            busy += step.device_us
    return ChainResult(max(host, device), host_work, busy)
