"""The one shape of a clock: what a timed pass (``time_modules``, ``train_step_times``,
``TrainingProfiler``) asks of whatever times it.

A pass builds ONE runner over the model with the listeners of its hooked kinds of iteration
(a :class:`~moduleprofiler.timing.listener.ClockListener` each, stamping the clock's
``stamps``), the clock's own ``listeners()`` and any outer ones (named ranges); it hands the
measurement loop its hooked blocks, a hook-free block stamped the same way, and the clock's
``blocks()``; it asks the clock for the result's samples (``readings()``). It never asks which
clock it has: every difference between clocks is an answer to one of the questions below.

A new clock is one file in this folder (a class with these members; :class:`HostClock` has
the defaults of a clock that reads its stamps and nothing else) plus the block of registered
columns its per-call samples fill, and one line where :func:`~.choice.make_clock` picks it::

    class CompiledGraphClock(HostClock):
        \"\"\"Device time of a compiled graph's kernels, booked to modules.\"\"\"

        name = "compiled-graph"
        overhead_caveat = "host times include the hooks' share; graph kernels do not"

        def __init__(self, device: torch.device, backward: bool = False) -> None:
            super().__init__(devices.CPU, backward)  # host times on the CPU clock
            self.device = device
            self.ranges = GraphRanges()              # a Listener naming each call's range
            self.traced: list[DeviceIteration] = []

        def listeners(self) -> list[Listener]:
            return [self.ranges]                     # attached to the pass's one runner

        def blocks(self, runner: PassRunner, step: Step) -> list[Block]:
            def traced(count: int, keep: bool) -> None:
                with runner.installed(only=[self.ranges]), device_trace(self.device) as rec:
                    for _ in range(count):
                        step(lambda name: None, runner.run)
                if keep:
                    self.traced.extend(book_graph(rec, runner))
            return [Block(traced, share=lambda count: max(1, count // 4), warm=False)]

        def readings(self, layout, forward, backward=None) -> Readings:
            times = DeviceTimes.collect(self.traced, layout, backward is not None, 0.0, None)
            return Readings(times.samples, times.backward, forward, backward, times,
                            clock=self.name)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from moduleprofiler.runner import Listener, PassRunner
from moduleprofiler.timing.clocks.stamps import StampSource
from moduleprofiler.timing.device_results import DeviceTimes
from moduleprofiler.timing.listener import Step
from moduleprofiler.timing.loop import Block
from moduleprofiler.timing.overhead import HookCalibration
from moduleprofiler.timing.results import ModelLayout, PhaseSamples


@dataclass
class Readings:
    """What a clock read over a pass's kept iterations: the samples its result's per-call
    sample columns are filled from (``forward`` and ``backward`` are the times the views
    show; ``host_*`` the host's beside them where the clock reads the device apart)."""

    forward: PhaseSamples
    backward: PhaseSamples | None = None
    host_forward: PhaseSamples | None = None
    host_backward: PhaseSamples | None = None
    device_times: DeviceTimes | None = None
    """Launches, the device's idle share per call, the hook-free regime (device clocks)."""
    clock: str = ""
    """The clock's name in the result (``"cuda-kernels"``...)."""
    notes: list[str] = field(default_factory=list)
    """What the result should say about these times."""


class Clock(Protocol):
    """What a timed pass asks of its clock (module docstring: how a pass uses it, and what a
    new clock's file looks like)."""

    name: str
    """The clock's name in a result: ``"cpu-wall"``, ``"cuda-events"``, ``"cuda-kernels"``."""
    device: torch.device
    """The device whose work it times."""
    stamps: StampSource
    """What the hooks and the hook-free iterations stamp: the host's times (the device's own
    under CUDA events)."""
    calibration: HookCalibration
    """The hooks' cost on the ``stamps``' clock."""
    notes: list[str]
    """What every result of this clock says (why an asked-for clock fell back...)."""
    overhead_caveat: str
    """What the hooks' cost does to its times, said when hooks slow the model down."""

    def listeners(self) -> Sequence[Listener]:
        """Its own listeners, attached to the pass's one runner (active only in its
        ``blocks()``)."""
        ...

    def blocks(self, runner: PassRunner, step: Step) -> list[Block]:
        """Its own kinds of iteration of the pass's ``step`` on ``runner``, for the loop."""
        ...

    def prime(self) -> None:
        """Once before the warm-up (start what takes seconds once, never kept)."""
        ...

    def settle(self) -> None:
        """Before each named mark of a step: make the host's stamp mean the work is done
        (a device clock waits for its device)."""
        ...

    def session(self, runner: PassRunner
                ) -> AbstractContextManager[Callable[[], None]] | None:
        """A block of iterations the user drives (``TrainingProfiler``), timed its own way:
        yields the function that starts each iteration; kept when the block ends. ``None``:
        the clock has no kind of its own."""
        ...

    def finish(self, invoke: Callable[[], Any], plain: list[dict[str, float]]) -> None:
        """After the rounds, still inside the pass's state: with the hook-free iterations'
        marks in ``plain``, read what only a hook-free call can tell."""
        ...

    def readings(self, layout: ModelLayout, forward: PhaseSamples,
                 backward: PhaseSamples | None = None) -> Readings:
        """The result's samples, from the ``stamps``' own ``forward`` (and ``backward``)."""
        ...
