"""Which clock times a pass: the one place that names every clock."""

from __future__ import annotations

import torch

from moduleprofiler.timing.clocks.host import CpuClock, EventClock
from moduleprofiler.timing.clocks.kernels import KernelClock
from moduleprofiler.timing.clocks.protocol import Clock
from moduleprofiler.timing.device_trace import ClockName, choose_clock

CLOCK_CLASSES: dict[str, type[CpuClock | EventClock | KernelClock]] = {
    "cpu": CpuClock, "events": EventClock, "kernels": KernelClock}
"""The clock of each name :func:`~moduleprofiler.timing.device_trace.choose_clock` picks."""


def make_clock(device: torch.device, clock: ClockName | Clock,
               backward: bool = False) -> Clock:
    """The clock ``clock`` names on ``device`` (with ``backward``, its hooks calibrated for a
    backward too); where ``"auto"`` had to fall back, its ``notes`` say why. A clock object
    is used as it is."""
    if not isinstance(clock, str):
        return clock
    name, fallback = choose_clock(device, clock)
    made: Clock = CLOCK_CLASSES[name](device, backward)
    if fallback is not None:
        made.notes.append(fallback)
    return made
