"""Which clock times a pass: the one place that names every clock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from moduleprofiler.timing.clocks.compiled import CompiledClock, CompiledProgram
from moduleprofiler.timing.clocks.host import CpuClock, EventClock
from moduleprofiler.timing.clocks.kernels import KernelClock
from moduleprofiler.timing.clocks.protocol import Clock
from moduleprofiler.timing.device_trace import (
    ClockName,
    choose_clock,
    kernel_records_unavailable,
)

CLOCK_CLASSES: dict[str, type[CpuClock | EventClock | KernelClock]] = {
    "cpu": CpuClock, "events": EventClock, "kernels": KernelClock}
"""The clock of each name :func:`~moduleprofiler.timing.device_trace.choose_clock` picks."""


def make_clock(device: torch.device, clock: ClockName | Clock, backward: bool = False,
               model: nn.Module | None = None, input: Any = None,
               pred_fn: Callable[..., Any] | None = None) -> Clock:
    """The clock ``clock`` names on ``device`` (with ``backward``, its hooks calibrated for a
    backward too); where ``"auto"`` had to fall back, its ``notes`` say why. A clock object
    is used as it is. A compiled ``model`` (``torch.compile(model)``, compiled in place, or
    with compiled submodules) called on ``input``: ``"auto"`` (no ``pred_fn``) and
    ``"compiled"`` time its compiled program, forward or training step
    (:class:`~.compiled.CompiledClock`; ``"auto"`` only where the device's kernel records
    can be had); any other clock times its original module eagerly."""
    if not isinstance(clock, str):
        return clock
    readable = device.type != "cuda" or kernel_records_unavailable(device) is None
    if clock == "compiled" or (clock == "auto" and pred_fn is None and readable):
        program = (CompiledProgram.of(model, input, backward=backward) if model is not None
                   else None)
        if clock == "compiled":
            if program is None:
                raise ValueError("clock='compiled' times a torch.compile'd model (or one "
                                 "compiled in place with .compile(), or with compiled "
                                 "submodules); nothing in this model is compiled")
            if pred_fn is not None:
                raise ValueError("clock='compiled' calls the compiled program on input "
                                 "itself; it takes no pred_fn")
        if program is not None and (clock == "compiled" or not (backward and program.partly)):
            return CompiledClock(device, program, backward)
    name, fallback = choose_clock(device, clock)
    made: Clock = CLOCK_CLASSES[name](device, backward)
    if fallback is not None:
        made.notes.append(fallback)
    return made
