"""Whole-model latency and throughput, with no hooks installed.

Warm-up runs until both ``warmup_iters`` iterations and ``warmup_seconds`` have passed and is
discarded; then timed iterations run until the stopping rule says enough:

* ``"target_ci"``: the 95 % (``confidence``) interval of the median, a distribution-free
  order-statistic interval, is within ``target_ci`` of the median on both sides;
* ``"max_seconds"``: the time budget of the timed phase ran out first;
* ``"num_iters"``: a fixed number of iterations was asked for (0.0.4 behaviour).

CPU iterations are timed with ``perf_counter_ns``; CUDA iterations with an event pair recorded
on the current stream and read after one device synchronisation per iteration.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

from moduleprofiler.inputs import make_invocation
from moduleprofiler.progress import Progress
from moduleprofiler.state import preserved_state
from moduleprofiler.timing.clock import (
    first_batch_size,
    issue_warnings,
    new_event,
    resolve_device,
    synchronize,
)
from moduleprofiler.timing.environment import (
    capture_environment,
    environment_warnings,
    get_hardware_specs,
    minor_faults,
    timing_context,
)
from moduleprofiler.timing.forward import validate_iterations
from moduleprofiler.timing.stats import StoppingRule, StopReason, Summary, summarize


@dataclass(frozen=True, eq=False)
class LatencyResult:
    """Hook-free whole-model latency. Raw samples are kept (``samples_ms``, one per timed
    iteration after ``dropped``); every statistic is derived from them."""

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
    stats: Summary = field(init=False)

    def __post_init__(self) -> None:
        summary = summarize(self.samples_ms, self.confidence)
        if summary is None:
            raise ValueError("a LatencyResult needs at least one sample")
        object.__setattr__(self, "stats", summary)

    # -- statistics (ms) -------------------------------------------------------------------
    @property
    def n(self) -> int:
        """Number of kept samples."""
        return self.stats.n

    @property
    def mean_ms(self) -> float:
        """Mean latency."""
        return self.stats.mean

    @property
    def median_ms(self) -> float:
        """Median latency: the headline number."""
        return self.stats.median

    @property
    def std_ms(self) -> float:
        """Sample standard deviation (ddof=1)."""
        return self.stats.std

    @property
    def min_ms(self) -> float:
        """Fastest iteration."""
        return self.stats.min

    @property
    def max_ms(self) -> float:
        """Slowest iteration (not trimmed: the tail is real latency)."""
        return self.stats.max

    @property
    def p5_ms(self) -> float:
        """5th percentile."""
        return self.stats.p5

    @property
    def p25_ms(self) -> float:
        """25th percentile."""
        return self.stats.p25

    @property
    def p75_ms(self) -> float:
        """75th percentile."""
        return self.stats.p75

    @property
    def p95_ms(self) -> float:
        """95th percentile."""
        return self.stats.p95

    @property
    def p99_ms(self) -> float:
        """99th percentile."""
        return self.stats.p99

    @property
    def iqr_ms(self) -> float:
        """Interquartile range."""
        return self.stats.iqr

    @property
    def ci_low_ms(self) -> float:
        """Lower bound of the median's confidence interval."""
        return self.stats.ci_low

    @property
    def ci_high_ms(self) -> float:
        """Upper bound of the median's confidence interval."""
        return self.stats.ci_high

    @property
    def ci_halfwidth_rel(self) -> float:
        """Larger side of the median's CI over the median."""
        return self.stats.ci_halfwidth_rel

    @property
    def throughput(self) -> float:
        """Items per second: ``batch_size * n / sum(t)`` (``nan`` without a batch size)."""
        if self.batch_size is None:
            return math.nan
        return self.batch_size * self.iterations_per_second

    @property
    def iterations_per_second(self) -> float:
        """Calls per second: ``n / sum(t)``."""
        total = float(self.samples_ms.sum()) / 1e3
        return self.n / total if total > 0 else math.nan

    def to_dict(self) -> dict[str, Any]:
        """Everything as plain Python: statistics (``*_ms``), throughput, settings,
        environment and the raw samples (``samples_ms``, a list)."""
        out: dict[str, Any] = {
            f"{name}_ms" if name not in ("n", "confidence") else name: value
            for name, value in self.stats.to_dict().items()
            if name not in ("ci_halfwidth_rel", "iqr_rel")
        }
        out.update(
            ci_halfwidth_rel=self.ci_halfwidth_rel,
            iqr_rel=self.stats.iqr_rel,
            throughput=self.throughput,
            iterations_per_second=self.iterations_per_second,
            batch_size=self.batch_size,
            stop_reason=self.stop_reason,
            target_ci=self.target_ci,
            dropped=self.dropped,
            warmup_iters=self.warmup_iters,
            warmup_seconds=self.warmup_seconds,
            elapsed_s=self.elapsed_s,
            cold_ms=self.cold_ms,
            calls_per_sample=self.calls_per_sample,
            device=self.device,
            intraop_threads=self.intraop_threads,
            interop_threads=self.interop_threads,
            torch_version=self.torch_version,
            hardware=dict(self.hardware),
            environment=dict(self.environment),
            warnings=list(self.warnings),
            samples_ms=self.samples_ms.tolist(),
        )
        return out

    def __repr__(self) -> str:
        return (
            f"LatencyResult(median={self.median_ms:.4f} ms, ci=[{self.ci_low_ms:.4f}, "
            f"{self.ci_high_ms:.4f}], n={self.n}, stop_reason={self.stop_reason!r}, "
            f"device={self.device!r})"
        )


class _IterationTimer:
    """Times ``calls`` calls of ``invoke`` per sample on ``device``; returns ns per call."""

    def __init__(self, device: torch.device, invoke: Callable[[], Any], calls: int) -> None:
        self.invoke = invoke
        self.calls = calls
        self.device = device
        if device.type == "cuda":
            self.start = new_event()
            self.end = new_event()

    def __call__(self) -> float:
        invoke = self.invoke
        if self.device.type == "cuda":
            self.start.record()
            for _ in range(self.calls):
                invoke()
            self.end.record()
            torch.cuda.synchronize(self.device)
            return float(self.start.elapsed_time(self.end)) * 1e6 / self.calls
        begin = time.perf_counter_ns()
        for _ in range(self.calls):
            invoke()
        return (time.perf_counter_ns() - begin) / self.calls


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
        max_seconds: budget of the timed phase; ``None`` for none.
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

    Returns:
        :class:`LatencyResult`.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    validate_iterations(num_iters, drop_first)
    keep_target = None if num_iters is None else num_iters - drop_first
    rule = StoppingRule(count=keep_target, target_ci=target_ci, max_seconds=max_seconds,
                        min_samples=min_iters, confidence=confidence)
    if calls_per_sample < 1:
        raise ValueError(f"calls_per_sample must be >= 1, got {calls_per_sample}")
    resolved = resolve_device(module, input, device)
    invoke = make_invocation(module, input, pred_fn)
    timer = _IterationTimer(resolved, invoke, calls_per_sample)
    cold_timer = _IterationTimer(resolved, invoke, 1)
    bar = Progress("benchmark", progress)
    samples: list[float] = []
    cold_ns: float | None = None
    grad = torch.no_grad() if no_grad else torch.enable_grad()
    try:
        with preserved_state(module, eval=eval), grad, timing_context(num_threads):
            env = capture_environment(resolved)
            threads = (torch.get_num_threads(), torch.get_num_interop_threads())
            if cold:
                cold_ns = cold_timer()
            warm_start = time.perf_counter()
            warm_count = 0
            while warm_count < warmup_iters or time.perf_counter() - warm_start < warmup_seconds:
                invoke()
                warm_count += 1
                if warm_count % 8 == 0:
                    synchronize(resolved)
                bar.update(0, keep_target, "warming up")
            synchronize(resolved)
            warm_elapsed = time.perf_counter() - warm_start
            faults_before = minor_faults()
            rule.restart()
            for _ in range(drop_first):
                timer()
            stop_reason: StopReason | None = None
            while stop_reason is None:
                samples.append(timer())
                stop_reason = rule.check(samples)
                bar.update(len(samples), keep_target, rule.progress_text())
            elapsed = rule.elapsed
            faults_after = minor_faults()
    finally:
        bar.close()
    faults = None
    if faults_before is not None and faults_after is not None:
        faults = (faults_after - faults_before) / (len(samples) + drop_first) / calls_per_sample
    env["minor_faults_per_iter"] = faults
    samples_ms = np.asarray(samples) / 1e6
    summary = summarize(samples_ms, confidence)
    notes = environment_warnings(env, faults, resolved,
                                 summary.median if summary is not None else None)
    shortfall = rule.shortfall(summary.ci_halfwidth_rel if summary is not None else math.inf)
    if shortfall is not None:
        notes.append(shortfall)
    if summary is not None and summary.n >= 4 and summary.iqr_rel > 0.10:
        notes.append(f"latencies are spread out (IQR/median {summary.iqr_rel:.2f} > 0.10)")
    issue_warnings(notes)
    return LatencyResult(
        samples_ms=samples_ms,
        stop_reason=stop_reason,
        dropped=drop_first,
        warmup_iters=warm_count,
        warmup_seconds=warm_elapsed,
        elapsed_s=elapsed,
        cold_ms=cold_ns / 1e6 if cold_ns is not None else None,
        batch_size=batch_size if batch_size is not None else first_batch_size(input),
        calls_per_sample=calls_per_sample,
        target_ci=target_ci,
        confidence=confidence,
        device=str(resolved),
        intraop_threads=threads[0],
        interop_threads=threads[1],
        torch_version=torch.__version__,
        hardware=get_hardware_specs(),
        environment=env,
        warnings=tuple(notes),
    )
