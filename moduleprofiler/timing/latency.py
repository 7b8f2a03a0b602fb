"""Whole-model latency and throughput, with no hooks installed: the measurement loop
(:mod:`moduleprofiler.timing.loop`) with one block, the timed calls.

Warm-up runs until both ``warmup_iters`` samples and ``warmup_seconds`` have passed and is
discarded (the result's ``warmup_iterations`` and ``warmup_elapsed_s`` say what ran); then
timed iterations run, the stopping rule asked after each, until it says
enough:

* ``"target_ci"``: the 95 % (``confidence``) interval of the median, a distribution-free
  order-statistic interval, is within ``target_ci`` of the median on both sides;
* ``"max_seconds"``: the time budget of the timed phase ran out first;
* ``"num_iters"``: a fixed number of iterations was asked for (0.0.4 behaviour).

CPU iterations are timed with ``perf_counter_ns``; CUDA iterations with an event pair recorded
on the current stream and read after one device synchronisation per iteration.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any, ClassVar, Generic, TypeVar, overload

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

from moduleprofiler.deprecation import warn_deprecated
from moduleprofiler.devices import timed_device
from moduleprofiler.export.io import Buffer, PathLike, emit
from moduleprofiler.export.json_io import decode, encode, read_json_text
from moduleprofiler.export.renamed import RenamedKeysDict
from moduleprofiler.facts import equal_values
from moduleprofiler.failure import located_errors
from moduleprofiler.forward_grad import without_gradients
from moduleprofiler.inputs import check_reusable, input_shapes_of, make_invocation
from moduleprofiler.progress import Progress
from moduleprofiler.state import preserved_state
from moduleprofiler.timing.clock import first_batch_size, issue_warnings
from moduleprofiler.timing.clocks.stamps import make_stamps
from moduleprofiler.timing.device_trace import after_sessions_notes
from moduleprofiler.timing.environment import hardware_facts
from moduleprofiler.timing.loop import Block, BudgetUse, LoopRun, TimingOptions, measure
from moduleprofiler.timing.ranks import rank_agreement
from moduleprofiler.timing.stats import StopReason, Summary, summarize, throughput
from moduleprofiler.validate import check_int, check_pass

_T = TypeVar("_T")

_STATISTIC_KEYS: dict[str, str] = {
    "n": "iterations", "median": "latency_ms",
    **{name: f"latency_{name}_ms" for name in ("mean", "std", "min", "max", "p5", "p25", "p75",
                                               "p95", "p99", "iqr", "ci_low", "ci_high")},
    "ci_halfwidth_rel": "ci_halfwidth_rel", "iqr_rel": "iqr_rel",
}
"""The name of each statistic of :class:`~moduleprofiler.timing.stats.Summary` in a
:class:`LatencyResult`, as an attribute and as a key of :meth:`LatencyResult.to_dict`: the
median is ``latency_ms``, as the model table's (``profile.summary(latency=...)``) and a
timing's hook-free latency call it; the kept count is ``iterations``, as a timing's."""

_FIELD_OF = {name: field for field, name in _STATISTIC_KEYS.items()}


class _Statistic(Generic[_T]):
    """A statistic of a :class:`LatencyResult`'s samples, read from its ``stats``
    (:class:`~moduleprofiler.timing.stats.Summary`) under its name of :data:`_STATISTIC_KEYS`:
    ``latency_ms`` is ``stats.median``."""

    def __init__(self, doc: str) -> None:
        self.__doc__ = doc

    def __set_name__(self, owner: type, name: str) -> None:
        self.field = _FIELD_OF[name]  # a KeyError here: a statistic with no key

    @overload
    def __get__(self, result: None, owner: type | None = None) -> _Statistic[_T]: ...
    @overload
    def __get__(self, result: LatencyResult, owner: type | None = None) -> _T: ...

    def __get__(self, result: LatencyResult | None,
                owner: type | None = None) -> _Statistic[_T] | _T:
        if result is None:
            return self
        value: _T = getattr(result.stats, self.field)
        return value


class _Renamed(Generic[_T]):
    """An attribute of a :class:`LatencyResult` renamed in 0.2 to its :meth:`to_dict` key's
    name: reading it gives the new attribute's value with a ``DeprecationWarning`` naming it
    (:func:`~moduleprofiler.deprecation.warn_deprecated`), until
    :data:`~moduleprofiler.deprecation.REMOVAL_VERSION`."""

    def __init__(self, new: str, why: str = "the name its to_dict() and JSON give the same "
                                            "number") -> None:
        self.new = new
        self.why = why
        self.__doc__ = f"Deprecated: use :attr:`{new}` (the same number)."

    def __set_name__(self, owner: type, name: str) -> None:
        self.old = name

    @overload
    def __get__(self, result: None, owner: type | None = None) -> _Renamed[_T]: ...
    @overload
    def __get__(self, result: LatencyResult, owner: type | None = None) -> _T: ...

    def __get__(self, result: LatencyResult | None,
                owner: type | None = None) -> _Renamed[_T] | _T:
        if result is None:
            return self
        warn_deprecated(f"LatencyResult.{self.old}", f"use LatencyResult.{self.new}, {self.why}")
        value: _T = getattr(result, self.new)
        return value


LATENCY_DOCUMENT = "moduleprofiler.latency"
"""The ``document`` tag of :meth:`LatencyResult.to_json`'s JSON."""


@dataclass(frozen=True, eq=False)
class LatencyResult:
    """Hook-free whole-model latency. Raw samples are kept (``samples_ms``, one per timed
    iteration after ``dropped``); every statistic is derived from them."""

    KEYS: ClassVar[dict[str, str]] = {
        "latency_mean_ms": "mean whole-model latency over the kept iterations",
        "latency_std_ms": "sample standard deviation (ddof=1) of the kept iterations' latency",
        "latency_min_ms": "the fastest kept iteration's latency",
        "latency_max_ms": "the slowest kept iteration's latency (not trimmed: the tail is "
                          "real latency)",
        **{f"latency_p{q}_ms": f"{q}th percentile of the kept iterations' latency"
           for q in (5, 25, 75, 95, 99)},
        "latency_iqr_ms": "interquartile range of the kept iterations' latency",
        "latency_ci_low_ms": "lower bound of the median latency's confidence interval",
        "latency_ci_high_ms": "upper bound of the median latency's confidence interval",
        "ci_halfwidth_rel": "the larger side of the median's confidence interval over the "
                            "median (0.01: known to within 1 %)",
        "iqr_rel": "interquartile range over the median: the spread",
        "iterations_per_second": "calls of the model per second (throughput of batch 1)",
        "warmup_iterations": "warm-up iterations run before the timed ones (discarded): at "
                             "least the warmup_iters asked for, more until warmup_seconds "
                             "passed, fewer where the time budget cut the warm-up (was the "
                             "key warmup_iters, the option's name)",
        "warmup_elapsed_s": "wall time of the warm-up, the dropped iterations not included "
                            "(elapsed_s holds them): at least the warmup_seconds asked for, "
                            "unless the time budget cut the warm-up (was the key "
                            "warmup_seconds, the option's name)",
        "cold_ms": "the first call in the process, before any warm-up (benchmark(cold=True))",
        "calls_per_sample": "model calls timed together in one sample (a sample is their mean)",
        "target_ci": "the median's relative confidence interval the run stopped at, asked for "
                     "(None: a fixed count)",
        "samples_ms": "the kept iterations' latencies, one a sample, in the order they ran",
    }
    """The keys of :meth:`to_dict` (and of the JSON) that no other table of the glossary
    holds, with their meaning (docs/glossary.md lists them); those it shares with a timing's
    facts (``stop_reason``, ``budget``, ``environment``...) are
    :attr:`~moduleprofiler.facts.TimingFacts.KEYS`."""
    RENAMED_KEYS: ClassVar[dict[str, str]] = {
        **{name if name == "n" else f"{name}_ms": key
           for name, key in _STATISTIC_KEYS.items() if name != key},
        "warmup_iters": "warmup_iterations", "warmup_seconds": "warmup_elapsed_s",
    }
    """Old name -> new one, for the keys of :meth:`to_dict` and the attributes renamed in 0.2
    (the old ones read their value with a ``DeprecationWarning`` until 0.3.0, and JSON
    written with them loads): the statistics took the names of the model table and a
    timing's, and the warm-up the run did names of its own, apart from the options that
    asked for it (``benchmark(warmup_iters=, warmup_seconds=)``)."""

    samples_ms: NDArray[np.float64]
    stop_reason: StopReason
    dropped: int
    warmup_iterations: int
    """Warm-up iterations run (discarded): at least ``warmup_iters``, more until
    ``warmup_seconds`` passed, fewer where the time budget cut the warm-up."""
    warmup_elapsed_s: float
    """Wall time of the warm-up (the dropped iterations are in :attr:`elapsed_s`)."""
    elapsed_s: float
    """Wall time of the timed phase (dropped iterations included)."""
    cold_ms: float | None
    """Time of the first call in this process (before any warm-up), if asked for."""
    batch_size: int | None
    calls_per_sample: int
    target_ci: float | None
    confidence: float
    device: str
    intraop_threads: int
    interop_threads: int
    torch_version: str
    hardware: dict[str, Any]
    environment: dict[str, Any]
    warnings: tuple[str, ...]
    budget: BudgetUse | None = field(default=None, kw_only=True)
    """How the call's time budget went (set-up, warm-up, kept rounds) and whether it cut
    the run short (``budget.low_confidence``); ``None`` where not recorded."""
    input_shapes: Any = field(default=None, kw_only=True)
    """The shape tree of the model's arguments, as a profile's root call's ``input_shapes``
    column holds it (``None``: a ``pred_fn`` gave them, or a file written before it was
    kept); ``Profile.summary(latency=...)`` refuses a latency of another input."""
    input_dtypes: tuple[str, ...] = field(default=(), kw_only=True)
    """Their dtypes, as the root call's ``input_dtypes`` column holds them."""
    stats: Summary = field(init=False)

    def __post_init__(self) -> None:
        summary = summarize(self.samples_ms, self.confidence)
        if summary is None:
            raise ValueError("a LatencyResult needs at least one sample")
        object.__setattr__(self, "stats", summary)

    # -- statistics (ms), each read from ``stats``, under its to_dict() key -------------------
    iterations = _Statistic[int]("Kept samples: the iterations each statistic is of.")
    latency_ms = _Statistic[float]("Median latency: the headline number.")
    latency_mean_ms = _Statistic[float]("Mean latency.")
    latency_std_ms = _Statistic[float]("Sample standard deviation (ddof=1).")
    latency_min_ms = _Statistic[float]("Fastest iteration.")
    latency_max_ms = _Statistic[float]("Slowest iteration (not trimmed: the tail is real "
                                       "latency).")
    latency_p5_ms = _Statistic[float]("5th percentile.")
    latency_p25_ms = _Statistic[float]("25th percentile.")
    latency_p75_ms = _Statistic[float]("75th percentile.")
    latency_p95_ms = _Statistic[float]("95th percentile.")
    latency_p99_ms = _Statistic[float]("99th percentile.")
    latency_iqr_ms = _Statistic[float]("Interquartile range.")
    latency_ci_low_ms = _Statistic[float]("Lower bound of the median's confidence interval.")
    latency_ci_high_ms = _Statistic[float]("Upper bound of the median's confidence interval.")
    ci_halfwidth_rel = _Statistic[float]("Larger side of the median's CI over the median.")
    iqr_rel = _Statistic[float]("Interquartile range over the median: the spread.")

    # -- the names before 0.2 (RENAMED_KEYS), each with a DeprecationWarning ------------------
    n = _Renamed[int]("iterations")
    median_ms = _Renamed[float]("latency_ms")
    mean_ms = _Renamed[float]("latency_mean_ms")
    std_ms = _Renamed[float]("latency_std_ms")
    min_ms = _Renamed[float]("latency_min_ms")
    max_ms = _Renamed[float]("latency_max_ms")
    p5_ms = _Renamed[float]("latency_p5_ms")
    p25_ms = _Renamed[float]("latency_p25_ms")
    p75_ms = _Renamed[float]("latency_p75_ms")
    p95_ms = _Renamed[float]("latency_p95_ms")
    p99_ms = _Renamed[float]("latency_p99_ms")
    iqr_ms = _Renamed[float]("latency_iqr_ms")
    ci_low_ms = _Renamed[float]("latency_ci_low_ms")
    ci_high_ms = _Renamed[float]("latency_ci_high_ms")
    warmup_iters = _Renamed[int]("warmup_iterations", "the warm-up iterations the run ran "
                                 "(warmup_iters is the option: the fewest asked for)")
    warmup_seconds = _Renamed[float]("warmup_elapsed_s", "the wall time the warm-up took "
                                     "(warmup_seconds is the option: the least asked for)")

    @property
    def throughput(self) -> float:
        """Items per second: ``batch_size * n / sum(t)`` (``nan`` without a batch size)."""
        if self.batch_size is None:
            return math.nan
        return throughput(self.batch_size, self.samples_ms / 1e3)

    @property
    def iterations_per_second(self) -> float:
        """Calls per second: ``n / sum(t)``."""
        return throughput(1, self.samples_ms / 1e3)

    def to_dict(self) -> dict[str, Any]:
        """Everything as plain Python, under the names of :attr:`KEYS` and the glossary's:
        the statistics (``latency_ms``, the median, and ``latency_<statistic>_ms``),
        throughput, settings, environment and the raw samples (``samples_ms``, a list); each
        key is the attribute of the same name. The keys renamed in 0.2 (:attr:`RENAMED_KEYS`:
        ``median_ms`` is ``latency_ms``) still read their value, with a
        ``DeprecationWarning``."""
        out: dict[str, Any] = {_STATISTIC_KEYS.get(name, name): value
                               for name, value in self.stats.to_dict().items()}
        out.update(throughput=self.throughput, iterations_per_second=self.iterations_per_second)
        for item in dataclasses.fields(self):  # the settings and evidence, samples last
            value = getattr(self, item.name)
            if item.name not in ("samples_ms", "stats", "confidence"):
                out[item.name] = list(value) if isinstance(value, tuple) else (
                    dict(value) if isinstance(value, dict) else
                    value.to_dict() if isinstance(value, BudgetUse) else value)
        out["samples_ms"] = self.samples_ms.tolist()
        return RenamedKeysDict(out, self.RENAMED_KEYS, "LatencyResult.to_dict()")

    def to_json(self, buf: Buffer = None, *, indent: int | None = 2) -> str | None:
        """JSON that :meth:`from_json` reads back into the same result: :meth:`to_dict`'s
        fields, non-finite numbers written as a profile's JSON writes them."""
        document = {"document": LATENCY_DOCUMENT, **self.to_dict()}
        return emit(json.dumps(encode(document), indent=indent), buf)

    @classmethod
    def from_json(cls, source: str | PathLike | IO[str]) -> LatencyResult:
        """The result saved by :meth:`to_json` (a path, a file object, or the JSON text)."""
        document = decode(json.loads(read_json_text(source)))
        if not isinstance(document, dict) or document.get("document") != LATENCY_DOCUMENT:
            raise ValueError(f"source is not a latency result's JSON (its 'document' is not "
                             f"{LATENCY_DOCUMENT!r})")
        names = {item.name for item in dataclasses.fields(cls) if item.init}
        # a file written before 0.2 holds some fields under their old keys (warmup_seconds);
        # its statistics under theirs are derived again from its samples
        values = {new: value for name, value in document.items()
                  if (new := cls.RENAMED_KEYS.get(name, name)) in names}
        values["samples_ms"] = np.asarray(values["samples_ms"], dtype=np.float64)
        values["warnings"] = tuple(values.get("warnings", ()))
        values["input_dtypes"] = tuple(values.get("input_dtypes", ()))
        if isinstance(values.get("input_shapes"), list):  # to_dict's list of the arguments
            values["input_shapes"] = tuple(values["input_shapes"])
        budget = values.get("budget")
        if isinstance(budget, dict):
            known = {item.name for item in dataclasses.fields(BudgetUse) if item.init}
            values["budget"] = BudgetUse(**{k: v for k, v in budget.items() if k in known})
        return cls(**values)

    def __eq__(self, other: object) -> bool:
        """Field by field (the samples element by element): a result read back with
        :meth:`from_json` or from pickle equals the one written."""
        if other.__class__ is not self.__class__:
            return NotImplemented
        return equal_values(self, other)

    __hash__ = None  # type: ignore[assignment]  # equal by value, as a profile: no hash

    def __repr__(self) -> str:
        return (
            f"LatencyResult(latency_ms={self.latency_ms:.4f}, ci=[{self.latency_ci_low_ms:.4f}, "
            f"{self.latency_ci_high_ms:.4f}], iterations={self.iterations}, "
            f"stop_reason={self.stop_reason!r}, device={self.device!r})"
        )


class _IterationTimer:
    """Times ``calls`` calls of ``invoke`` per sample on ``device``'s stamp source (the one
    the hooked passes stamp); returns ns per call."""

    def __init__(self, device: torch.device, invoke: Callable[[], Any], calls: int) -> None:
        self.invoke = invoke
        self.calls = calls
        self.stamps = make_stamps(device)

    def __call__(self) -> float:
        invoke, stamps = self.invoke, self.stamps
        # a sample starts when the host starts the call: a latency includes the launch, so
        # the stream is not primed
        stamps.reset(prime=False)
        first = stamps.stamp()
        for _ in range(self.calls):
            invoke()
        start, end = stamps.resolve([first, stamps.stamp()])
        return float(end - start) / self.calls


def benchmark(
    module: nn.Module,
    input: Any = None,
    *,
    pred_fn: Callable[..., Any] | None = None,
    eval: bool = True,
    device: str | torch.device | None = None,
    warmup_iters: int = 10,
    warmup_seconds: float = 1.0,
    num_iters: int | None = None,
    drop_first: int = 0,
    target_ci: float | None = 0.01,
    max_seconds: float | None = 10.0,
    min_iters: int = 10,
    num_threads: int | None = None,
    batch_size: int | None = None,
    cold: bool = False,
    progress: bool | None = None,
    confidence: float = 0.95,
    calls_per_sample: int = 1,
    no_grad: bool = True,
    options: TimingOptions | None = None,
) -> LatencyResult:
    """Measure whole-model latency and throughput without hooks.

    Args:
        module, input, pred_fn, eval: as in :func:`~moduleprofiler.timing.time_modules`.
        device: whose clock to use (default: the model's); nothing is moved.
        warmup_iters, warmup_seconds: warm-up runs until both are reached; discarded.
            The result's ``warmup_iterations`` and ``warmup_elapsed_s`` say what ran.
        num_iters: timed iterations including the ``drop_first`` discarded ones (0.0.4's
            meaning). With ``target_ci=None`` exactly this many run (unless ``max_seconds``
            ends the run first); with a target it is a cap. ``None``: no count limit.
        drop_first: first timed iterations to discard (after the warm-up).
        target_ci: stop once the median's CI is within this fraction of it (0.01 = 1 %);
            ``None`` for a fixed count.
        max_seconds: budget of the whole call in seconds (warm-up included; ``budget`` says
            how it went); ``None`` for none. The call ends within it plus one iteration.
            The warm-up takes at most a quarter of it.
        min_iters: never stop on the CI with fewer kept samples.
        num_threads: intra-op threads while timing (restored afterwards).
        batch_size: items per call, for ``throughput`` (default: the leading dimension of the
            first input tensor).
        cold: also time the very first call (before warm-up). This is the first call *in
            this process*; it is only a true cold start if the model never ran before.
        progress: show a progress line (default: on a terminal, after 2 s).
        confidence: level of the median's CI.
        calls_per_sample: calls per sample (for sub-100 µs GPU work); percentiles are then
            of per-block means.
        no_grad: run under ``torch.no_grad()``.
        options: the timing keywords as one :class:`~moduleprofiler.timing.TimingOptions`
            (here ``drop_first=None`` is 0); a keyword given as well (not at its default)
            wins.

    Returns:
        :class:`LatencyResult`.
    """
    check_pass(module, pred_fn=pred_fn, eval=eval, cold=cold, no_grad=no_grad)
    check_reusable(input, "benchmark")
    opts = TimingOptions.of_call(benchmark, locals(), options)
    plan = opts.plan(fixed_drop_first=0, adaptive_drop_first=0, capped=True)
    check_int(calls_per_sample, "calls_per_sample", 1, optional=False)
    # batch_size=0 made a throughput of 0 items/s, True one of 1 per call
    check_int(batch_size, "batch_size", 1)
    resolved = timed_device(module, input, device)
    invoke = make_invocation(module, input, pred_fn)
    timer = _IterationTimer(resolved, invoke, calls_per_sample)
    samples: list[float] = []
    cold_ns: list[float] = []

    def timed(count: int, keep: bool) -> None:
        for _ in range(count):
            sample = timer()
            if keep:
                samples.append(sample)

    def measured(grad: bool) -> LoopRun:
        samples.clear()
        cold_ns.clear()
        with located_errors(module):  # no call stack of its own: the traceback names it
            return measure(plan, [Block(timed, dropped=True, calls=calls_per_sample)],
                           lambda: {"latencies": samples}, resolved,
                           Progress("benchmark", opts.progress), opts,
                           state=[preserved_state(module, eval=eval, input=input),
                                  torch.set_grad_enabled(grad)],
                           ranks=rank_agreement(module),
                           prime=(lambda: cold_ns.append(
                               _IterationTimer(resolved, invoke, 1)())) if cold else None)

    # no_grad: with gradients on all the same for a forward that takes gradients itself
    run = without_gradients(measured) if no_grad else measured(True)
    notes = [*run.notes, *(after_sessions_notes("the latency") if resolved.type == "cuda"
                           else [])]
    issue_warnings(notes)
    env = run.environment
    shapes, dtypes = input_shapes_of(input, pred_fn)  # what summary() checks a profile by
    return LatencyResult(
        samples_ms=np.asarray(samples) / 1e6,
        stop_reason=run.stop_reason,
        dropped=run.dropped,
        warmup_iterations=run.warmup_iterations,
        warmup_elapsed_s=run.warmup_elapsed_s,
        elapsed_s=run.elapsed_s,
        cold_ms=cold_ns[0] / 1e6 if cold_ns else None,
        batch_size=batch_size if batch_size is not None else first_batch_size(input),
        calls_per_sample=calls_per_sample,
        target_ci=opts.target_ci,
        confidence=opts.confidence,
        device=str(resolved),
        intraop_threads=env["intraop_threads"],
        interop_threads=env["interop_threads"],
        torch_version=torch.__version__,
        hardware=hardware_facts(),
        environment=env,
        warnings=tuple(notes),
        budget=run.budget,
        input_shapes=shapes,
        input_dtypes=dtypes,
    )
