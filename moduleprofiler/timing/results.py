"""A timing pass's result: a profile whose records keep every call's samples, plus the pass's
facts (:class:`~moduleprofiler.facts.TimingFacts`).

The pass hands the builder (:func:`timed_profile`) its kept iterations, each with every call's
times (:class:`~moduleprofiler.timing.iteration.IterationTimes`), and the facts. Each call
becomes one record whose sample columns hold its inclusive and self time in every kept
iteration (``nan`` where it was not made), with the hooks' calibrated error beside them; every
statistic of a module (median, percentiles, CI, corrected median, low confidence) is a
registered column computed from its calls' samples (:mod:`moduleprofiler.timing.columns`; the
kernel clock's: :mod:`moduleprofiler.timing.clocks.kernel_columns`),
totalled per iteration as the module frame totals them: a module called k times contributes
the *sum* of its k calls.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from moduleprofiler.deprecation import warn_deprecated
from moduleprofiler.export.columns import ColumnSpec, median_of
from moduleprofiler.export.frame import module_totals, module_values
from moduleprofiler.export.profile import Profile
from moduleprofiler.facts import TimingFacts
from moduleprofiler.records import CallPosition, CallRecord, ModuleInfo
from moduleprofiler.timing.clocks.compiled_columns import COMPILED_COLUMNS
from moduleprofiler.timing.clocks.kernel_columns import (
    TRACE_MODULE_COLUMNS,
    TRACE_SAMPLES,
    time_bound,
)
from moduleprofiler.timing.clocks.protocol import Readings
from moduleprofiler.timing.columns import TIME_COLUMNS
from moduleprofiler.timing.device_results import DeviceIteration
from moduleprofiler.timing.environment import hardware_facts
from moduleprofiler.timing.iteration import Floats, IterationTimes
from moduleprofiler.timing.loop import BudgetUse
from moduleprofiler.timing.overhead import HookCalibration
from moduleprofiler.validate import check_choice

Key = tuple[str, int]
"""A call across iterations: ``(module path, call number)``."""


@dataclass(frozen=True)
class TimedCalls:
    """What a timing pass hands its result: the kept iterations of each phase, each with
    every call's times in ns, as the clock read them (the host's wall time between the
    hooks), and under the kernel clock its traced iterations (device times).

    ``forward_error`` and ``backward_error`` are the hooks' calibrated cost in ms (the part of
    a hook's own cost inside its call's interval, the whole cost of one hooked call): a call's
    inclusive time carries the first, its self time also each direct child call's second less
    its first."""

    forward: Sequence[IterationTimes]
    forward_error: tuple[float, float]
    backward: Sequence[IterationTimes] = ()
    backward_error: tuple[float, float] = (0.0, 0.0)
    traced: Sequence[DeviceIteration] = ()

    @property
    def shape(self) -> Sequence[IterationTimes]:
        """The iterations whose calls become the records."""
        return self.forward or self.backward or [it.times for it in self.traced]


def call_series(paths: Sequence[str], iterations: Sequence[IterationTimes],
                per_call: Callable[[int, IterationTimes], Sequence[NDArray[Any]]]
                ) -> dict[Key, list[Floats]]:
    """Per call, each of the arrays ``per_call(iteration number, times)`` gives (one value per
    call of that iteration, in its call order) as one value per kept iteration (``nan``
    where the call was not made): the k-th call of a module in one iteration is matched with
    its k-th call in every other iteration."""
    out: dict[Key, list[Floats]] = {}
    for number, times in enumerate(iterations):
        arrays = per_call(number, times)
        for position in np.flatnonzero(times.call_done).tolist():
            key = (paths[int(times.call_module[position])], int(times.call_number[position]))
            series = out.get(key)
            if series is None:
                series = out[key] = [np.full(len(iterations), np.nan) for _ in arrays]
            for one, array in zip(series, arrays):
                one[number] = array[position]
    return out


def _errors(times: IterationTimes, error: tuple[float, float]) -> tuple[Floats, Floats]:
    """Each call's hook error (ms) in its inclusive and its self time in one iteration: its
    own hooks' share inside it, and for its self time also each finished direct child call's
    cost outside that child's own interval."""
    attribution, per_call = error
    done = times.call_done
    parents = times.call_parent[done & (times.call_parent >= 0)]
    children = np.bincount(parents, minlength=len(done)) if parents.size else np.zeros(len(done))
    inclusive = np.full(len(done), attribution)
    return inclusive, inclusive + children * max(0.0, per_call - attribution)


def _sample_columns(paths: Sequence[str], calls: TimedCalls) -> dict[Key, dict[str, Any]]:
    """Per call, its sample columns (:mod:`moduleprofiler.timing.columns`): the clock's
    ``forward_samples_ms`` ... with the hooks' error beside them; under the kernel clock
    (:mod:`moduleprofiler.timing.clocks.kernel_columns`) the device's ``device_samples_ms``
    ..., the host's ``host_samples_ms`` ... less that error, and
    the launches, busy and span times of each traced iteration."""
    out: dict[Key, dict[str, Any]] = {}

    def put(names: Sequence[str], series: Mapping[Key, list[Floats]]) -> None:
        for key, arrays in series.items():
            if not np.isnan(arrays[0]).all():
                out.setdefault(key, {}).update(
                    (name, tuple(array.tolist())) for name, array in zip(names, arrays))

    kernels = bool(calls.traced)
    for phase, iterations, error in (("forward", calls.forward, calls.forward_error),
                                     ("backward", calls.backward, calls.backward_error)):
        side = "fwd" if phase == "forward" else "bwd"
        prefix = "" if phase == "forward" else "backward_"

        def clock(_: int, t: IterationTimes, side: str = side,
                  error: tuple[float, float] = error) -> list[NDArray[Any]]:
            inclusive, exclusive = (getattr(t, f"call_{side}_{kind}") / 1e6
                                    for kind in ("inclusive", "exclusive"))
            return [inclusive, exclusive, *_errors(t, error)]

        series = call_series(paths, iterations, clock)
        if kernels:  # host times less the hooks' error; device times carry none
            put([f"{prefix}host_samples_ms", f"self_{prefix}host_samples_ms"],
                {key: [a[0] - a[2], a[1] - a[3]] for key, a in series.items()})
        else:
            put([f"{phase}_samples_ms", f"self_{phase}_samples_ms",
                 f"{phase}_error_samples_ms", f"self_{phase}_error_samples_ms"], series)
        if kernels and (phase == "forward" or calls.backward):
            def device(_: int, t: IterationTimes, side: str = side) -> list[NDArray[Any]]:
                return [getattr(t, f"call_{side}_inclusive") / 1e6,
                        getattr(t, f"call_{side}_exclusive") / 1e6]

            put([f"{prefix}device_samples_ms", f"self_{prefix}device_samples_ms"],
                call_series(paths, [it.times for it in calls.traced], device))
    if kernels:
        traced = calls.traced
        put(TRACE_SAMPLES,
            call_series(paths, [it.times for it in traced], lambda n, _: [
                traced[n].call_launches.astype(np.float64), traced[n].call_busy_ns / 1e6,
                traced[n].call_span_ns / 1e6]))
    return out


def _called_share(samples: NDArray[Any] | None) -> float:
    """The share of the kept iterations in which a module was called: of its per-iteration
    samples, those that are not ``nan`` (1 where it has none to judge by)."""
    if samples is None or not samples.size:
        return 1.0
    return float(np.count_nonzero(~np.isnan(samples))) / samples.size


def _median(values: Any, floor: bool = False) -> float | None:
    array = np.asarray(values, dtype=np.float64)
    median = median_of(array[~np.isnan(array)])
    return max(0.0, median) if floor and median is not None else median


def call_values(samples: Mapping[str, Any]) -> dict[str, Any]:
    """A call's own columns from its samples: the median over the kept iterations of each of
    its times (``forward_ms``, ``self_forward_ms``...; under the kernel clock ``device_ms``,
    ``host_ms``..., and ``time_bound``)."""
    out: dict[str, Any] = {}
    for prefix, phase in (("", "forward"), ("backward_", "backward")):
        if f"{phase}_samples_ms" in samples:
            out[f"{phase}_ms"] = _median(samples[f"{phase}_samples_ms"])
            out[f"self_{phase}_ms"] = _median(samples[f"self_{phase}_samples_ms"])
        if {f"{prefix}device_samples_ms", f"{prefix}host_samples_ms"} & samples.keys():
            for quantity, floor in (("device", False), ("host", True)):
                for own in ("", "self_"):
                    out[f"{own}{prefix}{quantity}_ms"] = _median(
                        samples.get(f"{own}{prefix}{quantity}_samples_ms", ()), floor=floor)
            out[f"{prefix}time_bound"] = time_bound(out[f"{prefix}device_ms"],
                                                    out[f"{prefix}host_ms"])
    return out


def call_records(infos: Sequence[ModuleInfo], iterations: Sequence[IterationTimes]
                 ) -> list[CallRecord]:
    """One record per finished call ``(path, call number)`` of the kept ``iterations``: the
    first iteration's calls in the order they ran, then each call first made in a later
    iteration (data-dependent control flow: a layer skipped at random, a branch taken on some
    steps), under the record of its caller there. Without them, a module that the first
    iteration did not call would have no time at all."""
    records: list[CallRecord] = []
    by_key: dict[Key, int] = {}
    first = iterations[0] if iterations else None
    for number, times in enumerate(iterations):
        if number and first is not None and _same_calls(times, first):
            continue  # the usual case: every iteration made the same calls
        index: dict[int, int] = {}  # a call's position in this iteration -> its record
        for position in np.flatnonzero(times.call_done).tolist():
            info = infos[int(times.call_module[position])]
            key = (info.path, int(times.call_number[position]))
            known = by_key.get(key)
            if known is None:
                parent = index.get(int(times.call_parent[position]))
                known = by_key[key] = len(records)
                records.append(CallRecord.uncounted(CallPosition(
                    index=known, parent=parent,
                    depth=0 if parent is None else records[parent].depth + 1, path=info.path,
                    type_name=info.type_name, call_number=key[1]),
                    info.params, info.self_params))
            index[position] = known
    return records


def _same_calls(times: IterationTimes, other: IterationTimes) -> bool:
    return (np.array_equal(times.call_module, other.call_module)
            and np.array_equal(times.call_number, other.call_number)
            and np.array_equal(times.call_done, other.call_done))


def pass_facts(readings: Readings, calibration: HookCalibration, environment: dict[str, Any],
               kept: int, budget: BudgetUse | None, **facts: Any) -> TimingFacts:
    """A timing pass's facts: what its clock read (``readings``: its name; under a device
    clock the traced iterations, then the kept ones, their device time, the hook-free regime,
    the compiled program; its notes after the pass's ``warnings``), the hooks'
    ``calibration``, the ``environment`` (the device's name from it), ``kept`` iterations of
    the stamps, the ``budget`` and the pass's other ``facts``."""
    return TimingFacts(
        clock=readings.clock, calibration=dataclasses.asdict(calibration),
        environment=environment, device_name=environment.get("device_name"),
        hardware=hardware_facts(), iterations=len(readings.traced) if readings.traced else kept,
        budget=dataclasses.asdict(budget) if budget is not None else None,
        hook_free=readings.hook_free, device_booked_ms=readings.booked_ms,
        device_total_ms=readings.total_ms, compiled=readings.compiled,
        **{**facts, "warnings": (*facts.get("warnings", ()), *readings.notes)})


Timed = TypeVar("Timed", bound="TimedModules")


def timed_profile(cls: type[Timed], infos: Sequence[ModuleInfo], calls: TimedCalls,
                  facts: TimingFacts,
                  module_metrics: Mapping[str, Mapping[str, Any]] | None = None,
                  unhooked: tuple[str, ...] = ()) -> Timed:
    """The profile of a timing pass (of class ``cls``): one record per finished call of its
    kept iterations, each with its samples (:func:`_sample_columns`) and their medians
    (:func:`call_values`), and the pass's ``facts``. Under the kernel clock the model's row's
    ``time_bound`` is the hook-free regime: the root call's own label compares its host time
    *under hooks*, which holds every module's hook cost, with its device time (ResNet-50 at
    batch 32 on an H200 read "host" beside "device-bound: the GPU is busy 92 % of the
    hook-free iteration"); a model has one regime, and no call record holds it.
    ``module_metrics``: per-module columns the clock read (``{path: {column: value}}``);
    ``unhooked``: the modules the pass left without hooks (:attr:`PassRunner.unhooked
    <moduleprofiler.runner.PassRunner.unhooked>`)."""
    paths = [info.path for info in infos]
    samples = _sample_columns(paths, calls)
    records = tuple(dataclasses.replace(r, metrics={
        **call_values(samples.get((r.path, r.call_number), {})),
        **samples.get((r.path, r.call_number), {})}) for r in call_records(infos, calls.shape))
    regime: dict[str, dict[str, Any]] = {path: dict(columns) for path, columns in
                                         (module_metrics or {}).items()}
    if facts.hook_free is not None:
        regime.setdefault("", {})["time_bound"] = facts.hook_free.bound
    root = infos[0]
    return cls(records=records, modules=tuple(infos), total_params=root.params,
               total_buffers=root.buffers, module_metrics=regime, facts=facts,
               unhooked=unhooked)


@dataclass(frozen=True, eq=False, repr=False, kw_only=True)
class TimedModules(Profile):
    """A timing pass's profile: one record per call made in the kept iterations, its samples
    in its sample columns, and per module every statistic of them as a column of
    ``to_df("module")`` (``time_median_ms``, ``time_p95_ms``, ``low_confidence``...); the
    pass's evidence in :attr:`facts` (clock, device, calibration, environment, kept and
    dropped iterations). Counts are not measured here (``merge`` it into a counted profile
    to see both)."""

    records: tuple[CallRecord, ...] = ()
    modules: tuple[ModuleInfo, ...] = ()
    FIGURES: ClassVar[tuple[str, ...]] = ()
    """The model-level figures (attributes) :meth:`to_dict` writes after the evidence."""
    COLUMNS: ClassVar[tuple[ColumnSpec, ...]] = (*TIME_COLUMNS, *COMPILED_COLUMNS)
    """The registered columns its records and module frame can hold: the stamps' times and
    the compiled clock's block (the kernel clock's and the fused kernels), each declared once
    beside the clock that reads it."""
    KEYS: ClassVar[dict[str, str]] = {
        "overhead_ratio": "median whole iteration (a training step: with forward hooks) with "
                          "hooks over the hook-free median",
        "backward_overhead_ratio": "training: median step with backward hooks over the "
                                   "hook-free median step",
        "coverage": "the modules' median self times (each times the share of iterations "
                    "that called it) summed over the root's median time (expect 1 +- 0.03)",
        "leaf_coverage": "the leaf modules' median times (each times the share of iterations "
                         "that called it) summed over the root's median time",
        "forward_coverage": "training: the modules' median forward self times (each times "
                            "the share of steps that called it) summed over the root's "
                            "median forward time",
        "backward_coverage": "training: median over steps of the modules' backward self times "
                             "(and the loss's nodes) over the step's backward phase",
        "device_busy_share": "kernel clock: the time the device was busy over the hook-free "
                             "iteration's latency",
        "launches_per_iter": "kernel clock: kernels, copies and sets of the hook-free "
                             "iteration",
        "host_per_launch_us": "kernel clock: host time of the hook-free iteration per launch, "
                              "in microseconds",
        "phases_median_ms": "training: the median per-step time of each phase (forward, loss, "
                            "backward, optimizer, step), by phase",
    }
    """The keys of :meth:`to_dict` beyond the facts' (:attr:`TimingFacts.KEYS`), the module
    frame's columns and ``uncalled``, with their meaning (docs/glossary.md lists them)."""

    # -- the pass's facts, typed -------------------------------------------------------------
    @property
    def timing(self) -> TimingFacts:
        """:attr:`facts` (a timing result always has them)."""
        if self.facts is None:
            raise ValueError("a timing result without its pass's facts")
        return self.facts

    @property
    def device(self) -> str:
        """The device whose clock timed the pass."""
        return self.timing.device

    @property
    def clock(self) -> str:
        """The clock (``"cpu"``, ``"cuda-events"``, ``"cuda-kernels"``)."""
        return self.timing.clock

    @property
    def iterations(self) -> int:
        """Kept (timed, not dropped) iterations of the forward samples."""
        return self.timing.iterations

    @property
    def dropped(self) -> int:
        """Iterations run and discarded before the kept ones."""
        return self.timing.dropped

    @property
    def confidence(self) -> float:
        """Level of the medians' confidence intervals."""
        return self.timing.confidence

    @property
    def environment(self) -> dict[str, Any]:
        """Threads, versions, the device's name, page faults... of the run."""
        return self.timing.environment

    @property
    def hardware(self) -> dict[str, Any]:
        """The machine's CPU and GPUs (0.0.4's hardware columns)."""
        return self.timing.hardware

    @property
    def warnings(self) -> tuple[str, ...]:
        """What the pass warned about (also issued as ``TimingWarning``)."""
        return self.timing.warnings

    @property
    def stop_reason(self) -> str | None:
        """``"target_ci"``, ``"max_seconds"`` or ``"num_iters"``; ``None`` for live
        profiling, which the user's loop ends."""
        return self.timing.stop_reason

    @property
    def elapsed_s(self) -> float | None:
        """Wall time of the timed phase; ``None`` for live profiling."""
        return self.timing.elapsed_s

    @property
    def calibration(self) -> HookCalibration:
        """The hooks' per-call costs on this device."""
        return HookCalibration(**self.timing.calibration)

    @property
    def budget(self) -> BudgetUse | None:
        """How the call's time budget went; ``None`` for live profiling."""
        data = self.timing.budget
        if data is None:
            return None
        names = {f.name for f in dataclasses.fields(BudgetUse)}
        return BudgetUse(**{k: v for k, v in data.items() if k in names})

    def __repr__(self) -> str:
        """One line: the result's kind, device and clock, modules, iterations, the root's
        median and how the run ended (``report()`` draws the tree)."""
        root = self.samples("") if self.records else np.zeros(0)
        median = f", root {float(np.median(root)):.4g} ms" if root.size else ""
        ended = f", stopped by {self.stop_reason}" if self.stop_reason else ""
        modules = len(self.modules)
        return (f"<{type(self).__name__} {self.device} ({self.clock}): "
                f"{modules} module{'s' if modules != 1 else ''}, {self.iterations} iterations"
                f"{median}{ended}>")

    def __str__(self) -> str:
        return self.report()

    def report(self) -> str:
        """The module tree with the times and the run's evidence (also ``print(timing)``)."""
        raise NotImplementedError

    # -- samples -----------------------------------------------------------------------------
    @property
    def kernels(self) -> bool:
        """Whether the kernel clock timed it (device and host samples)."""
        return any("device_samples_ms" in r.metrics for r in self.records)

    def sample_column(self, phase: str = "forward", exclusive: bool = False) -> str:
        """The records' column of ``phase``'s samples: the clock's, under the kernel clock
        the device's."""
        name = (("" if phase == "forward" else f"{phase}_") + "device" if self.kernels
                else phase)
        return f"{'self_' if exclusive else ''}{name}_samples_ms"

    def samples(self, path: str, exclusive: bool = False, phase: str = "forward"
                ) -> NDArray[np.float64]:
        """Per-iteration samples (ms) of one module in ``phase`` (``"forward"``, or a training
        timing's ``"backward"``), inclusive or self: its calls' totalled per iteration, the
        iterations in which it made no call left out (device times under the kernel
        clock)."""
        timed = ("forward", "backward") if any(self.sample_column("backward") in r.metrics
                                               for r in self.records) else ("forward",)
        check_choice(phase, "phase", timed)
        path = self._path(path)
        if path not in {info.path for info in self.modules}:
            raise KeyError(f"no module named {path!r}")
        names = [self.sample_column(phase, False), self.sample_column(phase, True)]
        totals = module_totals(self, names)[exclusive][
            [info.path for info in self.modules].index(path)]
        return np.zeros(0) if totals is None else totals[~np.isnan(totals)]

    def _coverage(self, leaves: bool = False) -> float:
        """Sum of the modules' median forward self times (``leaves``: of the leaves' median
        inclusive times) over the root's median forward time (``nan`` without one). A module
        called in some iterations only (a branch, a layer dropped at random) has its median
        over those: it counts times the share of the iterations that called it, the time it
        adds to a typical iteration."""
        inclusive, own = (("device_ms", "self_device_ms") if self.kernels
                          else ("time_median_ms", "self_time_median_ms"))
        values = module_values(self, [inclusive, own])
        root = values.get("", {}).get(inclusive)
        if root is None or not root > 0:
            return math.nan
        if leaves and len(self.modules) == 1:
            return 1.0
        totals = module_totals(self, [self.sample_column(exclusive=not leaves)])[0]
        parts = [(values.get(info.path, {}).get(inclusive if leaves else own), samples)
                 for info, samples in zip(self.modules, totals)
                 if not leaves or (info.is_leaf and info.path)]
        return sum(float(v) * _called_share(samples) for v, samples in parts
                   if v is not None and not pd.isna(v)) / float(root)

    def module_columns(self) -> dict[str, dict[str, Any]]:
        """Per module path, its median times per iteration of each phase (the backward's
        names prefixed ``backward_``): ``time_median_ms`` and ``self_time_median_ms``; under
        the kernel clock instead ``device_ms`` / ``self_device_ms``, ``host_ms`` /
        ``self_host_ms`` (less the calibrated hook cost) and ``time_bound``; read from the
        module frame."""
        phases = ("", "backward_") if any("backward_samples_ms" in r.metrics
                                           or "backward_device_samples_ms" in r.metrics
                                           for r in self.records) else ("",)
        names = [name for prefix in phases for name in (
            (f"{prefix}device_ms", f"self_{prefix}device_ms", f"{prefix}host_ms",
             f"self_{prefix}host_ms", f"{prefix}time_bound") if self.kernels
            else (f"{prefix}time_median_ms", f"self_{prefix}time_median_ms"))]
        if self.kernels:
            names += TRACE_MODULE_COLUMNS
        return module_values(self, names)

    def stats_frame(self) -> pd.DataFrame:
        """Deprecated: the module frame, ``to_df("module")``, holds every statistic."""
        warn_deprecated("stats_frame() of a timing result", "use to_df('module'): every "
                        "statistic is a column there (time_median_ms, time_p95_ms, "
                        "low_confidence...)")
        return self.to_df("module")

    def _tree(self, columns: Sequence[str], notes: Sequence[str], title: str,
              share: str | None = None) -> str:
        """The profile's tree with ``columns`` (those it holds), titled, with the run's
        ``notes`` first; with ``share`` (a self time), each module's ``self_share`` of the
        root's inclusive time after the first two columns."""
        frame = self.to_df("module")
        shown = [c for c in columns if c.removesuffix("_pct") in frame]
        # a flag no module raises says nothing per row: one note says it instead (a flag
        # that is unknown somewhere, a document written without it, stays a column)
        quiet = [c for c in shown if c.endswith("low_confidence")
                 and frame[c].map(lambda value: value is False or value is np.False_).all()]
        shown = [c for c in shown if c not in quiet]
        if quiet:
            notes = (*notes, "low confidence: no module (each kept its loop's minimum of "
                     "samples)")
        profile: Profile = self
        if share is not None and share in frame and len(shown) >= 2:
            values = module_values(self, [shown[1] if share == shown[0] else shown[0], share])
            root = values.get("", {}).get(shown[1] if share == shown[0] else shown[0])
            if root is not None and not pd.isna(root) and root > 0:
                profile = self.with_metrics({path: {"self_share": v[share] / root} for path, v
                                             in values.items() if not pd.isna(v[share])})
                shown.insert(2, "self_share")
        view = profile.tree(shown)
        return str(dataclasses.replace(view, title=title, notes=(*notes, *view.notes)))

    def to_dict(self) -> dict[str, Any]:
        """Plain-Python summary: the run's facts, one dict per module (the module frame) and
        the model-level figures."""
        return {
            **self.timing.to_dict(),
            "uncalled": list(self.uncalled),
            "modules": self.to_df("module").to_dict(orient="records"),
            **{name: getattr(self, name) for name in self.FIGURES},
        }
