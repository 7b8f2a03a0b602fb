"""Statistics of timing samples: percentiles, a distribution-free CI of the median, summaries.

Timing distributions have heavy right tails (preemption, page faults, allocator work), so the
headline numbers are the median and the interquartile range; mean and standard deviation are
kept for 0.0.4 compatibility and because the tail is real latency. Nothing is trimmed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from statistics import NormalDist
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

_EXACT_LIMIT = 1000
"""Up to this many samples the binomial tail is summed exactly; above, a normal approximation
with continuity correction is used (it is off by at most one rank there)."""


def as_samples(samples: ArrayLike) -> NDArray[np.float64]:
    """Samples as a 1-D float64 array (a copy is not made when not needed)."""
    return np.asarray(samples, dtype=np.float64).reshape(-1)


def percentile(samples: ArrayLike, q: float) -> float:
    """The ``q``-th percentile (0-100) with linear interpolation between order statistics.

    This is numpy's default (and pandas' ``quantile``) method: for sorted ``x`` of length
    ``n`` the position is ``(n - 1) * q / 100``. ``nan`` for no samples.
    """
    array = as_samples(samples)
    if array.size == 0:
        return math.nan
    return float(np.percentile(array, q))


@lru_cache(maxsize=4096)
def median_ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int] | None:
    """0-based ranks ``(lo, hi)`` of the sorted samples that bound the median with at least
    ``confidence`` coverage, whatever the distribution (binomial order-statistic interval).

    With ``B ~ Binomial(n, 1/2)`` the interval ``[x_(l), x_(n-l+1)]`` (1-based) covers the
    population median with probability ``1 - 2 P(B <= l - 1)``; ``l`` is the largest rank that
    keeps this at least ``confidence``. ``None`` when no interval reaches it (``n < 6`` at 95 %).

    Example: n = 10 -> P(B <= 1) = 11/1024 <= 0.025 < P(B <= 2) = 56/1024, so l = 2 and the
    interval is ``[x_(2), x_(9)]``, i.e. ranks ``(1, 8)``, coverage 1 - 22/1024 = 0.9785.
    """
    if n <= 0:
        return None
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    tail = (1.0 - confidence) / 2.0
    if n <= _EXACT_LIMIT:
        # exact: the integer cumulative sum against tail * 2**n (2**1000 still fits a float)
        limit = tail * 2.0**n
        cumulative = 0
        coefficient = 1
        l_count = 0  # the largest l - 1 + 1 whose lower tail P(B <= l - 1) stays within it
        for i in range(n + 1):
            cumulative += coefficient
            if cumulative > limit:
                break
            l_count = i + 1
            coefficient = coefficient * (n - i) // (i + 1)
        l_rank = l_count  # 1-based rank l = l_count, valid when >= 1
    else:
        z = NormalDist().inv_cdf(1.0 - tail)
        l_rank = math.floor(n / 2.0 - 0.5 - z * math.sqrt(n) / 2.0) + 1
    if l_rank < 1:
        return None
    return l_rank - 1, n - l_rank


def median_ci(samples: ArrayLike, confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free ``confidence`` interval of the median (see :func:`median_ci_ranks`);
    ``(nan, nan)`` when there are too few samples for that confidence."""
    array = as_samples(samples)
    ranks = median_ci_ranks(array.size, confidence)
    if ranks is None:
        return math.nan, math.nan
    ordered = np.sort(array)
    return float(ordered[ranks[0]]), float(ordered[ranks[1]])


def relative_ci_halfwidth(median: float, ci_low: float, ci_high: float) -> float:
    """The larger side of the CI as a fraction of the median: ``max(m - lo, hi - m) / m``.

    The order-statistic interval is not symmetric, so the larger side is the honest figure.
    ``inf`` when the CI is undefined or the median is 0.
    """
    if math.isnan(ci_low) or math.isnan(ci_high) or median <= 0:
        return math.inf
    return max(median - ci_low, ci_high - median) / median


@dataclass(frozen=True)
class Summary:
    """Statistics of one set of samples, all in the samples' unit (milliseconds here).

    ``std`` is the sample standard deviation (``ddof=1``, ``nan`` for one sample), percentiles
    interpolate linearly, ``ci_low``/``ci_high`` bound the median at ``confidence``.
    """

    n: int
    mean: float
    median: float
    std: float
    min: float
    max: float
    p5: float
    p25: float
    p75: float
    p95: float
    p99: float
    iqr: float
    ci_low: float
    ci_high: float
    confidence: float = 0.95

    @property
    def ci_halfwidth_rel(self) -> float:
        """The CI's larger side over the median (0.01 = the median is known to within 1 %)."""
        return relative_ci_halfwidth(self.median, self.ci_low, self.ci_high)

    @property
    def iqr_rel(self) -> float:
        """IQR / median: the spread; ``torch.utils.benchmark`` warns above 0.1."""
        return self.iqr / self.median if self.median > 0 else math.inf

    def to_dict(self) -> dict[str, Any]:
        """The fields plus ``ci_halfwidth_rel`` and ``iqr_rel``."""
        data = asdict(self)
        data["ci_halfwidth_rel"] = self.ci_halfwidth_rel
        data["iqr_rel"] = self.iqr_rel
        return data


def summarize(samples: ArrayLike, confidence: float = 0.95) -> Summary | None:
    """A :class:`Summary` of ``samples``, or ``None`` when there are none."""
    array = as_samples(samples)
    n = int(array.size)
    if n == 0:
        return None
    p5, p25, median, p75, p95, p99 = (
        float(v) for v in np.percentile(array, [5, 25, 50, 75, 95, 99])
    )
    ci_low, ci_high = median_ci(array, confidence)
    return Summary(
        n=n,
        mean=float(array.mean()),
        median=median,
        std=float(array.std(ddof=1)) if n > 1 else math.nan,
        min=float(array.min()),
        max=float(array.max()),
        p5=p5,
        p25=p25,
        p75=p75,
        p95=p95,
        p99=p99,
        iqr=p75 - p25,
        ci_low=ci_low,
        ci_high=ci_high,
        confidence=confidence,
    )


def throughput(batch_size: float, durations_s: Sequence[float] | NDArray[np.float64]) -> float:
    """Items per second over a run: ``batch_size * n / sum(t)`` (never ``mean(batch / t)``,
    which overweights the fast iterations)."""
    array = as_samples(durations_s)
    total = float(array.sum())
    if array.size == 0 or total <= 0:
        return math.nan
    return batch_size * array.size / total


def ci_halfwidth(samples: ArrayLike, confidence: float = 0.95) -> float:
    """The larger side of the median's CI over the median (:func:`relative_ci_halfwidth` of
    :func:`median_ci`); ``inf`` with too few samples for an interval."""
    array = as_samples(samples)
    low, high = median_ci(array, confidence)
    return relative_ci_halfwidth(float(np.median(array)) if array.size else math.nan,
                                 low, high)


StopReason = Literal["target_ci", "max_seconds", "num_iters"]
"""Why a repeated measurement stopped: its median's CI was tight enough, its time budget ran
out, or a fixed number of iterations was asked for."""


class StoppingRule:
    """When a repeated measurement has enough samples: the one stopping rule of
    :func:`~moduleprofiler.timing.benchmark` (asked after every sample),
    :func:`~moduleprofiler.timing.time_modules` and
    :func:`~moduleprofiler.timing.train_step_times` (asked after every round).

    :meth:`check` answers ``"num_iters"`` once ``count`` samples are in; ``"target_ci"`` once
    the ``confidence`` interval of the median is within ``target_ci`` of it on both sides
    (every series given must reach it; asked from ``min_samples`` samples on, then each time
    the count has grown by 5 %, so the sorting stays cheap); ``"max_seconds"`` once
    ``max_seconds`` have passed since the rule was made; else ``None``.

    Raises:
        ValueError: a bad argument (named), or none of the three that could stop the run.
    """

    def __init__(self, *, count: int | None = None, target_ci: float | None = 0.01,
                 max_seconds: float | None = 10.0, min_samples: int = 10,
                 confidence: float = 0.95) -> None:
        if count is not None and (not isinstance(count, int) or count < 1):
            raise ValueError(f"num_iters must be a positive int or None, got {count!r}")
        if target_ci is not None and not (isinstance(target_ci, (int, float))
                                          and target_ci > 0):
            raise ValueError(f"target_ci must be > 0 or None, got {target_ci!r}")
        if max_seconds is not None and not (isinstance(max_seconds, (int, float))
                                            and max_seconds > 0):
            raise ValueError(f"max_seconds must be > 0 or None, got {max_seconds!r}")
        if not isinstance(min_samples, int) or min_samples < 1:
            raise ValueError(f"min_iters must be a positive int, got {min_samples!r}")
        if count is None and target_ci is None and max_seconds is None:
            raise ValueError("give num_iters, target_ci or max_seconds: nothing would stop "
                             "the run")
        self.count = count
        self.target_ci = target_ci
        self.max_seconds = max_seconds
        self.confidence = confidence
        self.width = math.inf
        """The CI's relative half-width at the last check (``inf`` before one)."""
        self.reason: StopReason | None = None
        self._first_check = max(min_samples, 6)  # no 95 % interval below 6 samples
        self._next_check = self._first_check
        self.start = time.perf_counter()

    @property
    def elapsed(self) -> float:
        """Seconds since the rule was made (the start of its time budget)."""
        return time.perf_counter() - self.start

    @property
    def remaining(self) -> float:
        """Seconds of the budget left (``inf`` without a budget)."""
        if self.max_seconds is None:
            return math.inf
        return self.max_seconds - self.elapsed

    def check(self, *series: Sequence[float]) -> StopReason | None:
        """Whether to stop now, given every series of samples so far (their shortest sets
        the count); the reason is kept in :attr:`reason`."""
        n = min((len(s) for s in series), default=0)
        if self.count is not None and n >= self.count:
            self.reason = "num_iters"
        elif self.target_ci is not None and n >= self._next_check:
            self.width = max(ci_halfwidth(s, self.confidence) for s in series)
            if self.width <= self.target_ci:
                self.reason = "target_ci"
            self._next_check = max(n + 1, int(n * 1.05))
        if self.reason is None and self.remaining <= 0:
            self.reason = "max_seconds"
        return self.reason

    def progress_text(self) -> str:
        """``"CI ±2.31% (target ±1%), 7.2 s left"`` for a progress line (empty without a
        target or budget)."""
        parts = []
        if self.target_ci is not None:
            width = f"±{100 * self.width:.2f}%" if math.isfinite(self.width) else "-"
            parts.append(f"CI {width} (target ±{100 * self.target_ci:g}%)")
        if self.max_seconds is not None:
            parts.append(f"{max(0.0, self.remaining):.1f} s left")
        return ", ".join(parts)

    def shortfall(self, width: float) -> str | None:
        """The warning when the budget ended the run before the target (``width``: the
        CI's relative half-width of the result), else ``None``."""
        if self.reason != "max_seconds" or self.target_ci is None:
            return None
        shown = f"±{100 * width:.2f}%" if math.isfinite(width) else "undefined: too few samples"
        return (f"the time budget ({self.max_seconds:g} s) ended the run before the median's "
                f"CI reached ±{100 * self.target_ci:g}% (it is {shown})")
