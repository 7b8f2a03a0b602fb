"""Profile real training steps in place (nnprofiler's ``LayerProf``, DeepSpeed's start/stop).

::

    with TrainingProfiler(model, start_step=5, stop_step=25) as prof:
        for batch in loader:
            loss = loss_fn(model(batch.x), batch.y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            prof.step()
    print(prof.layerwise_summary())

Hooks are installed only for steps ``start_step <= step < stop_step`` (counted by
:meth:`TrainingProfiler.step`) and removed outside them and on exit; the model is never
modified. The hooks are the pass runner's, with a clock listener; they stay installed across
the user's own forwards. Profiled steps alternate between forward hooks only (forward samples)
and backward hooks too (backward samples). Without ``step()`` calls, everything inside the
``with`` block is one step (timed with backward hooks, forward and backward). On CUDA, each
profiled step ends with one device synchronisation (to read its events).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from functools import partial
from types import TracebackType
from typing import Any

import pandas as pd
import torch
from torch import nn

from moduleprofiler.deprecation import warn_deprecated
from moduleprofiler.devices import resolve_device
from moduleprofiler.inputs import compiled_inside
from moduleprofiler.modules import module_infos
from moduleprofiler.records import display_path
from moduleprofiler.runner import PassRunner
from moduleprofiler.timing.backward import BackwardMethod, StepRows, TrainingTiming, check_method
from moduleprofiler.timing.clock import issue_warnings
from moduleprofiler.timing.clocks.choice import make_clock
from moduleprofiler.timing.clocks.protocol import Clock
from moduleprofiler.timing.device_trace import ClockName
from moduleprofiler.timing.environment import capture_environment, environment_warnings
from moduleprofiler.timing.listener import ClockListener
from moduleprofiler.validate import check_int, check_pass, check_real

Session = Callable[[], AbstractContextManager[Callable[[], None]] | None]
"""A clock's own kind of step (:meth:`~.clocks.protocol.Clock.session`), opened when its
steps begin."""


class TrainingProfiler:
    """Per-module forward/backward times of the training steps run inside its ``with`` block.

    Args:
        model: the model to watch.
        start_step: first step (0-based, counted by :meth:`step`) to profile; earlier steps
            run without hooks (warm-up).
        stop_step: first step not profiled (``None``: until the block ends).
        method: backward attribution; ``"nodes"`` (``"auto"``) is the only one.
        alternate: profiled steps alternate between forward hooks only (forward samples) and
            backward hooks too (backward samples), so that forward times do not carry the
            backward hooks' cost; ``False`` takes both from every profiled step.
        device: whose clock to use (default: the model's).
        confidence: level of the medians' confidence intervals.
        clock: as in :func:`~moduleprofiler.timing.time_modules`. Under the kernel clock (the
            default on CUDA) every third profiled step runs inside a PyTorch profiler session
            (the device times); the others give the host times.

    Raises:
        TypeError: ``model`` is not a module, ``start_step`` / ``stop_step`` is not an int,
            ``alternate`` not a bool or ``confidence`` not a number.
        ValueError: ``start_step`` is negative, ``stop_step`` not after it, or
            ``confidence`` not in (0, 1).
    """

    def __init__(self, model: nn.Module, *, start_step: int = 0, stop_step: int | None = None,
                 method: BackwardMethod | None = None, alternate: bool = True,
                 device: str | torch.device | None = None, confidence: float = 0.95,
                 clock: ClockName | Clock = "auto") -> None:
        # checked before the first step: the steps are the user's own training, which a bad
        # argument must not stop halfway, nor spoil only when the result is read
        check_pass(model, alternate=alternate)
        check_int(start_step, "start_step", 0, optional=False)
        check_int(stop_step, "stop_step", 1)
        check_real(confidence, "confidence", "a number in (0, 1)")
        if not 0 < confidence < 1:
            raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
        if stop_step is not None and stop_step <= start_step:
            raise ValueError(
                f"need 0 <= start_step < stop_step, got start_step={start_step}, "
                f"stop_step={stop_step}"
            )
        self.model = model
        self.start_step = start_step
        self.stop_step = stop_step
        self.method = check_method(method)
        self.alternate = alternate
        self.device = resolve_device(model, None, device)
        self.confidence = confidence
        self.step_index = 0
        self._clock = make_clock(self.device, clock, backward=True)
        issue_warnings(self._clock.notes)
        self._forward = ClockListener(self._clock.stamps)
        self._backward = ClockListener(self._clock.stamps, backward=True)
        inside = compiled_inside(model)
        runner = PassRunner(model, [*self._clock.listeners(), self._forward, self._backward],
                            unhookable=inside)
        self._runner = runner
        self._notes = (_compiled_note({runner.paths[id(m)] for m in inside}),) if inside \
            else ()
        issue_warnings(self._notes)
        self._forward.attach(runner)
        self._backward.attach(runner)
        session = self._clock.session(runner)
        self._session: Session | None = None if session is None else partial(
            self._clock.session, runner)
        self._rows = StepRows(module_infos(model))
        self._current: ClockListener | Session | None = None
        self._begin: Callable[[], None] | None = None
        self._hooks: ExitStack | None = None
        self._entered = False
        self._paused = False  # between step(pause=True) and resume(): no step runs
        self._environment: dict[str, Any] = {}
        self._issued: set[str] = set()  # result() may be asked often: each warning once
        self._failed: list[str] = []
        """The module path whose forward raised, per profiled step dropped for it."""

    # -- context manager -------------------------------------------------------------------
    def __enter__(self) -> TrainingProfiler:
        self._entered = True
        self._paused = False
        self._environment = capture_environment(self.device)
        self._sync_hooks()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            if exc_type is None:
                self._flush()
        finally:
            self._uninstall()
            self._entered = False

    @property
    def active(self) -> bool:
        """Whether the current step is being profiled."""
        return self._hooks is not None

    def step(self, *, pause: bool = False) -> None:
        """Mark the end of a training step (call it once per step, after the optimizer).

        ``pause=True``: the next step starts at :meth:`resume`, not now, and the hooks are
        off until then, so what runs between two steps (a validation loop after the
        training batch, a checkpoint) is no step's: timed as the next step's first calls,
        an evaluation forward of another batch would stand in that step's samples for the
        training forward."""
        if not isinstance(pause, bool):
            raise TypeError(f"pause must be a bool, got {type(pause).__name__}")
        self._flush(restart=False)
        self.step_index += 1
        self._paused = pause
        if pause:
            self._uninstall()
        else:
            self._sync_hooks()

    def resume(self) -> None:
        """The next step starts, after :meth:`step` with ``pause=True``: its hooks go back
        on. Without a pause it does nothing (a step already running goes on)."""
        if self._paused:
            self._paused = False
            self._sync_hooks()

    # -- results ---------------------------------------------------------------------------
    def result(self) -> TrainingTiming:
        """The profiled steps so far (the open step is closed first if it recorded calls).
        Its warnings are also issued as
        :class:`~moduleprofiler.timing.clock.TimingWarning`, each once per profiler."""
        if self.active:
            self._flush(restart=True)
        env = dict(self._environment)
        notes = environment_warnings(env, None, self.device)
        if self._failed:
            where = ", ".join(repr(display_path(path)) for path in dict.fromkeys(self._failed))
            notes.append(f"{len(self._failed)} profiled step(s) dropped: their forward raised "
                         f"(in module {where}) and the training went on, so the step is not "
                         "whole")
        if not self._rows.fwd and not self._rows.bwd and "" not in self._runner.unhooked:
            notes.append("no step was profiled: check start_step/stop_step and step() calls")
        issue_warnings([note for note in notes if note not in self._issued])
        self._issued.update(notes)
        return self._rows.build(
            self._clock.readings, method=self.method,
            separate_passes=self.alternate and bool(self._rows.fwd),
            calibration=self._clock.calibration, device=str(self.device),
            dropped=len(self._failed),
            confidence=self.confidence, environment=env, unhooked=self._runner.unhooked,
            warnings=(*self._clock.notes, *self._notes, *notes),
        )

    def layerwise_summary(self) -> str:
        """The model tree with median forward and backward times per step (see
        :meth:`TrainingTiming.layerwise_summary`)."""
        return self.result().layerwise_summary()

    report = layerwise_summary
    """The same text as :meth:`layerwise_summary`, by the name every timing result uses."""

    def summary(self) -> str:
        """Deprecated: :meth:`report` (a result's ``summary()`` is its one-row model
        summary)."""
        warn_deprecated("TrainingProfiler.summary()", "use report() (the same text)")
        return self.report()

    def to_df(self) -> pd.DataFrame:
        """Deprecated: ``result().to_df("module")``, the same table. A result's ``to_df()``
        is one row per call, and this one was per module under the same name."""
        warn_deprecated("TrainingProfiler.to_df()", 'use result().to_df("module") (the same '
                        "table: one row per module; result().to_df() is one row per call, "
                        "as every result's)")
        return self.result().to_df("module")

    # -- internals -------------------------------------------------------------------------
    def _in_window(self) -> bool:
        return self.step_index >= self.start_step and (
            self.stop_step is None or self.step_index < self.stop_step)

    def _wanted(self) -> ClockListener | Session | None:
        if not (self._entered and self._in_window()):
            return None
        # window steps 0, 2, 4, ...: backward hooks; 1, 3, 5, ...: forward hooks only (the
        # first being a backward-hook step, a block without step() calls gets both); a clock
        # with a kind of its own (the kernel clock's traced steps) takes every third step
        kinds: list[ClockListener | Session] = [self._backward]
        if self.alternate:
            kinds.append(self._forward)
        if self._session is not None:
            kinds.append(self._session)
        return kinds[(self.step_index - self.start_step) % len(kinds)]

    def _sync_hooks(self) -> None:
        wanted = self._wanted()
        if wanted is not None and wanted is self._current:
            self._start_step()  # the same kind goes on: the next step starts
            return
        self._uninstall()
        if wanted is not None:
            self._hooks = ExitStack()
            self._current = wanted
            if isinstance(wanted, ClockListener):
                self._hooks.enter_context(wanted.installed())
            else:
                session = wanted()
                assert session is not None
                self._begin = self._hooks.enter_context(session)
            self._start_step()

    def _start_step(self) -> None:
        current = self._current
        if isinstance(current, ClockListener):
            current.begin()
            current.mark("start")
        elif self._begin is not None:
            self._begin()

    def _uninstall(self) -> None:
        if self._hooks is not None:
            hooks, self._hooks = self._hooks, None
            self._current = self._begin = None
            hooks.close()  # a clock's own kind keeps its steps when it closes

    def _flush(self, restart: bool = True) -> None:
        """Close the open step: resolve its stamps and store it (if anything ran)."""
        clock = self._current
        if clock is None:
            return
        if not isinstance(clock, ClockListener):  # the clock's own kind: its block ends
            self._uninstall()
            if restart:
                self._sync_hooks()
            return
        clock.mark("end")
        times = clock.resolve(clock.snapshot())
        failed = self._runner.raised_path()
        if failed is not None:  # a forward raised and the user's loop caught it: half a step
            self._failed.append(failed)
        elif times.calls.sum() > 0:
            kind = "backward_hooks" if clock is self._backward else "forward_hooks"
            self._rows.add(kind, times, ("start", "end"), self.alternate)
        if restart:
            clock.begin()
            clock.mark("start")


def track(model: nn.Module, **kwargs: Any) -> TrainingProfiler:
    """``with track(model) as prof: ...`` — a :class:`TrainingProfiler` (same arguments)."""
    return TrainingProfiler(model, **kwargs)


def _compiled_note(found: set[str]) -> str:
    """What a watched model with compiled code of its own is timed as, from the paths of the
    modules inside that code (whole subtrees: a region starts where a parent is outside)."""
    per_module = ("train_step_times(model, ...) books a compiled training step's kernels to "
                  "every module")
    if "" in found:
        return ("the model's own call runs inside compiled code (model.compile(), or a "
                "training step compiled on it), so no module of it can carry hooks (a hook "
                "would be traced into the program, with a graph break at every module, or "
                f"never be called) and its steps are not timed per module; {per_module}")
    where = ", ".join(repr(path) for path in sorted(found)
                      if path.rpartition(".")[0] not in found)
    return (f"modules run inside code torch.compile compiled ({where} and every module "
            "in it): they carry no hooks, since a hook there would be traced into the compiled "
            "program (a graph break at every module, recompiled pieces) or never be called; "
            f"their time is in the calling module's. {per_module}")
