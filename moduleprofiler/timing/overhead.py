"""What the hooks cost and what they change.

* :func:`calibrate_hooks` measures, once per process and device, the hooks' cost on a chain of
  empty modules: the *attribution* error (what a hooked empty module reads as its own time)
  and the whole-model cost of one hooked call; with gradients, the time a trivial backward
  node reads.
  Its hooked and hook-free runs are interleaved by the one measurement loop
  (:mod:`moduleprofiler.timing.loop`).

What the hooks change (a fused fast path refused) is :mod:`moduleprofiler.codepaths`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from moduleprofiler.progress import Progress
from moduleprofiler.timing.clocks.stamps import make_stamps
from moduleprofiler.timing.iteration import RawIteration, marks_span_ns
from moduleprofiler.timing.listener import ClockListener, stamped_block
from moduleprofiler.timing.loop import Block, TimingOptions, measure


class _Scale(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x * 1.0


@dataclass(frozen=True)
class HookCalibration:
    """Per-call costs of the instrumentation on one device, in nanoseconds."""

    device: str
    attribution_ns: float
    """Median time a hooked empty module reads as its own (the hooks' share inside the
    interval): the error in every call's inclusive time."""
    per_call_ns: float
    """Whole-model cost of one hooked call (hooked minus hook-free, per call). Child calls'
    hooks add this much to their parent's self time."""
    grad_per_call_ns: float = math.nan
    """Forward cost of one hooked call that creates one autograd node, with backward tracking
    on (hooked minus hook-free, per call); the error bound used for forward times measured
    during training steps."""
    backward_attribution_ns: float = math.nan
    """Median backward time read for a trivial node (``x * 1.0`` on one element): an upper
    bound of the backward instrumentation error per node."""


_CACHE: dict[tuple[str, bool], HookCalibration] = {}


def _measure(model: nn.Module, x: Tensor, device: torch.device, backward: bool,
             rounds: int, per_block: int) -> tuple[list[float], list[float], list[float]]:
    """Interleaved hooked and hook-free runs of ``model(x)`` (and ``.sum().backward()``) in
    the measurement loop: whole-forward times of each, and per hooked run the mean time read
    for one module (forward, or with ``backward`` the median backward time of one node)."""
    stamps = make_stamps(device)
    clock = ClockListener.on(model, stamps, backward)
    raws: list[RawIteration] = []
    plain: list[dict[str, float]] = []

    def step(mark: Callable[[str], None], run: Callable[[Callable[[], Any]], Any]) -> None:
        mark("start")
        out = run(lambda: model(x))
        mark("forward")
        if backward:
            out.sum().backward()

    options = TimingOptions(num_iters=rounds * per_block, drop_first=0, rounds=rounds,
                            warmup_seconds=0.0, warmup_iters=per_block // 2, progress=False)
    measure(options.plan(0, rounds),
            [Block(clock.block(step, raws)), Block(stamped_block(stamps, step, plain))],
            lambda: {"hooked": [marks_span_ns(raw) for raw in raws]}, device,
            Progress("calibrating the hooks", False), options,
            state=[torch.enable_grad() if backward else torch.no_grad()])
    times = [clock.resolve(raw) for raw in raws]
    # each module of the chain runs once, right after the root's call: its call's time
    per_module = [float(np.nanmedian(t.call_bwd_exclusive[1:])) if backward
                  else float(np.mean(t.call_fwd_inclusive[1:])) for t in times]
    return ([t.marks["forward"] - t.marks["start"] for t in times],
            [m["forward"] - m["start"] for m in plain], per_module)


def calibrate_hooks(device: torch.device, backward: bool = False,
                    refresh: bool = False) -> HookCalibration:
    """Measure the hooks' per-call cost on ``device`` (cached per process; ``refresh`` redoes
    it). Takes a few tens of milliseconds."""
    key = (str(device), backward)
    if key in _CACHE and not refresh:
        return _CACHE[key]
    width = 32
    chain = nn.Sequential(*[nn.Identity() for _ in range(width)]).to(device)
    hooked, plain, leaf = _measure(chain, torch.zeros(1, device=device), device, False, 6, 10)
    attribution = float(np.median(leaf))
    per_call = max(0.0, (float(np.median(hooked)) - float(np.median(plain))) / (width + 1))
    grad_per_call, backward_ns = math.nan, math.nan
    if backward:  # with backward tracking: the forward cost and a trivial node's time
        width = 16
        chain = nn.Sequential(*[_Scale() for _ in range(width)]).to(device)
        x = torch.ones(1, device=device, requires_grad=True)
        hooked, plain, nodes = _measure(chain, x, device, True, 4, 6)
        grad_per_call = max(0.0, (float(np.median(hooked)) - float(np.median(plain)))
                            / (width + 1))
        backward_ns = float(np.median(nodes))
    calibration = HookCalibration(str(device), attribution, max(per_call, attribution),
                                  grad_per_call, backward_ns)
    _CACHE[key] = calibration
    return calibration
