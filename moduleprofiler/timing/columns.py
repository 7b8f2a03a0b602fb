"""The columns the timing passes write from a clock's stamps, declared once: per call the
median time of that call and its samples over the kept iterations; per module the median over
the kept iterations of the module's calls summed (``time_median_ms``), computed from those
samples, its statistics and the hooks' error. Each declares what makes a profile hold it, so
a view asked for a time on a profile without one can say so. A clock that reads more declares
its own block beside it (the kernel clock's host and device times:
:mod:`moduleprofiler.timing.clocks.kernel_columns`), with the helpers here."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from moduleprofiler.export.columns import (
    Aggregation,
    ColumnSpec,
    Kind,
    Statistic,
    median_of,
    median_statistic,
    register_column,
    register_quantity,
)
from moduleprofiler.timing.stats import Summary, summarize

TIME_NEEDS = ("a profile from time_modules(), train_step_times() or TrainingProfiler, or one "
              "merged with it: profile.merge(timing) (was profile.with_timing(timing))")
"""What every time column needs (views say it when a time is asked for and missing)."""


def sample_columns(name: str, what: str) -> tuple[ColumnSpec, ...]:
    """Declare the sample columns ``name`` (with its children's calls) and ``self_name``."""
    sides: tuple[tuple[str, Aggregation, str], ...] = (("", "inclusive", ""),
                                                       ("self_", "sum", "own "))
    return tuple(register_column(f"{prefix}{name}", "samples", aggregation=aggregation,
                                 unit="ms", needs=TIME_NEEDS,
                                 description=f"the call's {own}{what} in each kept iteration")
                 for prefix, aggregation, own in sides)


_declared: list[ColumnSpec] = []


def corrected_median(samples: str) -> Statistic:
    """The median of a module's host samples (already less the hooks' error), at least 0."""
    def compute(totals: Any) -> float | None:
        median = median_of(totals)
        return None if median is None else max(0.0, median)
    return Statistic((samples,), compute)


def _column(name: str, kind: Kind, label: str | None = None, **declared: Any) -> None:
    """Register one of this block's columns and keep it in :data:`TIME_COLUMNS`."""
    _declared.append(register_column(name, kind, label, **declared))


for _phase, _label in (("forward", ""), ("backward", "backward ")):
    _module = "time_median_ms" if _phase == "forward" else "backward_time_median_ms"
    _declared.extend(sample_columns(f"{_phase}_samples_ms", f"{_phase} time"))
    _column(f"{_phase}_ms", "time", f"{_phase}", aggregation="inclusive", unit="ms",
            needs=TIME_NEEDS, per_module=_module,
            description=f"median {_phase} time of the call with its children's")
    _column(f"self_{_phase}_ms", "time", f"self {_phase}", aggregation="sum",
            unit="ms", needs=TIME_NEEDS, per_module=f"self_{_module}",
            description=f"median {_phase} time of the call's own code")
    _column(_module, "time", f"{_label}time median", aggregation="inclusive",
            unit="ms", needs=TIME_NEEDS,
            statistic=median_statistic(f"{_phase}_samples_ms"),
            description=f"median over the kept iterations of the module's {_phase} "
            "calls summed, with their children's")
    _column(f"self_{_module}", "time", f"self {_label}time median", aggregation="sum",
            unit="ms", needs=TIME_NEEDS,
            statistic=median_statistic(f"self_{_phase}_samples_ms"),
            description=f"median over the kept iterations of the module's own "
            f"{_phase} time")


_last_summary: list[tuple[Any, float, Summary | None]] = []
"""The last totals array summarized, its confidence level and its summary (one slot)."""


def summary_of(totals: Any, confidence: float) -> Summary | None:
    """:func:`~moduleprofiler.timing.stats.summarize` of ``totals``, once per array: the
    module frame hands a module's statistic columns (a dozen per quantity) one array of its
    totals, so the same array summarized last is summarized already. The slot holds the
    array itself (so its identity is never reused) and is read and replaced whole."""
    last = _last_summary[0] if _last_summary else None
    if last is not None and last[0] is totals and last[1] == confidence:
        return last[2]
    summary = summarize(totals, confidence)
    _last_summary[:] = [(totals, confidence, summary)]
    return summary


def _summary(field: str) -> Callable[..., float | None]:
    """One field of :func:`summary_of` a module's totals, at the pass's confidence level
    (the CI bounds)."""
    def compute(totals: Any, facts: Any = None) -> float | None:
        summary = summary_of(totals, facts.confidence if facts is not None else 0.95)
        return None if summary is None else float(getattr(summary, field))
    return compute


def _low_confidence(totals: Any, error: Any, facts: Any = None) -> bool | None:
    """Whether a module's median is within 10x of the hooks' expected error in it, or it kept
    fewer samples than the run trusts (``facts.min_samples``: the loop's ``min_iters``)."""
    median = median_of(totals)
    if median is None:
        return None
    few = len(totals) < (facts.min_samples if facts is not None else 0)
    return bool(few or median < 10 * (median_of(error) or 0.0))


def _less_error(totals: Any, error: Any) -> float | None:
    """The median of a module's totals less the hooks' error in each, at least 0."""
    if not len(totals) or len(error) != len(totals):
        return median_of(totals)
    return max(0.0, float(np.percentile(np.asarray(totals) - np.asarray(error), 50)))


STATISTICS = ("mean", "std", "min", "max", "p5", "p25", "p75", "p95", "p99", "iqr", "ci_low",
              "ci_high")
"""The statistics of every timed quantity beside its median, as module columns
``<quantity>_<statistic>_ms`` (``time_p95_ms``, ``self_device_ci_high_ms``...), shown when asked
for."""


def statistic_columns(stem: str, samples: str) -> tuple[ColumnSpec, ...]:
    """Declare the :data:`STATISTICS` columns ``<own><stem>_<statistic>_ms`` of the sample
    columns ``samples`` and ``self_samples`` (own: ``""`` and ``"self_"``)."""
    return tuple(
        register_column(f"{own}{stem}_{field}_ms", "time", aggregation="none", unit="ms",
                        needs=TIME_NEEDS, detail=True, statistic=Statistic(
                            (f"{own}{samples}",), _summary(field), facts=True),
                        description=f"{field} over the kept iterations of the module's "
                        f"{own.replace('self_', 'own ')}{stem.replace('_', ' ')} per "
                        "iteration")
        for own in ("", "self_") for field in STATISTICS)


for _stem, _samples_name in (("time", "forward_samples_ms"),
                             ("backward_time", "backward_samples_ms")):
    _declared.extend(statistic_columns(_stem, _samples_name))

for _phase in ("forward", "backward"):
    _prefix = "" if _phase == "forward" else "backward_"
    for _own, _what in (("", "with its children's"), ("self_", "of its own code")):
        _column(f"{_own}{_phase}_error_samples_ms", "samples",
                aggregation="inclusive" if not _own else "sum", unit="ms",
                needs=TIME_NEEDS, description=f"the hooks' calibrated error in the "
                f"call's {_phase} time {_what}, in each kept iteration")
        _pair = (f"{_own}{_phase}_samples_ms", f"{_own}{_phase}_error_samples_ms")
        if _phase == "forward":  # a backward node's error is its own: self = inclusive
            _column(f"{_own}expected_error_ms", "time", aggregation="none",
                    unit="ms", needs=TIME_NEEDS, detail=True,
                    statistic=median_statistic(_pair[1]),
                    description="the hooks' calibrated error in the module's forward "
                    f"time {_what} (median per iteration)")
        _column(f"{_own}{_prefix}time_corrected_median_ms", "time", aggregation="none",
                unit="ms", needs=TIME_NEEDS, detail=True,
                statistic=Statistic(_pair, _less_error),
                description=f"median {_phase} time {_what} less the hooks' calibrated "
                "error, at least 0; shown beside the raw median, never instead")
        # a text column (its yes/no a label) that a narrow table hides after its time
        _column(f"{_own}{_prefix}low_confidence", "text", aggregation="none",
                needs=TIME_NEEDS, qualifies=(f"{_own}{_prefix}time_median_ms",
                                              *(("self_share",) if _own and not _prefix
                                                else ())),
                statistic=Statistic(_pair, _low_confidence, facts=True),
                description=f"the module's median {_phase} time {_what} is within "
                "10x of the hooks' expected error, or it kept fewer samples than the "
                "run's min_iters")

_column("self_share", "fraction", "self %", aggregation="none", needs=TIME_NEEDS,
        description="the module's median time in its own code over the model's median "
        "time (a timing result's text report)")

register_quantity("time", "self_time_median_ms", "time_median_ms", "time")

TIME_COLUMNS: tuple[ColumnSpec, ...] = tuple(_declared)
"""The columns a timing result's records and module frame hold from any clock's stamps."""
