"""Whole-model latency and throughput, with no hooks installed: the measurement loop
(:mod:`moduleprofiler.timing.loop`) with one block, the timed calls.

Warm-up runs until both ``warmup_iters`` samples and ``warmup_seconds`` have passed and is
discarded; then timed iterations run, the stopping rule asked after each, until it says
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
from typing import IO, Any, ClassVar

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

from moduleprofiler.devices import timed_device
from moduleprofiler.export.io import Buffer, PathLike, emit
from moduleprofiler.export.json_io import decode, encode, read_json_text
from moduleprofiler.export.renamed import RenamedKeysDict
from moduleprofiler.failure import located_errors
from moduleprofiler.forward_grad import without_gradients
from moduleprofiler.inputs import input_shapes_of, make_invocation
from moduleprofiler.progress import Progress
from moduleprofiler.state import preserved_state
from moduleprofiler.timing.clock import first_batch_size, issue_warnings
from moduleprofiler.timing.clocks.stamps import make_stamps
from moduleprofiler.timing.device_trace import after_sessions_notes
from moduleprofiler.timing.environment import hardware_facts
from moduleprofiler.timing.loop import Block, BudgetUse, LoopRun, TimingOptions, measure
from moduleprofiler.timing.stats import StopReason, Summary, summarize, throughput
from moduleprofiler.validate import check_int, check_pass


class _Statistic:
    """A statistic of a :class:`LatencyResult`'s samples, read from its ``stats``
    (:class:`~moduleprofiler.timing.stats.Summary`): ``median_ms`` is ``stats.median``."""

    def __init__(self, doc: str) -> None:
        self.__doc__ = doc

    def __set_name__(self, owner: type, name: str) -> None:
        self.field = name.removesuffix("_ms")

    def __get__(self, result: Any, owner: type | None = None) -> Any:
        return self if result is None else getattr(result.stats, self.field)


_STATISTIC_KEYS: dict[str, str] = {
    "n": "iterations", "median": "latency_ms",
    **{name: f"latency_{name}_ms" for name in ("mean", "std", "min", "max", "p5", "p25", "p75",
                                               "p95", "p99", "iqr", "ci_low", "ci_high")},
}
"""The key of each statistic of :class:`~moduleprofiler.timing.stats.Summary` in
:meth:`LatencyResult.to_dict`: the median is ``latency_ms``, as the model table's
(``profile.summary(latency=...)``) and a timing's hook-free latency call it; the kept count is
``iterations``, as a timing's."""

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
        "warmup_iters": "warm-up iterations run before the timed ones (discarded)",
        "warmup_seconds": "seconds the warm-up took",
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
        name if name == "n" else f"{name}_ms": key
        for name, key in _STATISTIC_KEYS.items()}
    """Old key -> new one, for :meth:`to_dict`'s keys renamed in 0.2 (the old ones read their
    value with a ``DeprecationWarning`` until 0.3.0)."""

    samples_ms: NDArray[np.float64]
    stop_reason: StopReason
    dropped: int
    warmup_iters: int
    warmup_seconds: float
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

    # -- statistics (ms), each read from ``stats`` ------------------------------------------
    n = _Statistic("Number of kept samples.")
    mean_ms = _Statistic("Mean latency.")
    median_ms = _Statistic("Median latency: the headline number.")
    std_ms = _Statistic("Sample standard deviation (ddof=1).")
    min_ms = _Statistic("Fastest iteration.")
    max_ms = _Statistic("Slowest iteration (not trimmed: the tail is real latency).")
    p5_ms = _Statistic("5th percentile.")
    p25_ms = _Statistic("25th percentile.")
    p75_ms = _Statistic("75th percentile.")
    p95_ms = _Statistic("95th percentile.")
    p99_ms = _Statistic("99th percentile.")
    iqr_ms = _Statistic("Interquartile range.")
    ci_low_ms = _Statistic("Lower bound of the median's confidence interval.")
    ci_high_ms = _Statistic("Upper bound of the median's confidence interval.")
    ci_halfwidth_rel = _Statistic("Larger side of the median's CI over the median.")

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
        throughput, settings, environment and the raw samples (``samples_ms``, a list). The
        keys renamed in 0.2 (:attr:`RENAMED_KEYS`: ``median_ms`` is ``latency_ms``) still read
        their value, with a ``DeprecationWarning``."""
        out: dict[str, Any] = {_STATISTIC_KEYS.get(name, name): value
                               for name, value in self.stats.to_dict().items()
                               if name not in ("ci_halfwidth_rel", "iqr_rel")}
        out.update(ci_halfwidth_rel=self.ci_halfwidth_rel, iqr_rel=self.stats.iqr_rel,
                   throughput=self.throughput, iterations_per_second=self.iterations_per_second)
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
        values = {name: value for name, value in document.items() if name in names}
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

    def __repr__(self) -> str:
        return (
            f"LatencyResult(median={self.median_ms:.4f} ms, ci=[{self.ci_low_ms:.4f}, "
            f"{self.ci_high_ms:.4f}], n={self.n}, stop_reason={self.stop_reason!r}, "
            f"device={self.device!r})"
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
                           state=[preserved_state(module, eval=eval),
                                  torch.set_grad_enabled(grad)],
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
        warmup_iters=run.warmup_iters,
        warmup_seconds=run.warmup_s,
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
