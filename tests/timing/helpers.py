"""Modules of known duration for the timing tests.

``Spin(fwd_us, bwd_us)`` busy-waits on ``perf_counter_ns`` for ``fwd_us`` in forward and, when
autograd is recording, ``bwd_us`` in backward (a custom autograd Function), so the truth is
known by construction.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch import Tensor, nn


def spin(ns: int) -> None:
    """Busy-wait ``ns`` nanoseconds."""
    end = time.perf_counter_ns() + ns
    while time.perf_counter_ns() < end:
        pass


class _SpinFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor | None, fwd_ns: int,  # type: ignore[override]
                bwd_ns: int) -> Tensor:
        spin(fwd_ns)
        ctx.bwd_ns = bwd_ns
        ctx.has_weight = weight is not None
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        spin(ctx.bwd_ns)
        weight_grad = grad.new_zeros(1) if ctx.has_weight else None
        return grad, weight_grad, None, None


class Spin(nn.Module):
    """Forward takes ``fwd_us``, backward ``bwd_us`` (0: no extra backward work)."""

    def __init__(self, fwd_us: float, bwd_us: float = 0.0, param: bool = False) -> None:
        super().__init__()
        self.fwd_ns = int(fwd_us * 1000)
        self.bwd_ns = int(bwd_us * 1000)
        self.weight = nn.Parameter(torch.zeros(1)) if param else None

    def forward(self, x: Tensor) -> Tensor:
        if torch.is_grad_enabled() and (x.requires_grad or self.weight is not None):
            return _SpinFunction.apply(x, self.weight, self.fwd_ns, self.bwd_ns)
        spin(self.fwd_ns)
        return x


class GpuSleep(nn.Module):
    """One GPU kernel that keeps the GPU busy for ``cycles`` clock cycles
    (``torch.cuda._sleep``); the input passes through."""

    def __init__(self, cycles: int) -> None:
        super().__init__()
        self.cycles = cycles

    def forward(self, x: Tensor) -> Tensor:
        torch.cuda._sleep(self.cycles)
        return x


class Boom(nn.Module):
    """Raises on its ``fail_on``-th call (1-based), counting across the whole test."""

    def __init__(self, fail_on: int) -> None:
        super().__init__()
        self.calls = 0
        self.fail_on = fail_on

    def forward(self, x: Tensor) -> Tensor:
        self.calls += 1
        if self.calls == self.fail_on:
            raise RuntimeError("boom")
        return x


def no_hooks_left(model: nn.Module) -> bool:
    """True when no module of ``model`` has any hook and no parameter a grad hook."""
    for module in model.modules():
        for name in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
                     "_backward_pre_hooks", "_forward_hooks_always_called",
                     "_forward_hooks_with_kwargs", "_forward_pre_hooks_with_kwargs"):
            if getattr(module, name, None):
                return False
    for param in model.parameters():
        if getattr(param, "_post_accumulate_grad_hooks", None) or param._backward_hooks:
            return False
    return True


def training_flags(model: nn.Module) -> list[bool]:
    """Every module's own ``training`` flag, in ``modules()`` order."""
    return [module.training for module in model.modules()]


def rel_err(measured: float, truth: float) -> float:
    """Signed relative error."""
    return (measured - truth) / truth


def isolated_ms(module: nn.Module, x: Tensor, reps: int = 40) -> float:
    """Median wall time (ms) of ``module(x)`` alone, no hooks, no grad: the ground truth of a
    busy-wait module (nominal duration plus its own Python call cost)."""
    samples = []
    with torch.no_grad():
        module(x)
        for _ in range(reps):
            start = time.perf_counter_ns()
            module(x)
            samples.append(time.perf_counter_ns() - start)
    samples.sort()
    return samples[len(samples) // 2] / 1e6


def gpu_event_ms(module: nn.Module, x: Tensor, reps: int = 20) -> float:
    """Median CUDA-event time (ms) of ``module(x)`` alone, its start event recorded behind a
    spin: the events enclose the kernel, not an idle GPU's wait for its launch (the module
    clock primes an idle stream the same way). The GPU-bound ground truth."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(reps):
        torch.cuda._sleep(1_000_000)
        start.record()
        module(x)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[reps // 2]


def within_attempts(check: Any, tries: int = 3, pause_s: float = 1.0) -> None:
    """Run ``check()`` (which measures and returns a list of failure messages) up to ``tries``
    times, ``pause_s`` apart, and fail with every attempt's messages if none is clean. Timing
    on a shared machine has bursts of load lasting seconds; a real error fails every attempt."""
    import pytest

    failures: list[str] = []
    for attempt in range(tries):
        if attempt and pause_s:
            time.sleep(pause_s)
        found = check()
        if not found:
            return
        failures.append(f"attempt {attempt + 1}: " + "; ".join(found))
    pytest.fail(" | ".join(failures))


def module_row(timing: Any, path: str) -> dict[str, Any]:
    """The module frame's row of ``path`` (``""``: the root) in a timing result: every
    statistic of the module is a column there (``time_median_ms``, ``time_p95_ms``,
    ``backward_time_median_ms``, ``low_confidence``...)."""
    frame = timing.to_df("module")
    row: dict[str, Any] = frame.iloc[[info.path for info in timing.modules].index(path)].to_dict()
    return row


class ResidualBlock(nn.Module):
    """``relu(fc(x)) + x``: a linear layer, an activation and an add that a compiler fuses
    across the block's submodules."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)
        self.act = nn.ReLU()

    def forward(self, x: Tensor) -> Tensor:
        return self.act(self.fc(x)) + x


def residual_model() -> nn.Sequential:
    """Two :class:`ResidualBlock` around a ``LayerNorm(16)``, seeded: the compiled-model tests'
    model (input ``(batch, 16)``)."""
    torch.manual_seed(0)
    return nn.Sequential(ResidualBlock(), nn.LayerNorm(16), ResidualBlock())


class Breaks(nn.Module):
    """``b(a(x)).relu()`` with a ``print`` between: Dynamo cannot trace it, so a compile of
    this module breaks its graph there."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 16)

    def forward(self, x: Tensor) -> Tensor:
        x = self.a(x)
        print(end="")  # Dynamo cannot trace print: the graph breaks here
        return self.b(x).relu()
