"""What a hooked timing pass times with (``time_modules``, ``train_step_times``,
``TrainingProfiler``): the clock chosen for the device, the hooks' calibration on the host
clock, the stamps, and under the kernel clock its traced iterations; and what the two
repeated-run passes start from (:class:`HookedPass`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch
from torch import nn

from moduleprofiler.codepaths import CodePathWarning, eager_module
from moduleprofiler.inputs import make_invocation
from moduleprofiler.progress import Progress
from moduleprofiler.timing.clock import StampSource, TimingWarning, make_stamps, resolve_device
from moduleprofiler.timing.device_trace import ClockName, choose_clock
from moduleprofiler.timing.iteration import RawIteration, marks_span_ns
from moduleprofiler.timing.kernel_clock import DeviceIteration, KernelClock, TracedBlock
from moduleprofiler.timing.listener import ClockListener, Step, stamped_block
from moduleprofiler.timing.loop import Block, LoopRun, Plan, TimingOptions, measure, plain_count
from moduleprofiler.timing.overhead import HookCalibration, calibrate_hooks
from moduleprofiler.warn import warn


@dataclass
class HookedClocks:
    """The clocks of one hooked pass over a model on ``device``."""

    device: torch.device
    stamps: StampSource
    """Host stamps: the CPU clock under the kernel clock, else the device's clock."""
    calibration: HookCalibration
    kernels: KernelClock | None
    """The kernel clock (device times from the device's kernel records), or ``None``."""
    fallback: str | None
    """Why the clock asked for could not be had (a warning), else ``None``."""
    traced: list[DeviceIteration] = field(default_factory=list)
    """The kept traced iterations."""
    outside_ns: float = 0.0
    """Device time of their activities launched outside every module call."""

    @classmethod
    def choose(cls, module: nn.Module, device: torch.device, clock: ClockName,
               backward: bool = False) -> HookedClocks:
        """Choose the clock for ``device`` (:func:`~.device_trace.choose_clock`) and
        calibrate the hooks on the host clock (with ``backward``, their backward cost too)."""
        mode, fallback = choose_clock(device, clock)
        kernels = mode == "kernels"
        host = torch.device("cpu") if kernels else device
        return cls(device, make_stamps(host), calibrate_hooks(host, backward=backward),
                   KernelClock.on(module, backward=backward) if kernels else None, fallback)

    @property
    def kind(self) -> str:
        """The clock's name in a result: ``"cuda-kernels"``, ``"cuda-events"``, ``"cpu-wall"``."""
        return "cuda-kernels" if self.kernels is not None else self.stamps.kind

    def trace(self, count: int, keep: bool, step: Callable[[KernelClock], None]) -> None:
        """``count`` iterations of ``step(kernel_clock)`` inside one profiler session; their
        device times are kept with ``keep``."""
        assert self.kernels is not None
        with self.kernels.installed(), self.kernels.traced(self.device) as block:
            for _ in range(count):
                step(self.kernels)
        if keep:
            self.keep(block)

    def keep(self, block: TracedBlock) -> None:
        """Keep a traced block's iterations that made module calls."""
        if block.iterations:
            self.traced.extend(step for step in block.iterations if step.call_launches.size)
            self.outside_ns += block.outside_ns


@dataclass(frozen=True)
class HookedPass:
    """What ``time_modules`` and ``train_step_times`` start from: the model whose calls are
    timed (a compiled wrapper's eager module), the device whose clock is read, one
    iteration's call of the model, the clocks, and the notes so far (each already warned)."""

    module: nn.Module
    device: torch.device
    invoke: Callable[[], Any]
    clocks: HookedClocks
    notes: list[str]

    @classmethod
    def start(cls, module: nn.Module, input: Any, pred_fn: Callable[..., Any] | None,
              device: str | torch.device | None, clock: ClockName, bar: Progress,
              kept: int | None, backward: bool = False) -> HookedPass:
        """Resolve the model, device and call, and choose and calibrate the clocks (the
        progress line says so); a compiled model or an unavailable clock is warned at the
        pass's caller."""
        module, compiled = eager_module(module)
        notes = [compiled] if compiled is not None else []
        if compiled is not None:
            warn(compiled, CodePathWarning)
        resolved = resolve_device(module, input, device)
        invoke = make_invocation(module, input, pred_fn)
        bar.update(0, kept, "calibrating the hooks")
        clocks = HookedClocks.choose(module, resolved, clock, backward=backward)
        if clocks.fallback is not None:
            notes.append(clocks.fallback)
            warn(clocks.fallback, TimingWarning)
        return cls(module, resolved, invoke, clocks, notes)

    def measure(self, step: Step, hooked: Mapping[str, tuple[ClockListener, list[RawIteration]]],
                plain: list[dict[str, float]], plan: Plan, options: TimingOptions,
                bar: Progress, state: Sequence[AbstractContextManager[Any]],
                finish: Callable[[], None] | None = None) -> LoopRun:
        """The pass's rounds on the one measurement loop, blocks rotated: for each watched
        series (by name) a hooked block of ``step`` whose kept raw iterations go to the list
        given; the hook-free block (its marks in ``plain``); under the kernel clock, traced
        iterations of ``step`` (a quarter of a round's count, none in the warm-up; one run
        first, not kept: the first profiler session starts CUPTI, which takes seconds)."""
        blocks = [Block(listener.block(step, raws), dropped=True)
                  for listener, raws in hooked.values()]
        blocks.append(Block(stamped_block(self.clocks.stamps, step, plain),
                            share=partial(plain_count, plain_fraction=options.plain_fraction)))
        prime = None
        if self.clocks.kernels is not None:
            blocks.append(Block(partial(self.clocks.trace, step=lambda clock: step(
                lambda name: None, clock.run)), share=lambda count: max(1, count // 4),
                warm=False))  # a traced iteration's device times need no marks
            prime = partial(blocks[-1].run, 1, False)
        return measure(plan, blocks, lambda: {
            name: [marks_span_ns(raw) for raw in raws] for name, (_, raws) in hooked.items()},
            self.device, bar, options, state=state, prime=prime, finish=finish,
            judged=lambda: {"hook-free iterations": [  # the step's last mark ends it
                max(marks.values()) - marks["start"] for marks in plain]})
