"""Clocks that read their stamps and nothing else: the CPU's wall clock and CUDA events at the
hooks. :class:`HostClock` is also the defaults every other clock starts from."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import torch

from moduleprofiler.runner import Listener, PassRunner
from moduleprofiler.timing.clocks.protocol import Readings
from moduleprofiler.timing.clocks.stamps import StampSource, make_stamps
from moduleprofiler.timing.listener import Step
from moduleprofiler.timing.loop import Block
from moduleprofiler.timing.overhead import HookCalibration, calibrate_hooks
from moduleprofiler.timing.results import ModelLayout, PhaseSamples


class HostClock:
    """A :class:`~.protocol.Clock` of stamps alone, on ``device``'s stamp source (hooks
    calibrated on it, with ``backward`` their backward cost too)."""

    name = "cpu-wall"
    overhead_caveat = "small modules' times include the hooks' share; see low_confidence"

    def __init__(self, device: torch.device, backward: bool = False) -> None:
        self.device = device
        self.stamps: StampSource = make_stamps(device)
        self.calibration: HookCalibration = calibrate_hooks(device, backward=backward)
        self.notes: list[str] = []

    def listeners(self) -> Sequence[Listener]:
        """None of its own: the pass's stamping listeners are all it needs."""
        return ()

    def blocks(self, runner: PassRunner, step: Step) -> list[Block]:
        """No kind of iteration of its own."""
        return []

    def prime(self) -> None:
        """Nothing to start."""

    def settle(self) -> None:
        """Nothing to wait for: the stamps are the times."""

    def session(self, runner: PassRunner
                ) -> AbstractContextManager[Callable[[], None]] | None:
        """No kind of its own."""
        return None

    def finish(self, invoke: Callable[[], Any], plain: list[dict[str, float]]) -> None:
        """Nothing more to read."""

    def readings(self, layout: ModelLayout, forward: PhaseSamples,
                 backward: PhaseSamples | None = None) -> Readings:
        """The stamps' own samples are the result's."""
        return Readings(forward, backward, clock=self.name)


class CpuClock(HostClock):
    """Wall time on the host (``perf_counter_ns`` at the hooks)."""

    name = "cpu-wall"


class EventClock(HostClock):
    """CUDA events at the hooks: the GPU's timeline, right only while it has queued work."""

    name = "cuda-events"
    overhead_caveat = ("launch-bound with hooks, so GPU-timeline times include launch gaps; "
                       "a larger batch helps")
