"""What a hooked timing pass times with (``time_modules``, ``train_step_times``,
``TrainingProfiler``): the clock chosen for the device, the hooks' calibration on the host
clock, the stamps, and under the kernel clock its traced iterations."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from moduleprofiler.timing.clock import StampSource, make_stamps
from moduleprofiler.timing.device_trace import ClockName, choose_clock
from moduleprofiler.timing.kernel_clock import DeviceIteration, KernelClock, TracedBlock
from moduleprofiler.timing.overhead import HookCalibration, calibrate_hooks


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
