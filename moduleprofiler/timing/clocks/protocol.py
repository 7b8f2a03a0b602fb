"""The one shape of a clock: what a timed pass (``time_modules``, ``train_step_times``,
``TrainingProfiler``) asks of whatever times it.

A pass builds ONE runner over the model with the listeners of its hooked kinds of iteration
(a :class:`~moduleprofiler.timing.listener.ClockListener` each, stamping the clock's
``stamps``), the clock's own ``listeners()`` and any outer ones (named ranges); it hands the
measurement loop its hooked blocks, a hook-free block stamped the same way, and the clock's
``blocks()``; it asks the clock for the result's samples (``readings()``). It never asks which
clock it has: every difference between clocks is an answer to one of the questions below.

A new clock is one file in this folder (a subclass of :class:`Clock`, whose answers are those
of a clock that reads its stamps and nothing else) plus the block of registered columns its
per-call samples fill, named as its ``columns`` (the kernel clock's: :mod:`.kernel_columns`),
and one line where :func:`~.choice.make_clock` picks it::

    class CompiledGraphClock(Clock):
        \"\"\"Device time of a compiled graph's kernels, booked to modules.\"\"\"

        name = "compiled-graph"
        columns = GRAPH_COLUMNS                      # its block: register_column(...) each
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

        def readings(self) -> Readings:
            return Readings(self.traced, clock=self.name)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from moduleprofiler.export.columns import ColumnSpec
from moduleprofiler.facts import CompiledFacts, HookFreeTrace
from moduleprofiler.runner import Listener, PassRunner
from moduleprofiler.timing.clocks.stamps import StampSource, make_stamps
from moduleprofiler.timing.columns import TIME_COLUMNS
from moduleprofiler.timing.device_results import DeviceIteration
from moduleprofiler.timing.listener import Step
from moduleprofiler.timing.loop import Block
from moduleprofiler.timing.overhead import HookCalibration, calibrate_hooks


@dataclass
class Readings:
    """What a clock read over a pass's kept iterations beyond the stamps' own (which the pass
    hands the result builder itself): a device clock's traced iterations (their device
    times become the result's times, the stamps' the host's beside them), the device time
    booked to calls and in all, the hook-free regime, and the clock's name and notes."""

    traced: Sequence[DeviceIteration] = ()
    booked_ms: float | None = None
    """Device time booked to module calls over the traced iterations (device clocks)."""
    total_ms: float | None = None
    """All device time over the traced sessions (device clocks)."""
    hook_free: HookFreeTrace | None = None
    """The hook-free iteration's regime (device clocks)."""
    clock: str = ""
    """The clock's name in the result (``"cuda-kernels"``...)."""
    notes: list[str] = field(default_factory=list)
    """What the result should say about these times."""
    module_metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per-module columns only this clock reads (``{path: {column: value}}``, columns of its
    block)."""
    compiled: CompiledFacts | None = None
    """The compiled clock: the compiled graphs, their breaks, the recompilations."""


class Clock:
    """What a timed pass asks of its clock (module docstring: how a pass uses it, and what a
    new clock's file looks like). The answers here are those of a clock that reads its
    stamps and nothing else (on ``device``'s stamp source, the hooks calibrated on it, with
    ``backward`` their backward cost too); a clock overrides what it does otherwise."""

    name = "cpu-wall"
    """The clock's name in a result: ``"cpu-wall"``, ``"cuda-events"``, ``"cuda-kernels"``."""
    overhead_caveat = "small modules' times include the hooks' share; see low_confidence"
    """What the hooks' cost does to its times, said when hooks slow the model down."""
    columns: ClassVar[tuple[ColumnSpec, ...]] = TIME_COLUMNS
    """The block of registered columns its readings fill (a clock that reads its stamps and
    nothing else: the stamps' times, :data:`~moduleprofiler.timing.columns.TIME_COLUMNS`)."""

    def __init__(self, device: torch.device, backward: bool = False) -> None:
        self.device = device
        """The device whose work it times."""
        self.stamps: StampSource = make_stamps(device)
        """What the hooks and the hook-free iterations stamp."""
        self.calibration: HookCalibration = calibrate_hooks(device, backward=backward)
        """The hooks' cost on the ``stamps``' clock."""
        self.notes: list[str] = []
        """What every result of this clock says (why an asked-for clock fell back...)."""

    def model(self) -> tuple[nn.Module, Callable[[], Any]] | None:
        """The module whose calls the pass's hooked and hook-free blocks make, and their call
        of it, when the clock decides them (a compiled model's original module, called
        eagerly); ``None``: the model as given (a compiled one's original module, timed
        eagerly with a note)."""
        return None

    def listeners(self) -> Sequence[Listener]:
        """Its own listeners, attached to the pass's one runner (active only in its
        ``blocks()``)."""
        return ()

    def blocks(self, runner: PassRunner, step: Step) -> list[Block]:
        """Its own kinds of iteration of the pass's ``step`` on ``runner``, for the loop."""
        return []

    def prime(self) -> None:
        """Once before the warm-up (start what takes seconds once, never kept)."""

    def settle(self) -> None:
        """Before each named mark of a step: make the host's stamp mean the work is done
        (a device clock waits for its device)."""

    def session(self, runner: PassRunner) -> AbstractContextManager[Callable[[], None]] | None:
        """A block of iterations the user drives (``TrainingProfiler``), timed its own way:
        yields the function that starts each iteration; kept when the block ends. ``None``:
        the clock has no kind of its own."""
        return None

    def finish(self, invoke: Callable[[], Any], plain: list[dict[str, float]]) -> None:
        """After the rounds, still inside the pass's state: with the hook-free iterations'
        marks in ``plain``, read what only a hook-free call can tell."""

    def readings(self) -> Readings:
        """What it read beyond the ``stamps``' own iterations (which the pass hands the
        result builder with these). A stamps-only clock read nothing more."""
        return Readings(clock=self.name)
