"""Per-module forward *and backward* time of training steps.

Backward work is attributed to the module call whose forward created it: the clock listener
hooks the autograd nodes each call created, found through the pass runner's node map (see
:mod:`moduleprofiler.timing.listener`). Full backward module hooks are never used, so in-place
activations, first layers, reused and identity modules all work.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import pandas as pd
import torch
from numpy.typing import NDArray
from torch import Tensor, nn

from moduleprofiler.deprecation import warn_deprecated
from moduleprofiler.export.names import module_name
from moduleprofiler.loss import default_loss
from moduleprofiler.progress import Progress
from moduleprofiler.state import preserved_state
from moduleprofiler.timing.clock import issue_warnings
from moduleprofiler.timing.clocks.protocol import Clock, Readings
from moduleprofiler.timing.device_results import DeviceTimes
from moduleprofiler.timing.device_trace import ClockName
from moduleprofiler.timing.iteration import IterationTimes, RawIteration
from moduleprofiler.timing.listener import ClockListener
from moduleprofiler.timing.loop import TimingOptions
from moduleprofiler.timing.ranges import RangeListener
from moduleprofiler.timing.results import (
    ModelLayout,
    ModuleStats,
    Phase,
    PhaseSamples,
    TimedModules,
    calls_column,
    stats_columns,
    timed_profile,
)
from moduleprofiler.timing.setup import HookedPass
from moduleprofiler.timing.stats import Summary, summarize
from moduleprofiler.validate import check_pass

BackwardMethod = Literal["auto", "nodes"]
"""Backward attribution: ``"nodes"`` (each autograd node to the forward call that created it,
by sequence number), the only one; ``"auto"`` picks it."""
_TABLE_FIELDS = ("median", "mean", "std", "min", "max", "p5", "p95", "ci_low", "ci_high")


def check_method(method: BackwardMethod | None) -> str:
    """The backward attribution (``"nodes"``, the only one). ``method`` has no choice to make:
    passing it is deprecated (a ``DeprecationWarning``), and anything but ``"auto"`` or
    ``"nodes"`` is a ``ValueError``."""
    if method is None:
        return "nodes"
    if method not in ("auto", "nodes"):
        raise ValueError(f"method must be 'auto' or 'nodes', got {method!r}")
    warn_deprecated("method=", "it has one value ('nodes'), the only backward attribution: "
                    "leave it out")
    return "nodes"


class BackwardFlag(int):
    """A training timing's ``backward`` field: 0, so False as on every profile whose backward
    was not counted (its backward ops are unknown, not 0), and written as such to JSON. Its
    attributes are those of the backward samples, which ``backward`` used to name:
    deprecated, use ``backward_samples``."""

    def __new__(cls, samples: PhaseSamples) -> BackwardFlag:
        flag = super().__new__(cls, 0)
        flag.__dict__["_samples"] = samples
        return flag

    def __repr__(self) -> str:
        return "False"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        warn_deprecated("TrainingTiming.backward as the backward samples",
                        "it is the profile's flag (False: no backward was counted); the "
                        "backward samples are TrainingTiming.backward_samples")
        return getattr(self.__dict__["_samples"], name)


@dataclass(frozen=True)
class TrainingModuleStats:
    """Forward and backward statistics of one module (ms per step, calls summed)."""

    forward: ModuleStats
    backward: ModuleStats

    @property
    def path(self) -> str:
        """Module path (``""`` for the root)."""
        return self.forward.path


@dataclass(frozen=True, eq=False, repr=False, kw_only=True)
class TrainingTiming(TimedModules):
    """Per-module forward and backward times of training steps, plus step-level phases.

    ``forward`` samples come from steps with forward hooks only, ``backward`` samples from
    steps that also hook the autograd nodes (whose forward cost is larger and is not reported),
    so each is measured with the least instrumentation it needs (``separate_passes``; live
    profiling with ``alternate=False`` takes both from the same steps). ``phases_ms`` holds
    per-step wall times of the marked phases (``"forward"``, ``"loss"``, ``"backward"``,
    ``"optimizer"``, ``"step"``) of hook-free steps when there are any; ``hooked_phases_ms``
    the same for each kind of hooked step (``"forward_hooks"``, ``"backward_hooks"``).
    """

    backward_samples: PhaseSamples
    """The backward time samples (was ``backward``, which on a profile says whether a
    backward was counted)."""
    phases_ms: dict[str, NDArray[np.float64]]
    hooked_phases_ms: dict[str, dict[str, NDArray[np.float64]]]
    unattributed_ms: NDArray[np.float64]
    """Backward time of nodes created outside every module (the loss), per step."""
    method: str
    separate_passes: bool
    host_forward: PhaseSamples | None = None
    """Kernel clock: host time samples of the forward (``forward`` holds device times)."""
    host_backward: PhaseSamples | None = None
    """Kernel clock: host time samples of the backward (``backward_samples`` holds device
    times)."""
    device_times: DeviceTimes | None = None
    """Kernel clock: launches, the device's idle share per module, booked share."""
    FIGURES: ClassVar[tuple[str, ...]] = (
        "method", "separate_passes", "overhead_ratio", "backward_overhead_ratio",
        "forward_coverage", "backward_coverage")

    def __post_init__(self) -> None:
        super().__post_init__()
        # a timing counts nothing: its backward ops are unknown, so the profile's flag is
        # False (views showed backward totals of 0); the old path to the samples stays
        object.__setattr__(self, "backward", BackwardFlag(self.backward_samples))

    def _step_ratio(self, kind: str) -> float:
        hooked = self.hooked_phases_ms.get(kind, {}).get("step")
        plain = self.phases_ms.get("step") if "plain" in self.environment.get(
            "step_kinds", ()) else None
        if hooked is None or plain is None or hooked.size == 0 or plain.size == 0:
            return math.nan
        return float(np.median(hooked) / np.median(plain))

    @property
    def overhead_ratio(self) -> float:
        """Median step with forward hooks / median hook-free step (``nan`` if unmeasured)."""
        return self._step_ratio("forward_hooks")

    @property
    def backward_overhead_ratio(self) -> float:
        """Median step with backward hooks / median hook-free step."""
        return self._step_ratio("backward_hooks")

    @property
    def forward_coverage(self) -> float:
        """Sum of median forward self times over the root's median forward time."""
        return self._forward_coverage()

    @property
    def backward_coverage(self) -> float:
        """Median over steps of (sum of the modules' backward self times plus the loss's
        nodes) / that step's backward phase; the rest is autograd engine time between nodes
        and, on CUDA, the clock's prime before the first backward node
        (:attr:`~moduleprofiler.timing.clocks.stamps.CudaStamps.prime_us`). Per-step ratios keep a
        preemption inside the phase from skewing the figure."""
        phase = self.hooked_phases_ms.get("backward_hooks", {}).get("backward")
        if phase is None or phase.size == 0 or self.backward_samples.iterations != phase.size:
            return math.nan
        own = [one for one in self.phase_totals(self.timed_phases()[1])[1] if one is not None]
        attributed = (np.nansum(own, axis=0) if own
                      else np.zeros(self.backward_samples.iterations))
        if self.unattributed_ms.size == attributed.size:
            attributed = attributed + np.nan_to_num(self.unattributed_ms)
        ratios = attributed[phase > 0] / phase[phase > 0]
        return float(np.median(ratios)) if ratios.size else math.nan

    def phase(self, name: str) -> Summary | None:
        """Statistics of a step phase (``"forward"``, ``"backward"``, ``"step"``, ...)."""
        data = self.phases_ms.get(name)
        return summarize(data, self.confidence) if data is not None else None

    def timed_phases(self) -> tuple[Phase, ...]:
        """Forward and backward, each with the hooks' error in its host times: a forward
        measured in steps with backward hooks (not ``separate_passes``) carries the cost
        of a hooked call that creates an autograd node."""
        cal = self.calibration
        if self.separate_passes or math.isnan(cal.grad_per_call_ns):
            forward_error = (cal.attribution_ns / 1e6, cal.per_call_ns / 1e6)
        else:
            forward_error = (cal.grad_per_call_ns / 1e6, cal.grad_per_call_ns / 1e6)
        backward_error = (0.0 if math.isnan(cal.backward_attribution_ns)
                          else cal.backward_attribution_ns / 1e6)
        return (Phase("forward", self.forward, self.host_forward, *forward_error),
                Phase("backward", self.backward_samples, self.host_backward, backward_error,
                      0.0))

    def module_stats(self) -> tuple[TrainingModuleStats, ...]:
        """Forward and backward statistics of every module, ``named_modules()`` order: device
        times under the kernel clock (no hook error in kernel durations), else the clock's."""
        return tuple(TrainingModuleStats(f, b) for f, b in zip(*self.phase_stats()))

    def host_modules(self) -> tuple[TrainingModuleStats, ...]:
        """Forward and backward statistics of the host times, with the calibrated hook cost
        taken off in the ``corrected`` medians."""
        return tuple(TrainingModuleStats(f, b) for f, b in zip(*self.phase_stats(host=True)))

    def stats_frame(self) -> pd.DataFrame:
        """One row per module: calls, forward and backward inclusive/self statistics (ms)."""
        stats = self.module_stats()
        data: dict[str, Any] = {
            "module": [module_name(s.path) for s in stats],
            "type": [s.forward.type_name for s in stats],
            "depth": [s.forward.depth for s in stats],
            "calls": calls_column([s.forward.calls_per_iter for s in stats]),
        }
        for prefix, summaries in (
                ("forward_", [s.forward.inclusive for s in stats]),
                ("forward_self_", [s.forward.exclusive for s in stats]),
                ("backward_", [s.backward.inclusive for s in stats]),
                ("backward_self_", [s.backward.exclusive for s in stats])):
            data.update(stats_columns(prefix, summaries, _TABLE_FIELDS))
        data["forward_low_confidence"] = [s.forward.low_confidence for s in stats]
        data["backward_low_confidence"] = [s.backward.low_confidence for s in stats]
        return pd.DataFrame(data)

    def layerwise_summary(self) -> str:
        """The model tree annotated with median forward and backward times (ms per step,
        inclusive and self), calls per step, and the step-level evidence."""
        stats = self.module_stats()
        notes = [f"{self.iterations} steps kept per pass ({self.dropped} dropped) on "
                 f"{self.device} ({self.clock}); backward attribution: {self.method}; "
                 "medians per step"]
        phases = [f"{name} {summary.median:.4g} ms" for name in
                  ("forward", "loss", "backward", "optimizer", "step")
                  if (summary := self.phase(name)) is not None]
        if phases:
            source = "hook-free" if "plain" in self.environment.get("step_kinds", ()) \
                else "hooked"
            notes.append(f"step phases ({source}): " + ", ".join(phases))
        extras = [f"forward coverage {self.forward_coverage:.3f}"]
        if not math.isnan(self.backward_coverage):
            extras.append(f"backward coverage {self.backward_coverage:.3f}")
        if not math.isnan(self.overhead_ratio):
            extras.append(f"step with forward hooks / hook-free {self.overhead_ratio:.3f}, "
                          f"with backward hooks {self.backward_overhead_ratio:.3f}")
        notes.append("; ".join(extras))
        notes.extend(self.warnings)
        if self.device_times is not None:  # device times first, then host time and regime
            return self._tree([s.forward for s in stats], (
                "self_device_ms", "device_ms", "self_backward_device_ms", "backward_device_ms",
                "self_host_ms", "self_backward_host_ms", "backward_time_bound"), {}, notes,
                "module training-step times")
        # low_confidence only here: kernel durations carry no hook error
        return self._tree([s.forward for s in stats], (
            "time_median_ms", "self_time_median_ms", "backward_time_median_ms",
            "self_backward_time_median_ms"), {
            "low_confidence": [s.forward.low_confidence or s.backward.low_confidence
                               for s in stats]}, notes, "module training-step times")

    report = layerwise_summary
    """The same text as :meth:`layerwise_summary` (nnprofiler's name), by the name every
    timing result uses (also ``print(timing)``); :meth:`summary` is the one-row model
    summary, as on every profile."""

    def __str__(self) -> str:
        return self.report()

    def to_dict(self) -> dict[str, Any]:
        """Plain-Python summary: step-level figures, one dict per module and the median of
        each step phase."""
        return {**super().to_dict(), "phases_median_ms": {
            k: float(np.median(v)) for k, v in self.phases_ms.items() if v.size}}


class StepRows:
    """Collects resolved steps: forward samples, backward samples and phase times, each from
    whichever kind of step provides them."""

    def __init__(self, layout: ModelLayout) -> None:
        self.layout = layout
        self.fwd: list[IterationTimes] = []
        self.fwd_fallback: list[IterationTimes] = []
        self.bwd: list[IterationTimes] = []
        self.phases: dict[str, dict[str, list[float]]] = {}

    def add(self, kind: str, times: IterationTimes, names: tuple[str, ...],
            alternate: bool = True) -> None:
        """Store one hooked step of ``kind`` (``"forward_hooks"`` or ``"backward_hooks"``):
        its forward times (a backward-hook step's, while steps ``alternate``, only as a
        fallback for when no step with forward hooks alone is stored), its backward times
        and its phases (:meth:`add_phases`)."""
        backward = kind == "backward_hooks"
        (self.fwd_fallback if backward and alternate else self.fwd).append(times)
        if backward:
            self.bwd.append(times)
        self.add_phases(kind, times.marks, names)

    def add_phases(self, kind: str, marks: dict[str, float], names: tuple[str, ...]) -> None:
        """Store one step's phase times (ns marks): each mark after the first ends the phase
        named after it (a mark named ``"end"`` only ends the step); ``"step"`` spans all."""
        phases = self.phases.setdefault(kind, {})
        previous = names[0]
        for name in names[1:]:
            if name in marks and previous in marks and name != "end":
                phases.setdefault(name, []).append((marks[name] - marks[previous]) / 1e6)
                previous = name
        if names[0] in marks and names[-1] in marks:
            phases.setdefault("step", []).append((marks[names[-1]] - marks[names[0]]) / 1e6)

    def build(self, readings: Callable[[ModelLayout, PhaseSamples, PhaseSamples], Readings],
              *, environment: dict[str, Any], **evidence: Any) -> TrainingTiming:
        """The :class:`TrainingTiming` of the stored steps, with the samples the clock's
        ``readings`` make of their times, ``environment`` (the step kinds added) and the
        ``evidence`` of its run (the other fields: ``method``, ``calibration``, ``device``...)."""
        width = len(self.layout.paths)
        arrays = {kind: {k: np.asarray(v) for k, v in phases.items()}
                  for kind, phases in self.phases.items()}
        plain = arrays.get("plain") or arrays.get("forward_hooks") or next(
            iter(arrays.values()), {})
        read = readings(
            self.layout, PhaseSamples.collect("forward", self.fwd or self.fwd_fallback, width),
            PhaseSamples.collect("backward", self.bwd, width, backward=True))
        assert read.backward is not None
        return timed_profile(TrainingTiming(
            layout=self.layout,
            forward=read.forward,
            backward_samples=read.backward,
            host_forward=read.host_forward,
            host_backward=read.host_backward,
            device_times=read.device_times,
            clock=read.clock,
            phases_ms=plain,
            hooked_phases_ms={k: v for k, v in arrays.items() if k != "plain"},
            unattributed_ms=np.asarray([t.bwd_unattributed for t in self.bwd]) / 1e6,
            environment={**environment, "step_kinds": tuple(arrays)},
            **evidence,
        ), self.fwd or self.fwd_fallback or self.bwd)


@contextmanager
def _preserved_parameters(module: nn.Module, enabled: bool) -> Iterator[None]:
    """Put parameter values back on exit: an optimizer's steps are the one write to the
    model that :func:`~moduleprofiler.state.preserved_state` leaves to the pass."""
    saved = [(p, p.detach().clone()) for p in module.parameters()] if enabled else []
    try:
        yield
    finally:
        with torch.no_grad():
            for parameter, value in saved:
                parameter.copy_(value)


def train_step_times(
    module: nn.Module,
    input: Any = None,
    *,
    target: Any = None,
    loss_fn: Callable[..., Tensor] | None = None,
    pred_fn: Callable[..., Any] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    num_iters: int | None = None,
    drop_first: int | None = None,
    warmup_seconds: float = 0.0,
    target_ci: float | None = 0.01,
    max_seconds: float | None = 5.0,
    min_iters: int = 10,
    rounds: int | None = None,
    measure_overhead: bool = True,
    overhead_fraction: float = 1.0,
    method: BackwardMethod | None = None,
    train: bool = True,
    restore: bool = True,
    device: str | torch.device | None = None,
    num_threads: int | None = None,
    confidence: float = 0.95,
    progress: bool | None = None,
    ranges: bool = False,
    clock: ClockName | Clock = "auto",
    options: TimingOptions | None = None,
) -> TrainingTiming:
    """Time forward and backward of every module over training steps.

    A step is: gradients set to ``None``, forward (``input``/``pred_fn`` as in
    :func:`~moduleprofiler.timing.time_modules`), loss (``loss_fn(output, target)``,
    ``loss_fn(output)`` without a target, or :func:`moduleprofiler.loss.default_loss`),
    ``backward()``, and ``optimizer.step()`` when an optimizer is given.

    Three kinds of step run in interleaved rounds: with forward hooks only (the forward
    samples), with backward hooks too (the backward samples) and, with ``measure_overhead``,
    without hooks (the step phases and the overhead ratios).

    By default the run is adaptive, as :func:`~moduleprofiler.timing.time_modules`'s: rounds
    are added until the CI of the median step is within ``target_ci`` in both hooked kinds,
    or ``max_seconds`` have passed (``stop_reason`` says which).

    Args:
        num_iters: ``None`` (default): adaptive. An int: exactly that many steps of each
            hooked kind, ``drop_first`` of them discarded (``target_ci`` and
            ``max_seconds`` then unused).
        drop_first: first steps of each hooked kind to discard (default: 5 with
            ``num_iters``, :data:`~moduleprofiler.timing.loop.ADAPTIVE_DROP_FIRST` in an
            adaptive run).
        target_ci, max_seconds, min_iters: the adaptive run's stopping rule, as in
            :func:`~moduleprofiler.timing.time_modules`.
        method: backward attribution; ``"nodes"`` (``"auto"``) is the only one.
        train: run in training mode (flags restored afterwards).
        restore: put back ``.grad``, buffers (BatchNorm statistics) and, when an optimizer
            stepped, parameter values afterwards. The optimizer's own state is not restored.
        overhead_fraction: hook-free steps per round relative to each hooked kind.
        warmup_seconds, rounds, measure_overhead, device, num_threads, confidence, progress,
            ranges, clock: as in :func:`~moduleprofiler.timing.time_modules` (``ranges``
            names the backward of each call too). Under the kernel clock (the default on
            CUDA) a third kind of hooked step runs traced: the kernels each call's backward
            nodes launch are its backward device time.
        options: the timing keywords as one :class:`~moduleprofiler.timing.TimingOptions`,
            as in :func:`~moduleprofiler.timing.time_modules`.

    Returns:
        :class:`TrainingTiming`. Its ``warnings`` are also issued as
        :class:`~moduleprofiler.timing.clock.TimingWarning`.

    Raises:
        ProfilingError: the forward raised (the message names the module);
            :class:`~moduleprofiler.errors.LossError` when no loss can be derived.
    """
    bar = Progress("timing training steps", progress, unit="steps")  # from the start
    check_pass(module, pred_fn=pred_fn, loss_fn=loss_fn, train=train, restore=restore)
    opts = TimingOptions.of_call(train_step_times, locals(), options)
    plan = opts.plan(fixed_drop_first=5, fixed_rounds=5)
    method_name = check_method(method)
    timed = HookedPass.start(module, input, pred_fn, device, clock, bar, plan.kept,
                             backward=True)
    module, resolved, invoke, chosen = timed.module, timed.device, timed.invoke, timed.clock
    listeners = {"forward_hooks": ClockListener(chosen.stamps),
                 "backward_hooks": ClockListener(chosen.stamps, backward=True)}
    timed.runner(list(listeners.values()), [RangeListener()] if ranges else ())
    rows = StepRows(ModelLayout.of(module))
    params = [p for p in module.parameters() if p.requires_grad]
    names = ("start", "forward", "loss", "backward") + (("optimizer",) if optimizer else ())
    raws: dict[str, list[RawIteration]] = {kind: [] for kind in listeners}
    plain: list[dict[str, float]] = []  # hook-free steps' marks (ns)

    def loss_of(output: Any) -> Tensor:
        if loss_fn is None:
            return default_loss(output)
        return loss_fn(output, target) if target is not None else loss_fn(output)

    def step(stamp: Callable[[str], None], run: Callable[[Callable[[], Any]], Any]) -> None:
        def mark(name: str) -> None:
            chosen.settle()
            stamp(name)

        if optimizer is not None:
            optimizer.zero_grad(set_to_none=True)
        for p in params:
            p.grad = None
        mark("start")
        output = run(invoke)
        mark("forward")
        loss = loss_of(output)
        mark("loss")
        loss.backward()  # type: ignore[no-untyped-call]
        mark("backward")
        if optimizer is not None:
            optimizer.step()
            mark("optimizer")

    watched = {f"steps with {kind.replace('_', ' ')}": (listeners[kind], raws[kind])
               for kind in raws}
    run = timed.measure(step, watched, plain, plan, opts, bar, [
        preserved_state(module, train=train, grads=restore, buffers=None if restore else False),
        _preserved_parameters(module, restore and optimizer is not None), torch.enable_grad()])
    for marks in plain:
        rows.add_phases("plain", marks, names)
    for kind, kind_raws in raws.items():
        for raw in kind_raws:
            rows.add(kind, listeners[kind].resolve(raw), names)
    issue_warnings(run.notes)
    return rows.build(
        chosen.readings, method=method_name, separate_passes=True,
        calibration=chosen.calibration, device=str(resolved), dropped=run.dropped,
        confidence=opts.confidence, environment=run.environment,
        warnings=(*timed.notes, *run.notes), stop_reason=run.stop_reason,
        elapsed_s=run.elapsed_s, budget=run.budget,
    )
