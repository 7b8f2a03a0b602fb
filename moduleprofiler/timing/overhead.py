"""What the hooks cost and what they change.

* :func:`calibrate_hooks` measures, once per process and device, the hooks' cost on a chain of
  empty modules: the *attribution* error (what a hooked empty module reads as its own time)
  and the whole-model cost of one hooked call; with gradients, the time a trivial backward
  node reads.
* :func:`interleave` runs hooked and hook-free blocks in alternating order, so that their
  whole-model times are compared under the same conditions (load, allocator, clocks);
  :func:`run_rounds` repeats such rounds for a fixed count or until a
  :class:`~moduleprofiler.timing.stats.StoppingRule` says enough.

What the hooks change (a fused fast path refused) is :mod:`moduleprofiler.codepaths`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from moduleprofiler.timing.clock import make_stamps
from moduleprofiler.timing.environment import timing_context
from moduleprofiler.timing.listener import ClockListener
from moduleprofiler.timing.stats import StoppingRule, StopReason

ROUND_SHARE = 0.05
"""An adaptive run's rounds grow to about this share of its time budget (20 rounds in it):
the block order rotates often, and the budget is overrun by at most one round."""
UNBUDGETED_ROUND_S = 0.5
"""Length an adaptive round grows to when the run has no time budget."""


class _Empty(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x


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


def plain_count(hooked: int, plain_fraction: float) -> int:
    """Hook-free iterations beside ``hooked`` instrumented ones: ``plain_fraction`` of them,
    at least one; none for a fraction of 0."""
    return max(1, math.ceil(plain_fraction * hooked)) if plain_fraction > 0 else 0


def split_rounds(kept: int, rounds: int | None, default: int,
                 plain_fraction: float) -> tuple[list[int], list[int]]:
    """Hooked iterations per round (``kept`` spread over ``min(rounds or default, kept)``
    rounds) and hook-free ones (:func:`plain_count` of each)."""
    n_rounds = max(1, min(rounds if rounds is not None else default, kept))
    hooked = [kept // n_rounds + (1 if r < kept % n_rounds else 0) for r in range(n_rounds)]
    return hooked, [plain_count(n, plain_fraction) for n in hooked]


def run_rounds(run_round: Callable[[int, int], None], rule: StoppingRule,
               samples: Callable[[], Sequence[Sequence[float]]],
               sizes: Sequence[int] | None = None) -> StopReason:
    """Run rounds until done; round ``r`` is ``run_round(r, n)`` with ``n`` instrumented
    iterations (a round of :func:`interleave`).

    With ``sizes`` (a fixed count, from :func:`split_rounds`) exactly those rounds run:
    ``"num_iters"``. Otherwise the run is adaptive: the first round has one iteration of
    each block; each later one is sized from the rate so far to last about
    :data:`ROUND_SHARE` of the budget (at most twice the previous round, and no more than
    the budget has left, one iteration at least); after each round ``rule.check(*samples())``
    decides, so the run ends within the budget plus one round."""
    round_s = (ROUND_SHARE * rule.max_seconds if rule.max_seconds is not None
               else UNBUDGETED_ROUND_S)
    size = 1
    number = 0
    while True:
        count = sizes[number] if sizes is not None else size
        began = time.perf_counter()
        run_round(number, count)
        per_iteration = (time.perf_counter() - began) / count
        number += 1
        if sizes is not None:
            if number == len(sizes):
                rule.reason = "num_iters"
                return "num_iters"
            continue
        reason = rule.check(*samples())
        if reason is not None:
            return reason
        wanted = round_s / per_iteration if per_iteration > 0 else math.inf
        left = rule.remaining / per_iteration if per_iteration > 0 else math.inf
        size = int(max(1.0, min(2.0 * count, wanted, left)))


def interleave(hooked: list[int], plain: list[int],
               install: Callable[[], AbstractContextManager[object]],
               run_hooked: Callable[[], None], run_plain: Callable[[], None],
               extra: tuple[list[int], Callable[[int], None]] | None = None,
               offset: int = 0) -> None:
    """Rounds of ``hooked[r]`` instrumented and ``plain[r]`` hook-free iterations (and, with
    ``extra = (counts, run_block)``, one more block of ``counts[r]`` iterations, such as the
    kernel clock's traced ones); the order of the blocks rotates from round to round
    (``offset``: the number of the first round, for rounds run one call at a time). Hooks
    are installed for the instrumented block only, so the hook-free block runs the model's
    fast paths."""

    def hooked_block(count: int) -> None:
        with install():
            for _ in range(count):
                run_hooked()

    def plain_block(count: int) -> None:
        for _ in range(count):
            run_plain()

    blocks: list[tuple[list[int], Callable[[int], None]]] = [(hooked, hooked_block),
                                                             (plain, plain_block)]
    if extra is not None:
        blocks.append(extra)
    for round_number in range(len(hooked)):
        shift = (offset + round_number) % len(blocks)
        for counts, run_block in blocks[shift:] + blocks[:shift]:
            if counts[round_number]:
                run_block(counts[round_number])


def _measure(model: nn.Module, x: Tensor, device: torch.device, backward: bool,
             rounds: int, per_block: int) -> tuple[list[float], list[float], list[float]]:
    """Interleaved hooked and hook-free runs of ``model(x)`` (and ``.sum().backward()``):
    whole-forward times of each, and per hooked run the mean time read for one module
    (forward, or with ``backward`` the median backward time of one node)."""
    stamps = make_stamps(device)
    clock = ClockListener.on(model, stamps, backward)
    hooked: list[float] = []
    plain: list[float] = []
    per_module: list[float] = []

    def run_hooked() -> None:
        clock.begin()
        clock.mark("start")
        out = model(x)
        clock.mark("forward")
        if backward:
            out.sum().backward()
        times = clock.resolve(clock.snapshot())
        hooked.append(times.marks["forward"] - times.marks["start"])
        per_module.append(float(np.nanmedian(times.bwd_exclusive[1:])) if backward
                          else float(np.mean(times.fwd_inclusive[1:])))

    def run_plain() -> None:
        stamps.reset()
        first = stamps.stamp()
        out = model(x)
        last = stamps.stamp()
        if backward:
            out.sum().backward()
        a, b = stamps.resolve([first, last])
        plain.append(float(b - a))

    with torch.set_grad_enabled(backward), timing_context():
        interleave([per_block // 2], [per_block // 2], clock.installed, run_hooked,
                   run_plain)  # warm-up
        for samples in (hooked, plain, per_module):
            samples.clear()
        interleave([per_block] * rounds, [per_block] * rounds, clock.installed, run_hooked,
                   run_plain)
    return hooked, plain, per_module


def calibrate_hooks(device: torch.device, backward: bool = False,
                    refresh: bool = False) -> HookCalibration:
    """Measure the hooks' per-call cost on ``device`` (cached per process; ``refresh`` redoes
    it). Takes a few tens of milliseconds."""
    key = (str(device), backward)
    if key in _CACHE and not refresh:
        return _CACHE[key]
    width = 32
    chain = nn.Sequential(*[_Empty() for _ in range(width)]).to(device)
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
