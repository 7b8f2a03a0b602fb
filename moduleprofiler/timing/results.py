"""Per-call samples of one phase (forward or backward) and the statistics derived from them.

Samples are kept raw: every call's inclusive and exclusive ("self") time in every kept
iteration, as its record's sample columns; a module's per-iteration time totals its calls' (a
module called k times contributes the *sum* of its k calls) as the module frame's statistics
do (:func:`moduleprofiler.export.frame.module_totals`). Everything else is computed from them
on demand; the module tree is drawn by the export layer's tree view, like every other column.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import numpy as np
import pandas as pd
from numpy.typing import NDArray
from torch import nn

from moduleprofiler.export.frame import module_totals, module_values
from moduleprofiler.export.names import module_name
from moduleprofiler.export.profile import Profile
from moduleprofiler.export.view import View
from moduleprofiler.modules import module_infos
from moduleprofiler.records import (
    ROOT_NAME,
    UNCALLED,
    CallPosition,
    CallRecord,
    ModuleInfo,
    module_statuses,
)
from moduleprofiler.timing.environment import get_hardware_specs
from moduleprofiler.timing.iteration import Floats, IterationTimes
from moduleprofiler.timing.loop import BudgetUse
from moduleprofiler.timing.overhead import HookCalibration
from moduleprofiler.timing.stats import StopReason, Summary, summarize
from moduleprofiler.validate import check_choice

STAT_FIELDS = ("median", "mean", "std", "min", "max", "p5", "p25", "p75", "p95", "p99",
               "iqr", "ci_low", "ci_high")


@dataclass(frozen=True)
class ModelLayout:
    """The static module tree, in ``named_modules()`` order (root first, path ``""``): the
    modules' facts (:func:`moduleprofiler.modules.module_infos`) with each one's parent."""

    infos: tuple[ModuleInfo, ...]
    parents: tuple[int, ...]
    """Index of each module's parent in this layout (-1 for the root)."""

    @classmethod
    def of(cls, root: nn.Module) -> ModelLayout:
        """The layout of ``root``."""
        infos = module_infos(root)
        index = {info.path: i for i, info in enumerate(infos)}
        return cls(infos, tuple(-1 if info.path == "" else index.get(
            info.path.rpartition(".")[0], 0) for info in infos))

    @property
    def paths(self) -> tuple[str, ...]:
        """Module paths."""
        return tuple(info.path for info in self.infos)

    def index(self, path: str) -> int:
        """Position of ``path`` (``"__root__"`` and ``""`` both name the root)."""
        if path == ROOT_NAME:
            path = ""
        try:
            return self.paths.index(path)
        except ValueError:
            raise KeyError(f"no module named {path!r}") from None

    def children(self, i: int) -> list[int]:
        """Indices of the direct children of module ``i``."""
        return [j for j, parent in enumerate(self.parents) if parent == i]


@dataclass(frozen=True)
class ModuleStats:
    """Statistics of one module in one phase, in milliseconds per iteration.

    ``inclusive`` covers the module and everything it called; ``exclusive`` ("self") is
    inclusive minus the inclusive time of its direct child calls. ``None`` when the module was
    never called (or had no backward work). ``low_confidence`` is set when the median is
    within 10x of the instrumentation error we expect for it (``expected_error_ms``).
    """

    path: str
    type_name: str
    depth: int
    is_leaf: bool
    calls_per_iter: float
    inclusive: Summary | None
    exclusive: Summary | None
    expected_error_ms: float
    self_expected_error_ms: float
    low_confidence: bool | None
    self_low_confidence: bool | None
    corrected_median_ms: float | None = None
    """Median inclusive time minus the calibrated attribution error of its calls (clamped at
    0); ``None`` where no correction applies. Shown beside the raw value, never instead."""
    self_corrected_median_ms: float | None = None
    """Median self time minus its own calls' attribution error and the share of the child
    calls' hook cost that lands in the parent (``per_call - attribution`` each)."""

    @property
    def called(self) -> bool:
        """Whether the module ran at least once in the kept iterations."""
        return self.calls_per_iter > 0


def _kept(totals: Floats | None) -> Floats:
    """Per-iteration totals without the iterations in which the module made no call."""
    return np.zeros(0) if totals is None else totals[~np.isnan(totals)]


@dataclass(frozen=True, eq=False)
class PhaseSamples:
    """Raw samples of one phase, in milliseconds, per call flat over the kept iterations
    (``call_*``, in execution order), and the finished calls of each module in each
    iteration (``calls``, shape ``(iterations, M)``)."""

    name: str
    calls: NDArray[np.int64]
    call_module: NDArray[np.int64]
    call_number: NDArray[np.int64]
    call_inclusive_ms: NDArray[np.float64]
    call_exclusive_ms: NDArray[np.float64]

    @classmethod
    def collect(cls, name: str, iterations: Sequence[IterationTimes], width: int,
                backward: bool = False) -> PhaseSamples:
        """The forward (or ``backward``) samples of resolved iterations."""
        def flat(rows: list[NDArray[Any]], dtype: type) -> NDArray[Any]:
            return np.concatenate(rows).astype(dtype) if rows else np.zeros(0, dtype)

        def calls(field: str, dtype: type) -> NDArray[Any]:  # finished calls only
            return flat([getattr(t, field)[t.call_done] for t in iterations], dtype)

        phase = "bwd" if backward else "fwd"
        return cls(
            name=name,
            calls=(np.vstack([t.calls for t in iterations]).astype(np.int64) if iterations
                   else np.zeros((0, width), np.int64)),
            call_module=calls("call_module", np.int64),
            call_number=calls("call_number", np.int64),
            call_inclusive_ms=calls(f"call_{phase}_inclusive", np.float64) / 1e6,
            call_exclusive_ms=calls(f"call_{phase}_exclusive", np.float64) / 1e6,
        )

    def call_medians(self, layout: ModelLayout) -> dict[tuple[str, int], tuple[float, float]]:
        """Median inclusive and self time of each call over its :meth:`call_samples`."""
        return {key: (float(np.nanmedian(incl)), float(np.nanmedian(excl)))
                for key, (incl, excl) in self.call_samples(layout).items()}

    def call_samples(self, layout: ModelLayout, error_ms: Mapping[tuple[str, int], tuple[
            float, float]] | None = None) -> dict[tuple[str, int], tuple[tuple[float, ...], ...]]:
        """Each call's inclusive and self samples over the kept iterations (``nan`` where the
        call was not made), keyed by ``(path, call_number)``: the k-th call of a module in
        one iteration is matched with its k-th call in every other iteration. Less
        ``error_ms[key]`` (inclusive, self) where given."""
        errors = error_ms or {}
        return {key: tuple(tuple((values - error).tolist()) for values, error in zip(
                    pair, errors.get(key, (0.0, 0.0))))
                for key, pair in self.call_series(
                    layout, (self.call_inclusive_ms, self.call_exclusive_ms)).items()
                if not np.isnan(pair[0]).all()}

    def call_series(self, layout: ModelLayout, values: Sequence[NDArray[Any]]
                    ) -> dict[tuple[str, int], list[NDArray[np.float64]]]:
        """Per call ``(path, call_number)``, each of ``values`` (flat per-call arrays laid out
        as this phase's ``call_*`` arrays) as one value per kept iteration (``nan`` where the
        call was not made)."""
        ends = np.cumsum(self.calls.sum(axis=1))  # the flat call arrays, iteration by iteration
        out: dict[tuple[str, int], list[NDArray[np.float64]]] = {}
        for iteration, (start, end) in enumerate(zip([0, *ends[:-1].tolist()], ends.tolist())):
            for position in range(start, end):
                key = (layout.paths[self.call_module[position]],
                       int(self.call_number[position]))
                series = out.get(key)
                if series is None:
                    series = out[key] = [np.full(self.iterations, np.nan) for _ in values]
                for one, array in zip(series, values):
                    one[iteration] = array[position]
        return out

    @property
    def iterations(self) -> int:
        """Number of kept iterations."""
        return int(self.calls.shape[0])

    def module_stats(self, layout: ModelLayout, totals: tuple[Sequence[Floats | None],
                                                              Sequence[Floats | None]],
                     attribution_ms: float, per_call_ms: float, confidence: float = 0.95,
                     correct: bool = False, min_samples: int = 0) -> tuple[ModuleStats, ...]:
        """:class:`ModuleStats` for every module of ``layout`` from its inclusive and self
        per-iteration ``totals`` (:meth:`TimedModules.phase_totals`).

        Expected error per iteration: ``calls * attribution`` for inclusive time (the part of
        a hook's own cost that falls between its two stamps), plus ``child calls * per-call
        cost`` for self time (the children's hooks run inside the parent's interval). With
        ``correct``, the medians minus those expected errors are reported too. A module is
        low-confidence when its median is below ten times its expected error, or when it
        kept fewer than ``min_samples`` samples (the loop's ``min_iters``: a budget that cut
        the run short, a layer that ran in a few iterations only).
        """
        mean_calls = self.calls.mean(axis=0) if self.iterations else np.zeros(len(layout.paths))
        children = [layout.children(i) for i in range(len(layout.paths))]
        out = []
        for i, info in enumerate(layout.infos):
            calls = float(mean_calls[i])
            kept = [_kept(one[i]) for one in totals]
            inclusive, exclusive = (summarize(values, confidence) if calls > 0 else None
                                    for values in kept)
            few = len(kept[0]) < min_samples
            child_calls = float(sum(mean_calls[j] for j in children[i]))
            error = calls * attribution_ms
            self_error = error + child_calls * per_call_ms
            corrected = self_corrected = None
            if correct and inclusive is not None and exclusive is not None:
                corrected = max(0.0, inclusive.median - error)
                self_corrected = max(0.0, exclusive.median - error
                                     - child_calls * max(0.0, per_call_ms - attribution_ms))
            out.append(ModuleStats(
                path=info.path,
                type_name=info.type_name,
                depth=info.depth,
                is_leaf=info.is_leaf,
                calls_per_iter=calls,
                inclusive=inclusive,
                exclusive=exclusive,
                expected_error_ms=error,
                self_expected_error_ms=self_error,
                low_confidence=(None if inclusive is None
                                else few or inclusive.median < 10 * error),
                self_low_confidence=(None if exclusive is None
                                     else few or exclusive.median < 10 * self_error),
                corrected_median_ms=corrected,
                self_corrected_median_ms=self_corrected,
            ))
        return tuple(out)


@dataclass(frozen=True, eq=False, repr=False, kw_only=True)
class TimedModules(Profile):
    """A timing pass's profile: one record per call made in the kept iterations, each with
    its median times (``forward_ms``, ``self_forward_ms``...), and per module the median over
    the kept iterations of its calls summed (``time_median_ms``...); plus what every
    per-module timing result holds as evidence: the module tree, the forward samples, the
    hooks' calibration, the environment. Counts are not measured here (``merge`` it into a
    counted profile to see both)."""

    records: tuple[CallRecord, ...] = ()
    """Filled by :func:`timed_profile`, as ``modules``."""
    modules: tuple[ModuleInfo, ...] = ()
    layout: ModelLayout
    forward: PhaseSamples
    calibration: HookCalibration
    device: str
    clock: str
    dropped: int
    confidence: float
    environment: dict[str, Any]
    hardware: dict[str, Any] = field(default_factory=get_hardware_specs)
    warnings: tuple[str, ...]
    stop_reason: StopReason | None = field(default=None, kw_only=True)
    """What ended the run: ``"target_ci"`` (the median's CI was within the target),
    ``"max_seconds"`` (the time budget ran out) or ``"num_iters"`` (a fixed count);
    ``None`` for live profiling, which the user's loop ends."""
    elapsed_s: float | None = field(default=None, kw_only=True)
    """Wall time of the timed phase (dropped iterations and every round's blocks included);
    ``None`` for live profiling."""
    budget: BudgetUse | None = field(default=None, kw_only=True)
    """How the call's time budget went (set-up, warm-up, kept rounds) and whether it cut the
    run short (``budget.low_confidence``); ``None`` for live profiling."""

    @property
    def iterations(self) -> int:
        """Kept (timed, not dropped) iterations with forward samples."""
        return self.forward.iterations

    def __repr__(self) -> str:
        """One line: the result's kind, device and clock, modules, iterations, the root's
        median and how the run ended (the samples are in the fields; ``report()`` draws
        the tree)."""
        inclusive = self.phase_totals(self.timed_phases()[0])[0] if self.modules else []
        root = _kept(inclusive[0]) if inclusive else np.zeros(0)
        median = f", root {float(np.median(root)):.4g} ms" if root.size else ""
        ended = f", stopped by {self.stop_reason}" if self.stop_reason else ""
        modules = len(self.layout.paths)
        return (f"<{type(self).__name__} {self.device} ({self.clock}): "
                f"{modules} module{'s' if modules != 1 else ''}, {self.iterations} iterations"
                f"{median}{ended}>")

    @property
    def uncalled(self) -> tuple[str, ...]:
        """Paths of modules that never ran in the kept iterations (e.g. MHA's ``out_proj``);
        a grouping whose children ran is not one (one definition for every result:
        :func:`moduleprofiler.records.module_statuses`)."""
        ran = self.forward.calls.sum(axis=0) > 0
        statuses = module_statuses(self.layout.infos,
                                   {p for p, c in zip(self.layout.paths, ran) if c})
        return tuple(p for p, status in statuses.items() if status == UNCALLED)

    FIGURES: ClassVar[tuple[str, ...]] = ()
    """The model-level figures (attributes) :meth:`to_dict` writes after the evidence."""

    def timed_phases(self) -> tuple[Phase, ...]:
        """The timed phases: forward, and a training timing's backward."""
        raise NotImplementedError

    def stats_frame(self) -> pd.DataFrame:
        """One row per module with the timing statistics."""
        raise NotImplementedError

    def module_stats(self) -> Sequence[Any]:
        """Statistics of every module, ``named_modules()`` order (each result says which)."""
        raise NotImplementedError

    def stats(self, path: str) -> Any:
        """The timing statistics of the module at ``path`` (``""`` or ``"__root__"`` for the
        root): its :meth:`module_stats` entry. :meth:`module` is the module's facts, as on
        every profile."""
        return self.module_stats()[self.layout.index(path)]

    def phase_totals(self, phase: Phase, host: bool = False
                     ) -> tuple[list[Floats | None], list[Floats | None]]:
        """Per module (``named_modules()`` order), the per-iteration totals of ``phase``'s
        inclusive and self samples (``nan`` where it made no call, ``None`` for a module
        never called): the records' sample columns (:meth:`Phase.sample_columns`) totalled
        as the module frame's statistics total them
        (:func:`~moduleprofiler.export.frame.module_totals`). With ``host`` under the kernel
        clock the host times as measured (the records keep them less the hooks' error)."""
        names = phase.sample_columns(host)
        records = self.records
        if host and phase.host is not None:
            measured = phase.host.call_samples(self.layout)
            records = tuple(dataclasses.replace(r, metrics=dict(zip(names, measured.get(
                (r.path, r.call_number), (None, None))))) for r in records)
        inclusive, exclusive = module_totals(self, names, records)
        return inclusive, exclusive

    def phase_stats(self, host: bool = False) -> list[tuple[ModuleStats, ...]]:
        """Per phase, :class:`ModuleStats` of every module: device times under the kernel
        clock (kernel durations carry no hook error), else (or with ``host``) the host
        times, with the calibrated hook error taken off in the ``corrected`` medians."""
        # an adaptive run trusts no fewer samples than its min_iters; a fixed count is the
        # caller's own choice, its spread shown by the CI columns
        minimum = self.budget.min_kept if self.budget is not None \
            and self.stop_reason != "num_iters" else 0
        out = []
        for phase in self.timed_phases():
            measured = host or phase.host is None  # host times: the hooks' error is in them
            samples = phase.host if measured and phase.host is not None else phase.samples
            errors = (phase.attribution_ms, phase.per_call_ms) if measured else (0.0, 0.0)
            out.append(samples.module_stats(self.layout, self.phase_totals(phase, host),
                                            *errors, self.confidence, measured, minimum))
        return out

    def samples(self, path: str, exclusive: bool = False, phase: str = "forward"
                ) -> NDArray[np.float64]:
        """Per-iteration samples (ms) of one module in ``phase`` (``"forward"``, or a training
        timing's ``"backward"``), inclusive or self: its calls' totalled per iteration
        (:meth:`phase_totals`), the iterations in which it made no call left out."""
        phases = {one.name: one for one in self.timed_phases()}
        check_choice(phase, "phase", tuple(phases))
        return _kept(self.phase_totals(phases[phase])[exclusive][self.layout.index(path)])

    def _forward_coverage(self, leaves: bool = False) -> float:
        """Sum of the modules' median forward self times (``leaves``: of the leaves' median
        inclusive times) over the root's median forward time (``nan`` without one)."""
        inclusive, exclusive = ([_kept(one) for one in totals]
                                for totals in self.phase_totals(self.timed_phases()[0]))
        root = inclusive[0] if inclusive else np.zeros(0)
        if root.size == 0 or float(np.median(root)) <= 0:
            return math.nan
        if leaves and len(inclusive) == 1:
            return 1.0
        parts = [one for one, info in zip(inclusive[1:], self.layout.infos[1:])
                 if info.is_leaf] if leaves else exclusive
        return sum(float(np.median(one)) for one in parts if one.size) / float(np.median(root))

    def module_columns(self) -> dict[str, dict[str, Any]]:
        """Per module path, medians per iteration of each phase (the backward's names
        prefixed ``backward_``): ``time_median_ms`` (with its children) and
        ``self_time_median_ms`` (its own code); under the kernel clock instead
        ``device_ms`` / ``self_device_ms``, ``host_ms`` / ``self_host_ms`` (less the
        calibrated hook cost) and ``time_bound`` (:func:`device_host_values`).

        Read from the module frame (``to_df("module")``), where each is the statistic of the
        calls' kept samples: one computation of a module's medians."""
        kernels = any(phase.host is not None for phase in self.timed_phases())
        names = [name for phase in self.timed_phases() for name in (
            device_host_values(None, None, None, None, phase.prefix) if kernels
            else (f"{phase.prefix}time_median_ms", f"self_{phase.prefix}time_median_ms"))]
        if kernels:
            names += ["device_launches", "device_idle_share"]
        return module_values(self, names)

    def call_columns(self) -> dict[tuple[str, int], dict[str, Any]]:
        """Per call ``(path, call_number)``, medians over the kept iterations of each phase:
        ``forward_ms`` and ``self_forward_ms`` (``backward_ms``...); under the kernel clock
        instead the names of :meth:`module_columns` (host times less the calibrated hook
        error of the call itself)."""
        out: dict[tuple[str, int], dict[str, Any]] = {}
        for phase in self.timed_phases():
            device = phase.samples.call_medians(self.layout)
            if phase.host is None:
                for key, (incl, excl) in device.items():
                    out.setdefault(key, {}).update({f"{phase.name}_ms": incl,
                                                    f"self_{phase.name}_ms": excl})
                continue
            host = phase.host.call_medians(self.layout) if phase.host is not None else {}
            error = phase.attribution_ms
            for key, (incl, excl) in device.items():
                own, self_own = (max(0.0, t - error) for t in host[key]) if key in host \
                    else (None, None)
                out.setdefault(key, {}).update(
                    device_host_values(incl, excl, own, self_own, phase.prefix))
        return out

    def _tree(self, stats: Sequence[ModuleStats], names: Sequence[str],
              extra: Mapping[str, Sequence[Any]], notes: Sequence[str], title: str) -> str:
        """:func:`tree_text` of the :meth:`module_columns` ``names`` and then ``extra``."""
        columns = self.module_columns()
        shown = {name: [columns[s.path].get(name) for s in stats] for name in names}
        return tree_text(self.layout, [s.calls_per_iter for s in stats], {**shown, **extra},
                         notes, title)

    def to_dict(self) -> dict[str, Any]:
        """Plain-Python summary: the run's evidence, one dict per module and the
        model-level figures."""
        return {
            "device": self.device,
            "clock": self.clock,
            "iterations": self.iterations,
            "dropped": self.dropped,
            "stop_reason": self.stop_reason,
            "elapsed_s": self.elapsed_s,
            "budget": self.budget.to_dict() if self.budget is not None else None,
            "uncalled": list(self.uncalled),
            "calibration": vars(self.calibration).copy(),
            "warnings": list(self.warnings),
            "environment": self.environment,
            "hardware": self.hardware,
            "modules": self.stats_frame().to_dict(orient="records"),
            **{name: getattr(self, name) for name in self.FIGURES},
        }


@dataclass(frozen=True)
class Phase:
    """One timed phase of a result: its samples (device times under the kernel clock), the
    host samples beside them then (``None`` with any other clock), and the hooks' expected
    error in its host times."""

    name: str
    """``"forward"`` or ``"backward"``."""
    samples: PhaseSamples
    host: PhaseSamples | None
    attribution_ms: float
    per_call_ms: float

    @property
    def prefix(self) -> str:
        """Of its column names: ``""`` for the forward, ``"backward_"``."""
        return "" if self.name == "forward" else f"{self.name}_"

    def sample_columns(self, host: bool = False) -> tuple[str, str]:
        """The records' columns of its inclusive and self samples: the clock's
        (``forward_samples_ms``...), under the kernel clock the device's
        (``device_samples_ms``...) or with ``host`` the host's."""
        name = self.name if self.host is None else f"{self.prefix}{'host' if host else 'device'}"
        return f"{name}_samples_ms", f"self_{name}_samples_ms"


def device_host_values(device_ms: float | None, self_device_ms: float | None,
                       host_ms: float | None, self_host_ms: float | None,
                       prefix: str = "") -> dict[str, Any]:
    """The kernel clock's four times of a call or module (names after ``prefix``), and its
    ``time_bound``: ``"host"`` when issuing its work took the host longer than the device
    took to run it (the device then waits for launches), else ``"device"``."""
    bound = None
    if device_ms is not None and host_ms is not None:
        bound = "host" if host_ms > device_ms else "device"
    return {f"{prefix}device_ms": device_ms, f"self_{prefix}device_ms": self_device_ms,
            f"{prefix}host_ms": host_ms, f"self_{prefix}host_ms": self_host_ms,
            f"{prefix}time_bound": bound}


Timed = TypeVar("Timed", bound=TimedModules)


def timed_profile(timing: Timed, iterations: Sequence[IterationTimes] = ()) -> Timed:
    """``timing`` as the profile of its pass: one record per finished call of the kept
    ``iterations`` (:func:`call_records`; none given: keep the records it has), each with its
    call's median times and its samples, from which the module views compute the per-module
    statistics."""
    layout, calls = timing.layout, timing.call_columns()
    records = call_records(layout, iterations) if iterations else list(timing.records)
    samples = sample_columns(timing, records)
    records = [dataclasses.replace(r, metrics={**calls.get((r.path, r.call_number), {}),
                                               **samples.get((r.path, r.call_number), {})})
               for r in records]
    root = layout.infos[0]
    return dataclasses.replace(timing, records=tuple(records), modules=layout.infos,
                               total_params=root.params, total_buffers=root.buffers,
                               module_metrics=_model_regime(timing), _by_path={})


def _model_regime(timing: TimedModules) -> dict[str, dict[str, Any]]:
    """``timing``'s per-module columns with, under the kernel clock, the model's row's
    ``time_bound`` set to the hook-free regime (:class:`~.device_results.HookFreeTrace`).

    The root call's own label compares its host time *under hooks* with its device time, and
    the hooks' cost (every module's) is in that host time: ResNet-50 at batch 32 on an H200
    read "host" on the model's row beside "device-bound: the GPU is busy 92 % of the
    hook-free iteration". A model has one regime, the hook-free one; no call record holds
    it, so it is the model's measured per-module value (those win in every module view)."""
    device_times = getattr(timing, "device_times", None)
    trace = device_times.hook_free if device_times is not None else None
    if trace is None:
        return timing.module_metrics
    root = timing.layout.paths[0]
    return {**timing.module_metrics,
            root: {**timing.module_metrics.get(root, {}), "time_bound": trace.bound}}


def call_records(layout: ModelLayout, iterations: Sequence[IterationTimes]
                 ) -> list[CallRecord]:
    """One record per finished call ``(path, call number)`` of the kept ``iterations``: the
    first iteration's calls in the order they ran, then each call first made in a later
    iteration (data-dependent control flow: a layer skipped at random, a branch taken on some
    steps), under the record of its caller there. Without them, a module that the first
    iteration did not call would have no time at all."""
    records: list[CallRecord] = []
    by_key: dict[tuple[str, int], int] = {}
    first = iterations[0]
    for number, times in enumerate(iterations):
        if number and _same_calls(times, first):
            continue  # the usual case: every iteration made the same calls
        index: dict[int, int] = {}  # a call's position in this iteration -> its record
        for position in np.flatnonzero(times.call_done).tolist():
            info = layout.infos[int(times.call_module[position])]
            key = (info.path, int(times.call_number[position]))
            known = by_key.get(key)
            if known is None:
                parent = index.get(int(times.call_parent[position]))
                known = by_key[key] = len(records)
                records.append(CallRecord.uncounted(CallPosition(
                    index=known, parent=parent,
                    depth=0 if parent is None else records[parent].depth + 1, path=info.path,
                    type_name=info.type_name, call_number=key[1]),
                    info.params, info.own_params))
            index[position] = known
    return records


def _same_calls(times: IterationTimes, other: IterationTimes) -> bool:
    return (np.array_equal(times.call_module, other.call_module)
            and np.array_equal(times.call_number, other.call_number)
            and np.array_equal(times.call_done, other.call_done))


def sample_columns(timing: TimedModules, records: Sequence[CallRecord]
                   ) -> dict[tuple[str, int], dict[str, tuple[float, ...]]]:
    """Per call ``(path, call_number)``, its samples over the kept iterations of each phase,
    from which the module views compute the per-module medians (:mod:`.columns`): the clock's
    ``forward_samples_ms`` and ``self_forward_samples_ms`` (``backward_...``); under the
    kernel clock ``device_samples_ms`` ... and the host's ``host_samples_ms`` ... less the
    calibrated hook error (of the call, and for its self time of its direct child calls'
    hooks, which run inside it)."""
    children: dict[tuple[str, int], int] = {}
    for record in records:
        if record.parent is not None:
            above = records[record.parent]
            key = (above.path, above.call_number)
            children[key] = children.get(key, 0) + 1
    out: dict[tuple[str, int], dict[str, tuple[float, ...]]] = {}
    for phase in timing.timed_phases():
        for host, samples in ((False, phase.samples), (True, phase.host)):
            if samples is None:
                continue
            errors = None
            if host:
                share = max(0.0, phase.per_call_ms - phase.attribution_ms)
                errors = {(r.path, r.call_number): (phase.attribution_ms, phase.attribution_ms
                          + children.get((r.path, r.call_number), 0) * share) for r in records}
            names = phase.sample_columns(host)
            for key, pair in samples.call_samples(timing.layout, errors).items():
                out.setdefault(key, {}).update(zip(names, pair))
    device_times = getattr(timing, "device_times", None)
    if device_times is not None:
        for key, values in device_times.call_samples(timing.layout).items():
            out.setdefault(key, {}).update(values)
    return out


def calls_column(calls_per_iter: Sequence[float]) -> pd.Series:
    """Calls per iteration as a frame column: integers (``Int64``, as a profile's ``calls``)
    when every module made the same number of calls in every kept iteration, the mean as a
    float when some did not."""
    values = pd.Series(list(calls_per_iter), dtype="float64")
    return values.astype("Int64") if (values % 1 == 0).all() else values


def stats_columns(prefix: str, summaries: Sequence[Summary | None],
                  fields: Sequence[str] = STAT_FIELDS) -> dict[str, list[Any]]:
    """DataFrame columns ``{prefix}{field}_ms`` from summaries (``None`` -> NaN)."""
    columns: dict[str, list[Any]] = {}
    for name in fields:
        columns[f"{prefix}{name}_ms"] = [
            getattr(s, name) if s is not None else math.nan for s in summaries
        ]
    return columns


def tree_text(layout: ModelLayout, calls_per_iter: Sequence[float],
              columns: Mapping[str, Sequence[Any]], notes: Sequence[str], title: str) -> str:
    """The module tree with ``columns`` (any registered or name-typed columns, e.g.
    ``time_median_ms``), drawn by the export layer's text tree; ``notes`` go underneath."""
    calls = [int(c) if float(c).is_integer() else round(float(c), 2) for c in calls_per_iter]
    statuses = module_statuses(layout.infos, {p for p, c in zip(layout.paths, calls) if c})
    frame = pd.DataFrame({"module": [module_name(p) for p in layout.paths],
                          "type": [info.type_name for info in layout.infos],
                          "depth": [info.depth for info in layout.infos], "calls": calls,
                          "ops_source": [statuses[p] for p in layout.paths], **columns})
    return str(View(frame=frame, columns=tuple(columns), kind="tree", title=title,
                    notes=tuple(notes)))
