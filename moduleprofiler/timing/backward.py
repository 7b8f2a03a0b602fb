"""Per-module forward *and backward* time of training steps.

Backward work is attributed to the module whose forward created it (see
:mod:`moduleprofiler.timing.recorder`): by default through autograd node-creation hooks (each
node's run time goes to the innermost module call that created it), else through tensor and
parameter gradient hooks. Full backward module hooks are never used, so in-place activations,
first layers, reused and identity modules all work.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor, nn

from moduleprofiler.inputs import make_invocation
from moduleprofiler.legacy import legacy_name
from moduleprofiler.state import preserved_training_flags
from moduleprofiler.timing.clock import make_stamps, resolve_device
from moduleprofiler.timing.environment import (
    capture_environment,
    environment_warnings,
    get_hardware_specs,
    minor_faults,
    timing_context,
)
from moduleprofiler.timing.forward import validate_iterations
from moduleprofiler.timing.overhead import HookCalibration, calibrate_hooks
from moduleprofiler.timing.progress import Progress
from moduleprofiler.timing.recorder import (
    CallRecorder,
    GradMode,
    IterationTimes,
    RawIteration,
    node_hooks_available,
    sequence_numbers_available,
)
from moduleprofiler.timing.results import (
    ModelLayout,
    ModuleStats,
    PhaseSamples,
    stats_columns,
)
from moduleprofiler.timing.stats import Summary, summarize
from moduleprofiler.timing.tree import format_ms, render_tree

if TYPE_CHECKING:
    import pandas as pd

BackwardMethod = Literal["auto", "nodes", "seq", "tensors"]
_TABLE_FIELDS = ("median", "mean", "std", "min", "max", "p5", "p95", "ci_low", "ci_high")


def choose_method(method: BackwardMethod) -> GradMode:
    """``"auto"`` -> ``"nodes"`` where torch has node-creation hooks (2.14+), else ``"seq"``
    where it exposes the autograd sequence counter, else ``"tensors"``."""
    if method not in ("auto", "nodes", "seq", "tensors"):
        raise ValueError(f"method must be 'auto', 'nodes', 'seq' or 'tensors', got {method!r}")
    if method == "auto":
        if node_hooks_available():
            return "nodes"
        return "seq" if sequence_numbers_available() else "tensors"
    return method


def default_loss(output: Any) -> Tensor:
    """A scalar to call ``backward()`` on when no ``loss_fn`` is given: ``output.loss`` if the
    output has one (Hugging Face), else the sum of the first floating-point tensor found in
    the output (``logits``, a tuple's first element, ...)."""
    loss = getattr(output, "loss", None)
    if isinstance(loss, Tensor) and loss.requires_grad:
        return loss
    if isinstance(output, dict) and isinstance(output.get("loss"), Tensor):
        dict_loss: Tensor = output["loss"]
        return dict_loss
    for tensor in _floating_tensors(output):
        return tensor.sum()
    raise TypeError(
        f"cannot derive a loss from a {type(output).__name__}: pass loss_fn=(output[, target])"
    )


def _floating_tensors(value: Any, depth: int = 0) -> Iterator[Tensor]:
    if isinstance(value, Tensor):
        if value.is_floating_point() and value.requires_grad:
            yield value
        return
    if depth > 3:
        return
    logits = getattr(value, "logits", None)
    if isinstance(logits, Tensor):
        yield from _floating_tensors(logits, depth + 1)
    if isinstance(value, dict):
        for item in value.values():
            yield from _floating_tensors(item, depth + 1)
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _floating_tensors(item, depth + 1)


@dataclass(frozen=True)
class TrainingModuleStats:
    """Forward and backward statistics of one module (ms per step, calls summed)."""

    forward: ModuleStats
    backward: ModuleStats

    @property
    def path(self) -> str:
        """Module path (``""`` for the root)."""
        return self.forward.path


@dataclass(frozen=True, eq=False)
class TrainingTiming:
    """Per-module forward and backward times of training steps, plus step-level phases.

    ``forward`` samples come from steps with forward hooks only, ``backward`` samples from
    steps with gradient hooks (whose forward cost is larger and is not reported), so each is
    measured with the least instrumentation it needs (``separate_passes``; live profiling with
    ``alternate=False`` takes both from the same steps). ``phases_ms`` holds per-step wall
    times of the marked phases (``"forward"``, ``"loss"``, ``"backward"``, ``"optimizer"``,
    ``"step"``) of hook-free steps when there are any; ``hooked_phases_ms`` the same for each
    kind of hooked step (``"forward_hooks"``, ``"backward_hooks"``).
    """

    layout: ModelLayout
    forward: PhaseSamples
    backward: PhaseSamples
    phases_ms: dict[str, NDArray[np.float64]]
    hooked_phases_ms: dict[str, dict[str, NDArray[np.float64]]]
    unattributed_ms: NDArray[np.float64]
    """Backward time of nodes created outside every module (the loss), per step."""
    identity: tuple[str, ...]
    method: str
    separate_passes: bool
    calibration: HookCalibration
    device: str
    clock: str
    dropped: int
    confidence: float
    environment: dict[str, Any]
    hardware: dict[str, Any]
    warnings: tuple[str, ...]

    @property
    def iterations(self) -> int:
        """Kept steps with forward hooks (as many with backward hooks)."""
        return self.forward.iterations

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
        """Median step with gradient hooks / median hook-free step."""
        return self._step_ratio("backward_hooks")

    @property
    def forward_coverage(self) -> float:
        """Sum of median forward self times over the root's median forward time."""
        return self.forward.coverage(self.layout)

    @property
    def backward_coverage(self) -> float:
        """Median over steps of (sum of the modules' backward self times plus the loss's
        nodes) / that step's backward phase; the rest is autograd engine time between nodes.
        Per-step ratios keep a preemption inside the phase from skewing the figure."""
        phase = self.hooked_phases_ms.get("backward_hooks", {}).get("backward")
        if phase is None or phase.size == 0 or self.backward.iterations != phase.size:
            return math.nan
        attributed = np.nansum(self.backward.exclusive_ms, axis=1)
        if self.unattributed_ms.size == attributed.size:
            attributed = attributed + np.nan_to_num(self.unattributed_ms)
        ratios = attributed[phase > 0] / phase[phase > 0]
        return float(np.median(ratios)) if ratios.size else math.nan

    @property
    def uncalled(self) -> tuple[str, ...]:
        """Paths of modules never called in the kept steps."""
        called = self.forward.calls.sum(axis=0) > 0
        return tuple(p for p, c in zip(self.layout.paths, called) if not c)

    def phase(self, name: str) -> Summary | None:
        """Statistics of a step phase (``"forward"``, ``"backward"``, ``"step"``, ...)."""
        data = self.phases_ms.get(name)
        return summarize(data, self.confidence) if data is not None else None

    def modules(self) -> tuple[TrainingModuleStats, ...]:
        """Forward and backward statistics of every module, ``named_modules()`` order."""
        cal = self.calibration
        if self.separate_passes or math.isnan(cal.grad_per_call_ns):
            fwd = self.forward.module_stats(self.layout, cal.attribution_ns / 1e6,
                                            cal.per_call_ns / 1e6, self.confidence, True)
        else:
            cost = cal.grad_per_call_ns / 1e6
            fwd = self.forward.module_stats(self.layout, cost, cost, self.confidence)
        bwd_err = cal.backward_attribution_ns if not math.isnan(cal.backward_attribution_ns) \
            else 0.0
        bwd = self.backward.module_stats(self.layout, bwd_err / 1e6, 0.0, self.confidence)
        return tuple(TrainingModuleStats(f, b) for f, b in zip(fwd, bwd))

    def module(self, path: str) -> TrainingModuleStats:
        """Statistics of the module at ``path`` (``""``/``"__root__"`` for the root)."""
        return self.modules()[self.layout.index(path)]

    def to_df(self) -> pd.DataFrame:
        """One row per module: calls, forward and backward inclusive/self statistics (ms)."""
        import pandas as pd

        stats = self.modules()
        data: dict[str, Any] = {
            "module": [legacy_name(s.path) for s in stats],
            "type": [s.forward.type_name for s in stats],
            "depth": [s.forward.depth for s in stats],
            "calls": [s.forward.calls_per_iter for s in stats],
        }
        data.update(stats_columns("forward_", [s.forward.inclusive for s in stats],
                                  _TABLE_FIELDS))
        data.update(stats_columns("forward_self_", [s.forward.exclusive for s in stats],
                                  _TABLE_FIELDS))
        data.update(stats_columns("backward_", [s.backward.inclusive for s in stats],
                                  _TABLE_FIELDS))
        data.update(stats_columns("backward_self_", [s.backward.exclusive for s in stats],
                                  _TABLE_FIELDS))
        data["forward_low_confidence"] = [s.forward.low_confidence for s in stats]
        data["backward_low_confidence"] = [s.backward.low_confidence for s in stats]
        data["identity"] = [s.path in self.identity for s in stats]
        frame: pd.DataFrame = pd.DataFrame(data)
        return frame

    def layerwise_summary(self) -> str:
        """The model tree annotated with median forward and backward times (ms per step,
        inclusive and self), calls per step, and the step-level evidence."""
        rows = []
        for s in self.modules():
            f, b = s.forward, s.backward
            rows.append([
                format_ms(f.inclusive.median if f.inclusive else None)
                + ("~" if f.low_confidence else ""),
                format_ms(f.exclusive.median if f.exclusive else None),
                format_ms(b.inclusive.median if b.inclusive else None)
                + ("~" if b.low_confidence else ""),
                format_ms(b.exclusive.median if b.exclusive else None),
                f"{f.calls_per_iter:g}" if f.called else "0",
                "identity" if s.path in self.identity else ("" if f.called else "uncalled"),
            ])
        footer = ["", f"{self.iterations} steps kept per pass ({self.dropped} dropped) on "
                  f"{self.device} ({self.clock}); backward attribution: {self.method}; "
                  "medians in ms per step"]
        phases = [f"{name} {format_ms(summary.median)}" for name in
                  ("forward", "loss", "backward", "optimizer", "step")
                  if (summary := self.phase(name)) is not None]
        if phases:
            source = "hook-free" if "plain" in self.environment.get("step_kinds", ()) \
                else "hooked"
            footer.append(f"step phases ({source}): " + ", ".join(phases))
        extras = [f"forward coverage {self.forward_coverage:.3f}"]
        if not math.isnan(self.backward_coverage):
            extras.append(f"backward coverage {self.backward_coverage:.3f}")
        if not math.isnan(self.overhead_ratio):
            extras.append(f"step with forward hooks / hook-free {self.overhead_ratio:.3f}, "
                          f"with gradient hooks {self.backward_overhead_ratio:.3f}")
        footer.append("; ".join(extras) + " ('~' = within 10x of the hook error)")
        footer.extend(f"warning: {w}" for w in self.warnings)
        return render_tree(self.layout, ["fwd_ms", "fwd_self", "bwd_ms", "bwd_self", "calls",
                                         ""], rows, footer)

    def to_dict(self) -> dict[str, Any]:
        """Plain-Python summary: step-level figures and one dict per module."""
        return {
            "device": self.device,
            "method": self.method,
            "separate_passes": self.separate_passes,
            "iterations": self.iterations,
            "dropped": self.dropped,
            "overhead_ratio": self.overhead_ratio,
            "backward_overhead_ratio": self.backward_overhead_ratio,
            "forward_coverage": self.forward_coverage,
            "backward_coverage": self.backward_coverage,
            "phases_median_ms": {k: float(np.median(v)) for k, v in self.phases_ms.items()
                                 if v.size},
            "identity": list(self.identity),
            "uncalled": list(self.uncalled),
            "warnings": list(self.warnings),
            "modules": self.to_df().to_dict(orient="records"),
        }


class StepRows:
    """Accumulates resolved steps into matrices: forward samples, backward samples and
    phase times, each from whichever kind of step provides them."""

    def __init__(self, layout: ModelLayout) -> None:
        self.layout = layout
        self.fwd: tuple[list[Any], list[Any], list[Any]] = ([], [], [])
        self.fwd_fallback: tuple[list[Any], list[Any], list[Any]] = ([], [], [])
        self.bwd: tuple[list[Any], list[Any], list[Any]] = ([], [], [])
        self.phases: dict[str, dict[str, list[float]]] = {}
        self.unattributed: list[float] = []
        self.identity: set[int] = set()

    def add_forward(self, times: IterationTimes, fallback: bool = False) -> None:
        """Store one step's forward times (``fallback``: from a gradient-hook step, used only
        if no step with forward hooks alone was stored)."""
        rows = self.fwd_fallback if fallback else self.fwd
        rows[0].append(times.fwd_inclusive)
        rows[1].append(times.fwd_exclusive)
        rows[2].append(times.calls)

    def add_backward(self, times: IterationTimes) -> None:
        """Store one step's backward times."""
        self.bwd[0].append(times.bwd_inclusive)
        self.bwd[1].append(times.bwd_exclusive)
        self.bwd[2].append(times.calls)
        self.unattributed.append(times.bwd_unattributed)
        if times.identity is not None:
            self.identity.update(int(i) for i in np.flatnonzero(times.identity))

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

    def build(self, *, method: str, separate_passes: bool, calibration: HookCalibration,
              device: str, clock: str, dropped: int, confidence: float,
              environment: dict[str, Any], warnings: tuple[str, ...]) -> TrainingTiming:
        """The :class:`TrainingTiming` of the stored steps."""
        width = len(self.layout.paths)
        arrays = {kind: {k: np.asarray(v) for k, v in phases.items()}
                  for kind, phases in self.phases.items()}
        kinds = tuple(arrays)
        plain = arrays.get("plain") or arrays.get("forward_hooks") or next(
            iter(arrays.values()), {})
        return TrainingTiming(
            layout=self.layout,
            forward=PhaseSamples.from_rows(
                "forward", *(self.fwd if self.fwd[0] else self.fwd_fallback), width),
            backward=PhaseSamples.from_rows("backward", *self.bwd, width),
            phases_ms=plain,
            hooked_phases_ms={k: v for k, v in arrays.items() if k != "plain"},
            unattributed_ms=np.asarray(self.unattributed) / 1e6,
            identity=tuple(self.layout.paths[i] for i in sorted(self.identity)),
            method=method,
            separate_passes=separate_passes,
            calibration=calibration,
            device=device,
            clock=clock,
            dropped=dropped,
            confidence=confidence,
            environment={**environment, "step_kinds": kinds},
            hardware=get_hardware_specs(),
            warnings=warnings,
        )


@contextmanager
def preserved_tensors(module: nn.Module, params: bool) -> Iterator[None]:
    """Put back every ``.grad`` and buffer (and parameter values when ``params``) on exit, so
    that timing training steps leaves no trace (BatchNorm statistics included)."""
    grads = [(p, p.grad) for p in module.parameters()]
    buffers = [(b, b.detach().clone()) for b in module.buffers()]
    values = [(p, p.detach().clone()) for p in module.parameters()] if params else []
    try:
        yield
    finally:
        with torch.no_grad():
            for tensor, saved in (*buffers, *values):
                tensor.copy_(saved)
        for param, grad in grads:
            param.grad = grad


def train_step_times(
    module: nn.Module,
    input: Any = None,
    *,
    target: Any = None,
    loss_fn: Callable[..., Tensor] | None = None,
    pred_fn: Callable[..., Any] | None = None,
    optimizer: torch.optim.Optimizer | None = None,
    num_iters: int = 50,
    drop_first: int = 5,
    warmup_seconds: float = 0.0,
    rounds: int | None = None,
    measure_overhead: bool = True,
    overhead_fraction: float = 1.0,
    method: BackwardMethod = "auto",
    train: bool = True,
    restore: bool = True,
    device: str | torch.device | None = None,
    num_threads: int | None = None,
    confidence: float = 0.95,
    progress: bool | None = None,
) -> TrainingTiming:
    """Time forward and backward of every module over training steps.

    A step is: gradients set to ``None``, forward (``input``/``pred_fn`` as in
    :func:`~moduleprofiler.timing.time_modules`), loss (``loss_fn(output, target)``,
    ``loss_fn(output)`` without a target, or :func:`default_loss`), ``backward()``, and
    ``optimizer.step()`` when an optimizer is given.

    Three kinds of step run in interleaved rounds: with forward hooks only (the forward
    samples), with gradient hooks (the backward samples) and, with ``measure_overhead``,
    without hooks (the step phases and the overhead ratios).

    Args:
        num_iters: steps of each hooked kind, ``drop_first`` of them discarded.
        method: backward attribution, ``"nodes"`` (node-creation hooks), ``"tensors"``
            (gradient hooks) or ``"auto"`` (nodes where available).
        train: run in training mode (flags restored afterwards).
        restore: put back ``.grad``, buffers (BatchNorm statistics) and, when an optimizer
            stepped, parameter values afterwards. The optimizer's own state is not restored.
        overhead_fraction: hook-free steps per round relative to each hooked kind.
        warmup_seconds, rounds, measure_overhead, device, num_threads, confidence, progress:
            as in :func:`~moduleprofiler.timing.time_modules`.
    """
    validate_iterations(num_iters, drop_first)
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    grad_mode = choose_method(method)
    resolved = resolve_device(module, input, device)
    invoke = make_invocation(module, input, pred_fn)
    calibration = calibrate_hooks(resolved, grad_mode)
    stamps = make_stamps(resolved)
    recorders = {"forward_hooks": CallRecorder(module, stamps, "off"),
                 "backward_hooks": CallRecorder(module, stamps, grad_mode)}
    rows = StepRows(ModelLayout.of(module))
    params = [p for p in module.parameters() if p.requires_grad]
    kept = num_iters - drop_first
    n_rounds = max(1, min(rounds if rounds is not None else 5, kept))
    per_round = [kept // n_rounds + (1 if r < kept % n_rounds else 0) for r in range(n_rounds)]
    plain_round = [max(1, math.ceil(overhead_fraction * n)) if measure_overhead else 0
                   for n in per_round]
    names = ("start", "forward", "loss", "backward") + (("optimizer",) if optimizer else ())
    raws: dict[str, list[RawIteration]] = {kind: [] for kind in recorders}
    keep = [False]
    bar = Progress("timing training steps", progress)

    def zero_grad() -> None:
        if optimizer is not None:
            optimizer.zero_grad(set_to_none=True)
        for p in params:
            p.grad = None

    def loss_of(output: Any) -> Tensor:
        if loss_fn is None:
            return default_loss(output)
        return loss_fn(output, target) if target is not None else loss_fn(output)

    def step(mark: Callable[[str], None]) -> None:
        mark("start")
        output = invoke()
        mark("forward")
        loss = loss_of(output)
        mark("loss")
        loss.backward()  # type: ignore[no-untyped-call]
        mark("backward")
        if optimizer is not None:
            optimizer.step()
            mark("optimizer")

    def run_hooked(kind: str) -> None:
        recorder = recorders[kind]
        zero_grad()
        recorder.begin()
        step(recorder.mark)
        raw = recorder.snapshot()  # resolved after the timed loop
        if keep[0]:
            raws[kind].append(raw)
            bar.update(f"{len(raws['backward_hooks'])}/{kept} steps")

    def run_plain() -> None:
        zero_grad()
        stamps.reset()
        taken: list[tuple[str, int]] = []
        step(lambda name: taken.append((name, stamps.stamp())))
        ns = stamps.resolve([stamp for _, stamp in taken])
        if keep[0]:
            rows.add_phases("plain", {name: float(t) for (name, _), t in zip(taken, ns)},
                            names)

    def block(kind: str, count: int) -> None:
        if kind == "plain":
            for _ in range(count):
                run_plain()
            return
        with recorders[kind].installed():
            for _ in range(count):
                run_hooked(kind)

    env: dict[str, Any] = {}
    faults: float | None = None
    try:
        with preserved_training_flags(module, eval=False), \
                preserved_tensors(module, params=restore and optimizer is not None) \
                if restore else _nothing(), torch.enable_grad(), timing_context(num_threads):
            if train:
                module.train()
            env = capture_environment(resolved)
            deadline = time.perf_counter() + warmup_seconds
            while time.perf_counter() < deadline:
                for kind in ("forward_hooks", "backward_hooks", "plain"):
                    block(kind, 1)
            for kind in ("forward_hooks", "backward_hooks"):
                block(kind, drop_first)
            keep[0] = True
            before = minor_faults()
            order = ["forward_hooks", "backward_hooks", "plain"]
            for r in range(n_rounds):
                for kind in order[r % 3:] + order[:r % 3]:
                    block(kind, plain_round[r] if kind == "plain" else per_round[r])
            after = minor_faults()
            if before is not None and after is not None:
                faults = (after - before) / (2 * kept + sum(plain_round))
    finally:
        bar.close()
    for kind, kind_raws in raws.items():
        for raw in kind_raws:
            times = recorders[kind].resolve(raw)
            if kind == "forward_hooks":
                rows.add_forward(times)
            else:
                rows.add_backward(times)
            rows.add_phases(kind, times.marks, names)
    env["minor_faults_per_iter"] = faults
    notes = environment_warnings(env, faults, resolved)
    return rows.build(
        method=grad_mode, separate_passes=True, calibration=calibration,
        device=str(resolved), clock=stamps.kind, dropped=drop_first, confidence=confidence,
        environment=env, warnings=tuple(notes),
    )


@contextmanager
def _nothing() -> Iterator[None]:
    yield
