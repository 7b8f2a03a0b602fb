"""The profiling window a training-framework callback drives: the shared core of the
integrations (``docs/integrations/``).

A callback calls :meth:`StepWindow.start` once, :meth:`StepWindow.before_step` and
:meth:`StepWindow.after_step` around every training step, and :meth:`StepWindow.finish` when
training ends. The window

* counts once, on its first step's batch: ``Profiler().profile(model, forward_args(batch),
  backward=True)``, in the model's own training mode (a pass leaves the random number
  generators as it found them: it draws nothing from the training's);
* times steps ``start_step <= step < start_step + num_steps`` per module with
  :class:`~moduleprofiler.timing.TrainingProfiler`, from :meth:`StepWindow.before_step` to
  :meth:`StepWindow.after_step` (its hooks are off in between: a validation loop run between
  two training steps is neither's), and up to ``num_steps`` hook-free steps just before them
  as whole steps (``step_ms``, the MFU's time; step 0, a cold start, only when it is the one
  step before the window; a step during which ``torch.compile`` compiled never: it would
  time the compiler, and a :class:`WindowWarning` says so);
* builds a :class:`WindowResult`: the profile with the times attached, the flat scalars a
  logger takes, and (under ``torch.distributed``) every rank's profile gathered on rank 0.

It never changes training: parameters, buffers, ``.grad``, training flags and the random
number generators are as they would be without it (the one state restore of every pass,
:func:`~moduleprofiler.state.preserved_state`; the optimizer is never seen). This module
imports no training framework.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import statistics
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any, TypeVar

import pandas as pd
import torch
from torch import nn
from torch._dynamo.utils import counters

from moduleprofiler.core import Profiler
from moduleprofiler.deprecation import warn_deprecated
from moduleprofiler.devices import CPU, resolve_device, synchronize
from moduleprofiler.distributed import DistributedProfile, gather
from moduleprofiler.efficiency import DevicePeaks, Utilization, device_peaks, utilization
from moduleprofiler.efficiency.device_names import table_name
from moduleprofiler.efficiency.utilization import knows_flops
from moduleprofiler.errors import FormulaError, LossError, ProfilingError
from moduleprofiler.export.profile import Profile
from moduleprofiler.inputs import compiled_inside
from moduleprofiler.memory import MemoryReport
from moduleprofiler.records import unknown_work
from moduleprofiler.shards import process_rank
from moduleprofiler.state import refuse_stepping_parameters
from moduleprofiler.timing import TrainingProfiler
from moduleprofiler.warn import warn

PREFIX = "moduleprofiler"
"""The first part of every logged key."""

REPORT_NAME = "moduleprofiler_report.html"
"""The HTML report's file name in the log directory."""

PROFILE_NAME = "moduleprofiler_profile.json"
"""The JSON profile's file name in the log directory."""

MODEL_SCALARS: dict[str, str] = {
    "step_ms": "median wall time of the hook-free training steps before the profiling window "
               "(on CUDA synchronised at both ends; a step during which torch.compile "
               "compiled is left out, with a warning)",
    "mfu": "model FLOPs utilisation: the model FLOPs of a training step (forward and "
           "backward, 2 x MACs) over step_ms times the device's peak FLOP/s for the dtype "
           "the step computes in, 0-1",
    "peak_tflops": "the device's peak FLOP/s mfu is measured against, in 1e12/s",
    "training_peak_bytes": "the most memory live during a training step's forward and "
                           "backward, on the counted batch",
    "complete": "1 when the forward's ops and MACs are exact, 0 when ops, flops and mfu are "
                "lower bounds (work without a formula; the window's warning names it): the "
                "model's complete, as the frame's root row and profile.summary() hold it",
    "backward_complete": "1 when the backward's counts are exact, 0 when backward_flops and "
                         "mfu are lower bounds: the frame's root row's backward_complete",
}
"""The model's scalars (``moduleprofiler/<name>``) and what each holds:
:attr:`WindowResult.step_ms`, :attr:`WindowResult.mfu` and :attr:`Utilization.peak_tflops
<moduleprofiler.efficiency.Utilization.peak_tflops>`, named as the fields holding them, and
``training_peak_bytes``, named as the column of the one-row model table (``profile.summary()``)
that holds the same number (:attr:`MemoryReport.peak_bytes
<moduleprofiler.memory.MemoryReport.peak_bytes>` of the training pass), and ``complete`` and
``backward_complete``, the flags of the same names of the model (the module frame's root row)
as 1 or 0: a logger's dashboard read later has no warning beside it."""

DEPRECATED_SCALARS: dict[str, str] = {"peak_bytes": "training_peak_bytes"}
"""Model scalars logged under an old name beside the new one until moduleprofiler 0.3.0:
``peak_bytes`` is ``training_peak_bytes`` (the window measures the training step only). Each
warns (a ``DeprecationWarning`` naming the release that removes it) once per callback, or
per :class:`StepWindow` used alone, not at every training run's window."""


class WindowWarning(UserWarning):
    """The profiling window did not profile what it was asked to: the profiling failed (the
    callback then turns itself off), or training ended before the window; or what it logs is
    a lower bound (some work had no formula: ``ops``, ``flops`` and ``mfu`` count only the
    rest); or MFU is not logged on a GPU (no peak for it, or for the step's dtype). Training
    goes on."""

COUNT_COLUMNS = ("params", "ops", "flops", "backward_flops",
                 "saved_bytes", "train_max_live_bytes")
"""The ``Profile.to_df("module")`` columns logged per module, under their own names (one
name per number: docs/conventions.md). A module's numbers include its children's, as its
times do; the memory ones are the training step's: bytes saved for the backward, and the
most memory live while the module ran."""

@dataclass
class WindowResult:
    """What one profiling window found (on rank 0 under ``torch.distributed``)."""

    profile: Profile
    """This rank's counted profile with the window's per-module times merged in
    (:meth:`Profile.merge`): one profile, its timing pass's facts in ``profile.facts``."""
    scalars: dict[str, float]
    """Flat ``{"moduleprofiler/...": value}`` for a logger; unknown values are left out."""
    step_ms: float | None
    """Median wall time of the hook-free steps before the window (``None``: none ran)."""
    mfu: float | None
    """Model FLOPs utilisation in that time (``None``: no device peak, or no step time)."""
    utilization: Utilization | None = None
    """What ``mfu`` was computed from: the model FLOPs, the step time, and the peak it was
    measured against (``utilization.dtype``, ``utilization.peak_tflops``: the dtype the step
    ran its multiply-accumulates in, under autocast the autocast dtype)."""
    distributed: DistributedProfile | None = None
    """Every rank's profile, when the window ran under ``torch.distributed`` with several
    ranks."""
    memory: MemoryReport | None = None
    """The training step's memory on the counted batch (``None`` with ``memory=False``)."""
    files: tuple[Path, ...] = field(default=())
    """The files :meth:`write` wrote."""

    def write(self, directory: str | PathLike[str]) -> tuple[Path, Path]:
        """Write :data:`REPORT_NAME` (the HTML report) and :data:`PROFILE_NAME` (the JSON; the
        gathered ranks' under ``torch.distributed``) into ``directory`` (created if missing);
        return their paths."""
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        report, document = folder / REPORT_NAME, folder / PROFILE_NAME
        source: Profile | DistributedProfile = (
            self.distributed if self.distributed is not None else self.profile)
        source.to_html(report)
        source.to_json(document)
        self.files = (report, document)
        return report, document


def identity(batch: Any) -> Any:
    """The batch as the model's input (``model(batch)``; a tuple is unpacked, a dict is passed
    as keywords: :meth:`Profiler.profile`'s rules)."""
    return batch


@dataclass(kw_only=True, eq=False)
class StepWindow:
    """Profiles training steps ``start_step … start_step + num_steps - 1`` of a training loop.

    Args:
        start_step: the first profiled step (0-based, as numbered by the caller of
            :meth:`before_step`). Up to ``num_steps`` steps before it are timed whole, without
            hooks, for ``step_ms`` and MFU; step 0 (the first of training, a cold start) only
            when ``start_step`` is 1, and no step during which ``torch.compile`` compiled
            (a :class:`WindowWarning` names it).
        num_steps: how many steps the per-module clock watches (on CUDA at least 3 for
            device times: the kernel clock traces every third one).
        depth: log the modules down to this depth (1: the root's children).
        forward_args: ``batch -> input`` of the model, as :meth:`Profiler.profile` takes it
            (a tensor, a tuple of positional arguments, a dict of keyword arguments).
        loss_fn: ``output -> scalar`` for the counting pass's backward (default: the one
            default loss, :func:`moduleprofiler.loss.default_loss`).
        peaks: the device's peaks for MFU: a :class:`DevicePeaks` or a table name (checked
            now: a name of no card, or of several, is refused); default the CUDA device's
            from the table. On a CPU MFU is not logged; on a GPU not in the table, or one
            without a peak for the dtype the step computes in, it is not logged either, and a
            :class:`WindowWarning` says why.
        memory: also measure the training step's memory on the counted batch (bytes saved
            for the backward and live per module, the peak and the call that set it).
        gather: under ``torch.distributed`` with several ranks, gather every rank's profile
            on rank 0 (a collective: every rank's window must close at the same step).
        profiler: the :class:`~moduleprofiler.Profiler` (or
            :class:`~moduleprofiler.ModuleProfiler`) whose formulas count, with its own map
            entries (default: a new one, the registered formulas).

    Raises:
        ValueError, TypeError: a bad argument (the message names it).
    """

    start_step: int = 5
    num_steps: int = 5
    depth: int = 1
    forward_args: Callable[[Any], Any] = identity
    loss_fn: Callable[[Any], torch.Tensor] | None = None
    peaks: DevicePeaks | str | None = None
    gather: bool = True
    memory: bool = True
    profiler: Profiler | None = None

    def __post_init__(self) -> None:
        for name, least in (("start_step", 0), ("num_steps", 1), ("depth", 0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{name} must be an int, got {type(value).__name__}")
            if value < least:
                raise ValueError(f"{name} must be >= {least}, got {value}")
        if not callable(self.forward_args):
            raise TypeError("forward_args must be a callable batch -> model input")
        if self.loss_fn is not None and not callable(self.loss_fn):
            raise TypeError("loss_fn must be a callable output -> scalar tensor, or None")
        if self.peaks is not None and not isinstance(self.peaks, (DevicePeaks, str)):
            raise TypeError(f"peaks must be a DevicePeaks, a table name or None, got "
                            f"{type(self.peaks).__name__}")
        if isinstance(self.peaks, str) and not self.peaks.startswith("cuda"):
            # a misspelt or ambiguous name ("H100": SXM, PCIe or NVL) is refused now, not
            # found at the window's end, where it could only leave MFU out
            table_name(self.peaks, "peaks")
        if not isinstance(self.memory, bool):
            raise TypeError(f"memory must be a bool, got {type(self.memory).__name__}")
        if self.profiler is not None and not isinstance(self.profiler, Profiler):
            raise TypeError(f"profiler must be a moduleprofiler Profiler or None, got "
                            f"{type(self.profiler).__name__}")
        self._memory: MemoryReport | None = None
        self.result: WindowResult | None = None
        """The window's result once it closed (``None`` before, and on ranks other than 0
        under ``torch.distributed``)."""
        self.closed = False
        self._model: nn.Module | None = None
        self._profile: Profile | None = None
        self._profiler: TrainingProfiler | None = None
        self._profiled = 0
        self._plain_ms: list[float] = []
        self._plain_start: float | None = None
        self._plain_compiled = 0  # Dynamo's compiled frames when the timed step began
        self._compiling: list[int] = []
        """The hook-free steps during which torch.compile compiled: left out of step_ms."""
        self._context: Callable[[], AbstractContextManager[Any]] = contextlib.nullcontext
        self._failure: Exception | None = None
        self._steps = 0
        self._first_step: int | None = None
        self._deprecations_said: set[str] = set()
        """The deprecated scalars this window warned of: a callback's windows share one set,
        so each warns once per callback, not once per training run."""

    @property
    def stop_step(self) -> int:
        """The first step after the window."""
        return self.start_step + self.num_steps

    # -- the four calls a callback makes ----------------------------------------------------
    def start(self, model: nn.Module,
              context: Callable[[], AbstractContextManager[Any]] | None = None) -> None:
        """Training starts: watch ``model`` (the module whose forward the batch feeds).

        ``context``: makes the context the training step's forward runs in, when the loop
        enters one the window does not see (the trainer's autocast or precision,
        ``lambda: torch.autocast("cuda", dtype=torch.bfloat16)``). The count runs in it, so
        it sees the dtypes the step computes in, and MFU takes the peak of those: counted
        outside a bf16 autocast, a model with float32 parameters would be measured against
        the float32 peak, about 15 times lower on an H100."""
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
        if context is not None and not callable(context):
            raise TypeError("context must be a callable returning a context manager, or None")
        self._model = model
        self._context = context if context is not None else contextlib.nullcontext

    def before_step(self, step: int, batch: Any) -> None:
        """Step ``step`` is about to run on ``batch``: the first window step counts the model
        on it and installs the clock's hooks."""
        if self.closed or self._model is None:
            return
        self._steps = max(self._steps, step + 1)
        if self._first_step is None:
            self._first_step = step
        if self.start_step - self.num_steps <= step < self.start_step and (
                step > 0 or self.start_step == 1):
            # step 0, the first of training, is a cold start (first kernel launches, the
            # allocator's growth, lazy set-up): timed only where no later step is
            self._synchronize()
            self._plain_compiled = _compiled_frames()
            self._plain_start = time.perf_counter()
        elif self._profiler is not None:
            # the clock's hooks were off since the last step ended: what ran in between (a
            # validation loop, a checkpoint) is no step's
            self._profiler.resume()
        elif self._failure is None and step == self.start_step:
            # the window opens at its first step only: a training resumed from a checkpoint
            # past it never reaches it (finish says so), and a step inside the window has no
            # batch of the step before it for a callback that counts on that one
            try:
                self._profile = self._count(self._model, batch)
            except Exception as exc:
                if not self._distributed():
                    raise
                # every rank must still reach the window's gather, which then tells every
                # rank that this one failed, instead of leaving the others waiting there
                self._failure = exc
                return
            self._profiler = TrainingProfiler(self._model, start_step=0,
                                              stop_step=self.num_steps)
            self._profiler.__enter__()

    def after_step(self, step: int) -> WindowResult | None:
        """Step ``step`` ended (after the optimizer). Returns the result when this step closed
        the window (``None`` on ranks other than 0 under ``torch.distributed``)."""
        if self.closed:
            return None
        if self._plain_start is not None:
            self._synchronize()
            elapsed = (time.perf_counter() - self._plain_start) * 1e3
            self._plain_start = None
            # a step during which torch.compile compiled (the first steps of a compiled model,
            # a recompile) timed the compiler, up to hundreds of times the step
            if _compiled_frames() != self._plain_compiled:
                self._compiling.append(step)
            else:
                self._plain_ms.append(elapsed)
        elif self._profiler is not None or self._failure is not None:
            if self._profiler is not None:
                self._profiler.step(pause=True)
            self._profiled += 1
            if self._profiled >= self.num_steps:
                return self._close()
        return None

    def finish(self) -> WindowResult | None:
        """Training ended: close a window it cut short (its profiled steps are the result;
        ``None`` if no step was profiled, with a :class:`WindowWarning` when training ended
        before the window's first step or started after it). Idempotent."""
        if not self.closed and self._profiler is None and self._failure is None \
                and self._model is not None and self._steps <= self.start_step:
            warn(WindowWarning(
                f"moduleprofiler: training ended after {self._steps} steps, before the "
                f"profiling window (start_step={self.start_step}, num_steps="
                f"{self.num_steps}): nothing was profiled or logged; pass a start_step "
                f"below {self._steps}"))
        elif not self.closed and self._profiler is None and self._failure is None \
                and self._first_step is not None and self._first_step > self.start_step:
            warn(WindowWarning(
                f"moduleprofiler: training started at step {self._first_step} (resumed from "
                f"a checkpoint), after the profiling window's first step (start_step="
                f"{self.start_step}): nothing was profiled or logged; pass a start_step "
                f"above {self._first_step}"))
        if self.closed or (self._profiler is None and self._failure is None):
            self.release()
            return self.result
        return self._close()

    @property
    def stepping(self) -> bool:
        """Whether a profiled step began (:meth:`before_step`) and has not ended
        (:meth:`after_step`): the clock's hooks are on the model."""
        return self._profiler is not None and self._profiler.active

    def release(self) -> None:
        """Remove the clock's hooks without building a result (training raised)."""
        profiler, self._profiler = self._profiler, None
        if profiler is not None:
            profiler.__exit__(None, None, None)
        self.closed = True

    # -- internals -------------------------------------------------------------------------
    def _synchronize(self) -> None:
        # the step's kernels must be done before its end is read (CUDA runs asynchronously)
        synchronize(_device_of(self._model))

    def _count(self, model: nn.Module, batch: Any) -> Profile:
        """The counting pass, in the model's own mode (it leaves the RNG states as they were,
        as every pass: a Dropout in it would otherwise shift every later random draw of the
        training)."""
        try:
            inputs = self.forward_args(batch)
        except Exception as exc:
            raise ProfilingError(f"forward_args raised on the batch of step {self.start_step}: "
                                 f"{type(exc).__name__}: {exc}") from exc
        # in the step's own context (the trainer's autocast): the count sees the dtypes the
        # step computes in, and MFU takes their peak
        # a model with compiled code of its own (a compiled LightningModule) is counted as its
        # eager program: the counting pass's hooks would be traced into the compiled one (a
        # graph break at each) and the user's compile left with pieces it never asked for
        eager = torch.compiler.set_stance("force_eager") if compiled_inside(model) \
            else contextlib.nullcontext()
        with self._context(), eager:
            try:
                profiler = self.profiler if self.profiler is not None else Profiler()
                profile = profiler.profile(model, inputs, backward=True, eval=False,
                                           loss_fn=self.loss_fn)
                if not self.memory or not self._memory_measurable(model):
                    return profile
                # the training step's memory: saved for the backward and live per module,
                # the peak and the call that set it (one more forward and backward)
                self._memory = profiler.measure_memory(model, inputs, train=True,
                                                       loss_fn=self.loss_fn)
                return profile.merge(self._memory)
            except ProfilingError as exc:
                # point at the setting that can be wrong: a formula's or the loss's failure
                # says nothing of how the batch became the model's input
                hint = ("a formula raised" if isinstance(exc, FormulaError)
                        else "check loss_fn" if isinstance(exc, LossError)
                        else "check forward_args")
                raise ProfilingError(f"counting the model on the batch of step "
                                     f"{self.start_step} failed ({hint}): {exc}") from exc

    def _memory_measurable(self, model: nn.Module) -> bool:
        """Whether the memory pass may run: its real ``loss.backward()`` would run an optimizer
        stepping inside the backward, which no restore undoes; then it is left out, said
        once, and the rest of the window goes on."""
        try:
            refuse_stepping_parameters(model, "the window's memory pass", "memory=False "
                                       "leaves it out without this warning")
        except ProfilingError as exc:
            warn(WindowWarning(f"moduleprofiler: the training step's memory is not measured "
                               f"(training_peak_bytes, saved_bytes are not logged): {exc}"))
            return False
        return True

    def _close(self) -> WindowResult | None:
        profiler = self._profiler
        outcome: WindowResult | BaseException
        try:
            self.release()
            if self._failure is not None:
                raise self._failure
            assert profiler is not None and self._profile is not None
            timing = profiler.result()
            # the model's training calls in a step (gradient accumulation: one per
            # micro-batch); the count is of one call, the hook-free step time of them all
            outcome = self._build(self._profile.merge(_counted_calls(timing, self._profile)),
                                  max(_training_calls(timing), 1))
        except Exception as exc:  # every rank must reach the gather, or the others wait
            outcome = exc
        distributed = self._gather(outcome)
        if isinstance(outcome, BaseException):
            raise outcome
        if distributed is None and self._distributed():
            return None  # not rank 0: the result lives there
        outcome.distributed = distributed
        self.result = outcome
        return outcome

    def _distributed(self) -> bool:
        return self.gather and (process_rank()[1] or 1) > 1

    def _gather(self, outcome: WindowResult | BaseException) -> DistributedProfile | None:
        if not self._distributed():
            return None
        return gather(outcome.profile if isinstance(outcome, WindowResult) else outcome,
                      dst=0)

    def _build(self, profile: Profile, calls: int = 1) -> WindowResult:
        step_ms = statistics.median(self._plain_ms) if self._plain_ms else None
        if self._compiling:
            warn(WindowWarning(
                f"moduleprofiler: torch.compile compiled during the hook-free step(s) "
                f"{self._compiling} timed for step_ms, which would time the compiler, not the "
                f"step: they are left out of step_ms and mfu"
                + ("" if self._plain_ms else ", and no other step was timed, so neither is "
                   "logged")
                + f"; start the window later (start_step >= {self._compiling[-1] + 2}), "
                  "so that the steps before it run the compiled program"))
        found = self._utilization(profile, step_ms, calls)
        scalars: dict[str, float] = {}
        if step_ms is not None:
            scalars[f"{PREFIX}/step_ms"] = step_ms
        if found is not None:
            scalars[f"{PREFIX}/mfu"] = found.mfu
            scalars[f"{PREFIX}/peak_tflops"] = found.peak_tflops
        if self._memory is not None:
            scalars[f"{PREFIX}/training_peak_bytes"] = float(self._memory.peak_bytes)
            for old, new in DEPRECATED_SCALARS.items():  # the same number, until 0.3.0
                scalars[f"{PREFIX}/{old}"] = scalars[f"{PREFIX}/{new}"]
                if old not in self._deprecations_said:
                    self._deprecations_said.add(old)
                    warn_deprecated(f"the logged scalar '{PREFIX}/{old}'",
                                    f"read '{PREFIX}/{new}' (the same number, named as the "
                                    "column of profile.summary())")
        scalars.update(module_scalars(profile, self.depth))
        # the flags under their columns' names, with their columns' meanings (the forward's
        # ops and MACs; the backward's counts): one name per number
        scalars[f"{PREFIX}/complete"] = float(profile.macs_complete)
        if profile.backward_complete is not None:
            scalars[f"{PREFIX}/backward_complete"] = float(profile.backward_complete)
        if not profile.complete:  # a scalar cannot say it is a lower bound: said once here
            counts = set(profile.lower_bounds) - {"params"}  # else weights alone are unknown
            warn(WindowWarning("moduleprofiler: " + ("the logged ops, flops, backward_flops "
                               "and mfu count only the work with a formula: " if counts
                               else "the logged parameters are a lower bound: ")
                               + unknown_work(profile)))
        return WindowResult(profile, scalars, step_ms,
                            None if found is None else found.mfu, found, memory=self._memory)

    def _utilization(self, profile: Profile, step_ms: float | None,
                     calls: int = 1) -> Utilization | None:
        """MFU against the peak of the dtype most multiply-accumulates ran in (the count
        ran in the step's context, so under autocast the autocast dtype; float32 matmuls
        count as TF32 where torch's matmul precision lets them use tensor
        cores, as Lightning's and the Trainer's ``tf32``/``float32_matmul_precision``
        settings do). The model FLOPs are the counted call's times the model's ``calls`` in
        a step (each micro-batch of a gradient accumulation), as ``step_ms`` holds them
        all."""
        if step_ms is None or not step_ms > 0:
            return None
        device = _device_of(self._model)
        if self.peaks is None and device.type != "cuda":
            return None  # a CPU has no peak
        try:
            peaks = device_peaks(self.peaks if self.peaks is not None else device)
            found = utilization(profile, step_ms, peaks)
        except ValueError as exc:
            # a GPU the peak table does not know, or no peak for the dtype the step ran its
            # multiply-accumulates in: no MFU (never 0), and the dashboard's missing number
            # is explained here, once
            reason = str(exc).removesuffix(": pass dtype=")
            # where no FLOPs are known the reason names the work without a formula: no peak
            # would help
            remedy = ("" if not knows_flops(profile) else "; give the callback peaks= (a "
                      "DevicePeaks with the peak, or the table name of the device)")
            warn(WindowWarning(f"moduleprofiler: mfu and peak_tflops are not logged: "
                               f"{reason}{remedy}"))
            return None
        return dataclasses.replace(
            found, model_flops=found.model_flops * calls,
            hardware_flops=found.hardware_flops * calls,
            recompute_flops=found.recompute_flops * calls) if calls > 1 else found


_T = TypeVar("_T")
_SETTINGS = frozenset(setting.name for setting in dataclasses.fields(StepWindow))


def write_each(destinations: Sequence[tuple[str, Callable[[], object]]]) -> None:
    """Call every ``(what, write)`` of ``destinations``, each on its own: one that raises keeps
    neither the others from the result nor they it; the failures, each named by its
    ``what``, are raised together afterwards as one ``RuntimeError`` (which the callback's
    guard turns into a warning)."""
    failures = []
    for what, write in destinations:
        try:
            write()
        except Exception as exc:
            failures.append(f"{what} raised {type(exc).__name__}: {exc}")
    if failures:
        raise RuntimeError("; ".join(failures))


class WindowCallback:
    """What every framework's callback keeps: the window's settings, checked when the callback
    is made (not at the first training step), the log directory, and the last result.

    ``start_step``, ``num_steps``, ``depth``, ``loss_fn``, ``peaks``, ``memory`` (every
    :class:`StepWindow` field) read the settings.
    """

    def __init__(self, log_dir: str | PathLike[str] | None, **settings: Any) -> None:
        self._template = StepWindow(**settings)  # checks every setting now
        if log_dir is not None and not isinstance(log_dir, (str, PathLike)):
            raise TypeError(f"log_dir must be a path or None, got {type(log_dir).__name__}")
        self.log_dir = log_dir
        self.result: WindowResult | None = None
        """The last training run's result (on the main process; ``None`` elsewhere and
        before)."""
        self.window: StepWindow | None = None
        self._emitted = False

    def __getattr__(self, name: str) -> Any:
        template = self.__dict__.get("_template")
        if template is not None and name in _SETTINGS:
            return getattr(template, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _new_window(self, model: nn.Module,
                    context: Callable[[], AbstractContextManager[Any]] | None = None
                    ) -> StepWindow:
        """A fresh window watching ``model``, for a training run that starts (``context``:
        the step's precision context, :meth:`StepWindow.start`). A window the last run left
        open (it raised, and the framework said nothing) takes its hooks off first."""
        if self.window is not None:
            self.window.release()
        self.window = dataclasses.replace(self._template)
        self.window._deprecations_said = self._template._deprecations_said  # once per callback
        self.result, self._emitted = None, False
        self.window.start(model, context)
        return self.window

    def _guarded(self, what: str, call: Callable[..., _T], *args: Any) -> _T | None:
        """``call(*args)``, for a framework hook. Where it raises, the callback never stops
        the training it watches: the window's hooks come off, the callback is off for the
        rest of the run, and a :class:`WindowWarning` pointing at the user's code names the
        cause. Returns ``None`` then."""
        try:
            return call(*args)
        except Exception as exc:
            window, self.window = self.window, None
            if window is not None:
                with contextlib.suppress(Exception):  # already failing: the cause is below
                    window.release()
            warn(WindowWarning(
                f"moduleprofiler: {what} failed ({type(exc).__name__}: {exc}); the profiler "
                "is off for the rest of this run, and training goes on"))
            return None


TIME_COLUMNS = ("time_median_ms", "backward_time_median_ms", "device_ms", "host_ms",
                "backward_device_ms", "backward_host_ms", "device_launches",
                "device_idle_share")
"""The module frame's times logged per module, those the clock gave: each a module with its
children's (the self times are left to the report)."""


def _training_calls(timing: Profile) -> int:
    """The model's calls in a step that had a backward (a validation or evaluation loop run
    between the window's steps calls it under ``no_grad``: hooked, but no training work)."""
    return sum(1 for record in timing.calls("")
               if any(name.startswith("backward_") and name.endswith("_ms")
                      and isinstance(value, float) and value > 0
                      for name, value in record.metrics.items()))


def _counted_calls(timing: Profile, count: Profile) -> Profile:
    """The window's timing with the calls the count made, each module's first ones: the
    model's further calls in a step (the micro-batches of a gradient accumulation after the
    first) are more of the same work, not calls the count missed, and a module's logged
    counts and times are those of the counted call (the step time, of them all). Its modules
    are the count's: both passes watched the one model, and a ``torch.compile`` wrapper's
    call, timed whole, is its original module's, which the count walked."""
    counted = {(record.path, record.call_number) for record in count.records}
    return dataclasses.replace(timing, modules=count.modules, records=tuple(
        record for record in timing.records if (record.path, record.call_number) in counted))


def module_scalars(profile: Profile, depth: int) -> dict[str, float]:
    """``moduleprofiler/<path>/<column>`` of the modules at depths ``1 … depth``: the times
    the clock gave (``time_median_ms`` and ``backward_time_median_ms`` on a CPU; ``device_ms``,
    ``host_ms`` and their ``backward_`` twins under the CUDA kernel clock; each a module with
    its children) and :data:`COUNT_COLUMNS`. Unknown values are left out."""
    frame = profile.to_df("module")
    out: dict[str, float] = {}
    for row in frame.to_dict("records"):
        path = str(row["module"])
        if not 1 <= int(row["depth"]) <= depth:
            continue
        values = {name: row.get(name) for name in (*TIME_COLUMNS, *COUNT_COLUMNS)}
        for name, value in values.items():
            number = _number(value)
            if number is not None:
                out[f"{PREFIX}/{path}/{name}"] = number
    return out


def _number(value: Any) -> float | None:
    """A finite real number as a float; ``None`` for unknown (None, NA, NaN) or a label."""
    if value is None or isinstance(value, (bool, str)):
        return None
    try:
        if pd.isna(value):
            return None
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _compiled_frames() -> int:
    """The frames ``torch.compile`` (Dynamo) compiled in this process so far, its own counter
    (read only: ``.get`` adds no key): a step during which it grew compiled code."""
    frames = counters.get("frames")
    return 0 if frames is None else int(frames["total"])


def _device_of(model: nn.Module | None) -> torch.device:
    return CPU if model is None else resolve_device(model)
