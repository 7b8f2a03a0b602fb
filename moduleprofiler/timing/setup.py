"""What the two repeated-run hooked passes (``time_modules``, ``train_step_times``) start
from: the model, the device, one iteration's call, the clock and the pass's one runner
(:class:`HookedPass`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import nn

from moduleprofiler.codepaths import CodePathWarning, eager_module
from moduleprofiler.devices import timed_device
from moduleprofiler.failure import located_errors
from moduleprofiler.inputs import make_invocation, unwrap_compiled
from moduleprofiler.progress import Progress
from moduleprofiler.runner import Listener, PassRunner
from moduleprofiler.timing.clock import issue_warnings
from moduleprofiler.timing.clocks.choice import make_clock
from moduleprofiler.timing.clocks.protocol import Clock
from moduleprofiler.timing.device_trace import ClockName
from moduleprofiler.timing.iteration import RawIteration, marks_span_ns
from moduleprofiler.timing.listener import ClockListener, Step, stamped_block
from moduleprofiler.timing.loop import Block, LoopRun, Plan, TimingOptions, measure, plain_count
from moduleprofiler.timing.ranks import rank_agreement
from moduleprofiler.warn import warn


@dataclass(frozen=True)
class HookedPass:
    """What ``time_modules`` and ``train_step_times`` start from: the model whose calls are
    timed (a compiled wrapper's eager module), the device whose clock is read, one
    iteration's call of the model, the clock, and the notes so far (each already warned)."""

    module: nn.Module
    device: torch.device
    invoke: Callable[[], Any]
    clock: Clock
    notes: list[str]

    @classmethod
    def start(cls, module: nn.Module, input: Any, pred_fn: Callable[..., Any] | None,
              device: str | torch.device | None, clock: ClockName | Clock, bar: Progress,
              kept: int | None, backward: bool = False) -> HookedPass:
        """Resolve the model, device and call, and choose and calibrate the clock (the
        progress line says so). A compiled model's forward is timed by the compiled clock
        (its records are its original module's calls); under another clock (or with
        ``pred_fn``, which calls the model itself) its original module is timed eagerly and
        warned at the pass's caller, as is an unavailable clock."""
        resolved = timed_device(unwrap_compiled(module), input, device)
        bar.update(0, kept, "calibrating the hooks")
        made = make_clock(resolved, clock, backward=backward, model=module, input=input,
                          pred_fn=pred_fn)
        notes: list[str] = []
        chosen = made.model()
        if chosen is not None:
            module, invoke = chosen
        else:
            module, compiled = eager_module(module)
            if compiled is not None:
                notes.append(compiled)
                warn(compiled, CodePathWarning)
            invoke = make_invocation(module, input, pred_fn)
        notes.extend(made.notes)
        issue_warnings(made.notes)
        return cls(module, resolved, invoke, made, notes)

    def runner(self, stampers: Sequence[ClockListener], outer: Sequence[Listener] = ()
               ) -> PassRunner:
        """The pass's one runner: the ``outer`` listeners, the clock's and the ``stampers``
        (innermost, so that the others' work stays outside their stamps), each block running
        its own of them."""
        runner = PassRunner(self.module, [*outer, *self.clock.listeners(), *stampers])
        for stamper in stampers:
            stamper.attach(runner, outer)
        return runner

    def measure(self, step: Step, hooked: Mapping[str, tuple[ClockListener, list[RawIteration]]],
                plain: list[dict[str, float]], plan: Plan, options: TimingOptions,
                bar: Progress, state: Sequence[AbstractContextManager[Any]],
                finish: Callable[[], None] | None = None) -> LoopRun:
        """The pass's rounds on the one measurement loop, blocks rotated: for each watched
        series (by name) a hooked block of ``step`` whose kept raw iterations go to the list
        given; the hook-free block (its marks in ``plain``); the clock's own blocks."""
        blocks = [Block(listener.block(step, raws), dropped=True)
                  for listener, raws in hooked.values()]
        blocks.append(Block(stamped_block(self.clock.stamps, step, plain),
                            share=partial(plain_count, plain_fraction=options.plain_fraction)))
        runner = next(iter(hooked.values()))[0].runner
        assert runner is not None
        blocks.extend(self.clock.blocks(runner, step))
        with located_errors(self.module):  # a hook-free iteration's failure, named too
            return measure(plan, blocks, lambda: {
                name: [marks_span_ns(raw) for raw in raws] for name, (_, raws) in hooked.items()},
                self.device, bar, options, state=state, prime=self.clock.prime, finish=finish,
                ranks=rank_agreement(self.module),
                judged=lambda: {"hook-free iterations": [  # the step's last mark ends it
                    max(marks.values()) - marks["start"] for marks in plain]})
