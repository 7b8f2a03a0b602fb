"""Per-module forward *and backward* time of training steps.

Backward work is attributed to the module call whose forward created it: the clock listener
hooks the autograd nodes each call created, found through the pass runner's node map (see
:mod:`moduleprofiler.timing.listener`). Full backward module hooks are never used, so in-place
activations, first layers, reused and identity modules all work.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor, nn

from moduleprofiler.deprecation import warn_deprecated
from moduleprofiler.errors import LossError, ProfilingError
from moduleprofiler.failure import backward_error
from moduleprofiler.inputs import check_reusable, input_shapes_of
from moduleprofiler.loss import loss_of
from moduleprofiler.modules import module_infos
from moduleprofiler.progress import Progress
from moduleprofiler.records import ModuleInfo
from moduleprofiler.shapes import iter_tensors
from moduleprofiler.state import (
    preserved_optimizer,
    preserved_state,
    refuse_stepping_parameters,
    restore_versions,
)
from moduleprofiler.timing.clock import issue_warnings
from moduleprofiler.timing.clocks.protocol import Clock, Readings
from moduleprofiler.timing.device_trace import ClockName
from moduleprofiler.timing.iteration import IterationTimes, RawIteration
from moduleprofiler.timing.listener import ClockListener
from moduleprofiler.timing.loop import BudgetUse, TimingOptions
from moduleprofiler.timing.overhead import HookCalibration
from moduleprofiler.timing.ranges import RangeListener
from moduleprofiler.timing.results import TimedCalls, TimedModules, pass_facts, timed_profile
from moduleprofiler.timing.setup import HookedPass
from moduleprofiler.timing.stats import Summary, summarize
from moduleprofiler.validate import check_pass

BackwardMethod = Literal["auto", "nodes"]
"""Backward attribution: ``"nodes"`` (each autograd node to the forward call that created it,
by sequence number), the only one; ``"auto"`` picks it."""


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


@dataclass(frozen=True, eq=False, repr=False, kw_only=True)
class TrainingTiming(TimedModules):
    """Per-module forward and backward times of training steps, plus step-level phases.

    Forward samples come from steps with forward hooks only, backward samples from steps that
    also hook the autograd nodes (whose forward cost is larger and is not reported), so each
    is measured with the least instrumentation it needs (``separate_passes``; live profiling
    with ``alternate=False`` takes both from the same steps). ``phases_ms`` holds per-step
    wall times of the marked phases (``"forward"``, ``"loss"``, ``"backward"``,
    ``"optimizer"``, ``"step"``) of hook-free steps when there are any; ``hooked_phases_ms``
    the same for each kind of hooked step (``"forward_hooks"``, ``"backward_hooks"``).
    ``backward`` is the profile's flag (False: a timing counts no backward ops).
    """

    FIGURES: ClassVar[tuple[str, ...]] = (
        "method", "separate_passes", "overhead_ratio", "backward_overhead_ratio",
        "forward_coverage", "backward_coverage")

    @property
    def phases_ms(self) -> dict[str, NDArray[np.float64]]:
        """Per-step times of the marked phases of hook-free steps (ms)."""
        return {k: np.asarray(v, dtype=np.float64) for k, v in self.timing.phases_ms.items()}

    @property
    def hooked_phases_ms(self) -> dict[str, dict[str, NDArray[np.float64]]]:
        """The same for each kind of hooked step."""
        return {kind: {k: np.asarray(v, dtype=np.float64) for k, v in phases.items()}
                for kind, phases in self.timing.hooked_phases_ms.items()}

    @property
    def unattributed_ms(self) -> NDArray[np.float64]:
        """Backward time of nodes created outside every module (the loss), per step."""
        return np.asarray(self.timing.unattributed_ms, dtype=np.float64)

    @property
    def method(self) -> str:
        """The backward attribution (``"nodes"``)."""
        return self.timing.method or "nodes"

    @property
    def separate_passes(self) -> bool:
        """Whether forward and backward samples come from different kinds of step."""
        return bool(self.timing.separate_passes)

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
        return self._coverage()

    @property
    def backward_coverage(self) -> float:
        """Median over steps of (sum of the modules' backward self times plus the loss's
        nodes) / that step's backward phase; the rest is autograd engine time between nodes
        and, on CUDA, the clock's prime before the first backward node
        (:attr:`~moduleprofiler.timing.clock.CudaStamps.prime_us`). Per-step ratios keep a
        preemption inside the phase from skewing the figure."""
        phase = self.hooked_phases_ms.get("backward_hooks", {}).get("backward")
        name = self.sample_column("backward", exclusive=True)
        own = [np.asarray(r.metrics[name], dtype=np.float64) for r in self.records
               if name in r.metrics]
        if phase is None or phase.size == 0 or not own or own[0].size != phase.size:
            return math.nan
        attributed = np.nansum(own, axis=0)
        if self.unattributed_ms.size == attributed.size:
            attributed = attributed + np.nan_to_num(self.unattributed_ms)
        ratios = attributed[phase > 0] / phase[phase > 0]
        return float(np.median(ratios)) if ratios.size else math.nan

    def phase(self, name: str) -> Summary | None:
        """Statistics of a step phase (``"forward"``, ``"backward"``, ``"step"``, ...)."""
        data = self.phases_ms.get(name)
        return summarize(data, self.confidence) if data is not None else None

    def layerwise_summary(self) -> str:
        """The model tree annotated with median forward and backward times (ms per step,
        inclusive and self), calls per step, and the step-level evidence."""
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
        # a coverage of no step is unknown: said by leaving it out, never printed as nan
        extras = [] if math.isnan(self.forward_coverage) else [
            f"forward coverage {self.forward_coverage:.3f}"]
        if not math.isnan(self.backward_coverage):
            extras.append(f"backward coverage {self.backward_coverage:.3f}")
        if not math.isnan(self.overhead_ratio):
            extras.append(f"step with forward hooks / hook-free {self.overhead_ratio:.3f}, "
                          f"with backward hooks {self.backward_overhead_ratio:.3f}")
        if extras:
            notes.append("; ".join(extras))
        notes.extend(self.warnings)
        if self.kernels:  # device times first, then host time and regime
            return self._tree((
                "self_device_ms", "device_ms", "self_backward_device_ms", "backward_device_ms",
                "self_host_ms", "self_backward_host_ms", "backward_time_bound",
                "device_low_confidence", "backward_device_low_confidence"), notes,
                "module training-step times")
        return self._tree((
            "time_median_ms", "self_time_median_ms", "backward_time_median_ms",
            "self_backward_time_median_ms", "low_confidence", "backward_low_confidence"),
            notes, "module training-step times")

    report = layerwise_summary
    """The same text as :meth:`layerwise_summary` (nnprofiler's name), by the name every
    timing result uses (also ``print(timing)``); :meth:`summary` is the one-row model
    summary, as on every profile."""

    def to_dict(self) -> dict[str, Any]:
        """Plain-Python summary: step-level figures, one dict per module and the median of
        each step phase."""
        return {**super().to_dict(), "phases_median_ms": {
            k: float(np.median(v)) for k, v in self.phases_ms.items() if v.size}}


class StepRows:
    """Collects resolved steps: forward samples, backward samples and phase times, each from
    whichever kind of step provides them."""

    def __init__(self, infos: Sequence[ModuleInfo]) -> None:
        self.infos = infos
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

    def build(self, readings: Callable[[], Readings], *, calibration: HookCalibration,
              environment: dict[str, Any], separate_passes: bool, budget: BudgetUse | None = None,
              unhooked: tuple[str, ...] = (), **facts: Any) -> TrainingTiming:
        """The :class:`TrainingTiming` of the stored steps, with what the clock read beyond
        their stamps (``readings()``: under the kernel clock the traced steps, whose device
        times become the result's), ``environment`` (the step kinds added) and the other
        ``facts`` of its run (``method``, ``device``...); ``unhooked``: the modules its runner
        left without hooks."""
        arrays = {kind: {k: tuple(v) for k, v in phases.items()}
                  for kind, phases in self.phases.items()}
        plain = arrays.get("plain") or arrays.get("forward_hooks") or next(
            iter(arrays.values()), {})
        cal = calibration
        if separate_passes or math.isnan(cal.grad_per_call_ns):
            forward_error = (cal.attribution_ns / 1e6, cal.per_call_ns / 1e6)
        else:  # forward times of steps with backward hooks: a hooked call makes a node
            forward_error = (cal.grad_per_call_ns / 1e6, cal.grad_per_call_ns / 1e6)
        backward_error = (0.0 if math.isnan(cal.backward_attribution_ns)
                          else cal.backward_attribution_ns / 1e6, 0.0)
        forward = self.fwd or self.fwd_fallback
        read = readings()
        return timed_profile(TrainingTiming, self.infos, TimedCalls(
            forward=forward, forward_error=forward_error, backward=self.bwd,
            backward_error=backward_error, traced=read.traced), pass_facts(
            read, cal, {**environment, "step_kinds": tuple(arrays)}, len(forward), budget,
            separate_passes=separate_passes, phases_ms=plain,
            hooked_phases_ms={k: v for k, v in arrays.items() if k != "plain"},
            unattributed_ms=tuple(t.bwd_unattributed / 1e6 for t in self.bwd), **facts),
            read.module_metrics, unhooked=unhooked)


def _needs_closure(optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``optimizer.step`` takes a closure it must be given (``LBFGS``)."""
    try:
        closure = inspect.signature(optimizer.step).parameters.get("closure")
    except (TypeError, ValueError):  # a step without a signature: it says so when called
        return False
    return closure is not None and closure.default is inspect.Parameter.empty


@contextmanager
def _preserved_parameters(module: nn.Module, enabled: bool) -> Iterator[None]:
    """Put parameter values back on exit, with their version counters: an optimizer's steps
    are the one write to the model that :func:`~moduleprofiler.state.preserved_state` leaves
    to the pass."""
    saved = [(p, p.detach().clone(), p._version) for p in module.parameters()] if enabled \
        else []
    try:
        yield
    finally:
        with torch.no_grad():
            for parameter, value, _ in saved:
                parameter.copy_(value)
        restore_versions([(parameter, version) for parameter, _, version in saved])


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
        train: run in training mode (a model in eval mode is switched to it; one already
            training keeps each module's own flag, a frozen BatchNorm stays frozen; flags
            restored afterwards).
        restore: put back ``.grad`` (the parameters' and that of input tensors that require
            grad), buffers (BatchNorm statistics), the random number generators and, when an
            optimizer stepped, parameter values and the optimizer's state afterwards.
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
        ProfilingError: the forward raised (the message names the module); with
            ``restore=True``, a parameter carries a post-accumulate-grad hook (an optimizer
            stepping inside the backward, which no restore can undo);
            :class:`~moduleprofiler.errors.LossError` when no loss can be derived, or the
            call runs under ``torch.inference_mode()``.
        TypeError: ``target`` without ``loss_fn`` (the default loss would leave it unused).
    """
    bar = Progress("timing training steps", progress, unit="steps")  # from the start
    check_pass(module, pred_fn=pred_fn, loss_fn=loss_fn, train=train, restore=restore,
               ranges=ranges)
    check_reusable(input, "train_step_times")
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        # it failed inside as AttributeError: 'int' object has no attribute 'state'
        raise TypeError(f"optimizer must be a torch.optim.Optimizer or None, got "
                        f"{type(optimizer).__name__} {optimizer!r:.40}")
    if optimizer is not None and _needs_closure(optimizer):
        # it failed after the setup, inside the first step, as torch's "step() missing 1
        # required positional argument: 'closure'", which named no argument of ours
        raise TypeError(f"optimizer: {type(optimizer).__name__}.step() needs a closure that "
                        "reruns the forward and backward, which a step of train_step_times "
                        "(one forward, one backward, one optimizer step) cannot be; time the "
                        "steps without it (optimizer=None), or your own loop's with "
                        "TrainingProfiler")
    if restore:
        refuse_stepping_parameters(module, "train_step_times", "pass restore=False to time "
                                   "these steps as steps of your training")
    if target is not None and loss_fn is None:
        # the default loss takes the output alone: a target would be silently unused
        raise TypeError("target is used by loss_fn(output, target): pass loss_fn as well "
                        "(without loss_fn the default loss reduces the output alone)")
    if torch.is_inference_mode_enabled():
        # it failed in the hooks' calibration, before any step, with torch's "element 0 of
        # tensors does not require grad", which said neither what nor why
        raise LossError("train_step_times cannot run under torch.inference_mode(), which "
                        "records no autograd graph for the backward: call it outside the "
                        "inference_mode block")
    opts = TimingOptions.of_call(train_step_times, locals(), options)
    plan = opts.plan(fixed_drop_first=5, fixed_rounds=5)
    method_name = check_method(method)
    timed = HookedPass.start(module, input, pred_fn, device, clock, bar, plan.kept,
                             backward=True)
    module, resolved, invoke, chosen = timed.module, timed.device, timed.invoke, timed.clock
    # the backward-hooked steps first: a first step whose backward raises in a custom
    # autograd Function is one that maps autograd nodes to calls, so the error names the
    # module (the rounds rotate the blocks: the order sets only the warm-up's)
    listeners = {"backward_hooks": ClockListener(chosen.stamps, backward=True),
                 "forward_hooks": ClockListener(chosen.stamps)}
    runner = timed.runner(list(listeners.values()), [RangeListener()] if ranges else ())
    rows = StepRows(module_infos(module))
    params = [p for p in module.parameters() if p.requires_grad]
    names = ("start", "forward", "loss", "backward") + (("optimizer",) if optimizer else ())
    raws: dict[str, list[RawIteration]] = {kind: [] for kind in listeners}
    plain: list[dict[str, float]] = []  # hook-free steps' marks (ns)
    targets = () if target is None else (target,)

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
        loss = loss_of(output, loss_fn, *targets)
        mark("loss")
        try:
            loss.backward()  # type: ignore[no-untyped-call]
        except ProfilingError:
            raise
        except Exception as exc:  # a backward hook of the model's, a checkpoint's rerun
            raise backward_error(exc, module, runner.failed_backward_of) from exc
        mark("backward")
        if optimizer is not None:
            optimizer.step()
            mark("optimizer")

    watched = {f"steps with {kind.replace('_', ' ')}": (listeners[kind], raws[kind])
               for kind in raws}
    run = timed.measure(step, watched, plain, plan, opts, bar, [
        # ``loss.backward()`` accumulates into input tensors that require grad as well
        preserved_state(module, train=train, grads=restore, buffers=None if restore else False,
                        leaves=iter_tensors((input, target)) if restore else (),
                        optimizer_steps=optimizer is not None, rng=restore,
                        input=(input, target) if restore else None),
        _preserved_parameters(module, restore and optimizer is not None),
        preserved_optimizer(optimizer if restore else None), torch.enable_grad()])
    for marks in plain:
        rows.add_phases("plain", marks, names)
    for kind, kind_raws in raws.items():
        for raw in kind_raws:
            rows.add(kind, listeners[kind].resolve(raw), names)
    issue_warnings(run.notes)
    shapes, dtypes = input_shapes_of(input, pred_fn)  # what merge checks another pass by
    return rows.build(
        chosen.readings, method=method_name, separate_passes=True,
        calibration=chosen.calibration, device=str(resolved), dropped=run.dropped,
        confidence=opts.confidence, environment=run.environment,
        warnings=(*timed.notes, *run.notes), stop_reason=run.stop_reason,
        elapsed_s=run.elapsed_s, budget=run.budget, unhooked=runner.unhooked,
        input_shapes=shapes, input_dtypes=dtypes,
    )
