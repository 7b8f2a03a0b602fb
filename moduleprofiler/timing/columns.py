"""The columns the timing passes write, declared once: per call the median time of that call
and its samples over the kept iterations; per module the median over the kept iterations of
the module's calls summed (``time_median_ms``), computed from those samples; and the kernel
clock's host and device times. Each declares what makes a profile hold it, so a view asked
for a time on a profile without one can say so."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from moduleprofiler.export.columns import (
    Aggregation,
    Statistic,
    median_of,
    median_statistic,
    register_column,
    register_quantity,
)
from moduleprofiler.timing.stats import summarize

TIME_NEEDS = ("a profile from time_modules(), train_step_times() or TrainingProfiler, or one "
              "merged with it: profile.merge(timing) (was profile.with_timing(timing))")
"""What every time column needs (views say it when a time is asked for and missing)."""


def _samples(name: str, what: str) -> None:
    """Declare the sample columns ``name`` (with its children's calls) and ``self_name``."""
    sides: tuple[tuple[str, Aggregation, str], ...] = (("", "inclusive", ""),
                                                       ("self_", "sum", "own "))
    for prefix, aggregation, own in sides:
        register_column(f"{prefix}{name}", "samples", aggregation=aggregation, unit="ms",
                        needs=TIME_NEEDS,
                        description=f"the call's {own}{what} in each kept iteration")


def _corrected(samples: str) -> Statistic:
    """The median of a module's host samples (already less the hooks' error), at least 0."""
    def compute(totals: Any) -> float | None:
        median = median_of(totals)
        return None if median is None else max(0.0, median)
    return Statistic((samples,), compute)


def _bound(device: Any, host: Any) -> str | None:
    """``"host"`` when the module's median host time exceeds its median device time."""
    device_ms, host_ms = median_of(device), median_of(host)
    if device_ms is None or host_ms is None:
        return None
    return "host" if max(0.0, host_ms) > device_ms else "device"


for _phase, _label in (("forward", ""), ("backward", "backward ")):
    _module = "time_median_ms" if _phase == "forward" else "backward_time_median_ms"
    _samples(f"{_phase}_samples_ms", f"{_phase} time")
    register_column(f"{_phase}_ms", "time", f"{_phase}", aggregation="inclusive", unit="ms",
                    needs=TIME_NEEDS, per_module=_module,
                    description=f"median {_phase} time of the call with its children's")
    register_column(f"self_{_phase}_ms", "time", f"self {_phase}", aggregation="sum",
                    unit="ms", needs=TIME_NEEDS, per_module=f"self_{_module}",
                    description=f"median {_phase} time of the call's own code")
    register_column(_module, "time", f"{_label}time median", aggregation="inclusive",
                    unit="ms", needs=TIME_NEEDS,
                    statistic=median_statistic(f"{_phase}_samples_ms"),
                    description=f"median over the kept iterations of the module's {_phase} "
                    "calls summed, with their children's")
    register_column(f"self_{_module}", "time", f"self {_label}time median", aggregation="sum",
                    unit="ms", needs=TIME_NEEDS,
                    statistic=median_statistic(f"self_{_phase}_samples_ms"),
                    description=f"median over the kept iterations of the module's own "
                    f"{_phase} time")

# Under the kernel clock a call's time is the median of its samples, a module's the median of
# its calls' samples summed per iteration.
for _prefix, _phase in (("", ""), ("backward_", "bwd ")):
    _samples(f"{_prefix}device_samples_ms", "device time")
    _samples(f"{_prefix}host_samples_ms", "host time less the hooks' calibrated error")
    register_column(f"{_prefix}device_ms", "time", f"{_phase}device", aggregation="inclusive",
                    unit="ms", needs=TIME_NEEDS,
                    statistic=median_statistic(f"{_prefix}device_samples_ms"),
                    description="summed duration of the kernels, copies and sets the call "
                    "launched (the kernel clock), with its children's")
    register_column(f"self_{_prefix}device_ms", "time", f"{_phase}self device",
                    aggregation="sum", unit="ms", needs=TIME_NEEDS,
                    statistic=median_statistic(f"self_{_prefix}device_samples_ms"),
                    description="device time of the work the call launched itself")
    register_column(f"{_prefix}host_ms", "time", f"{_phase}host", aggregation="inclusive",
                    unit="ms", needs=TIME_NEEDS,
                    statistic=_corrected(f"{_prefix}host_samples_ms"),
                    description="wall time on the host between the call's hooks, less the "
                    "calibrated hook cost, with its children's")
    register_column(f"self_{_prefix}host_ms", "time", f"{_phase}self host", aggregation="sum",
                    unit="ms", needs=TIME_NEEDS,
                    statistic=_corrected(f"self_{_prefix}host_samples_ms"),
                    description="host time of the call's own code")
    register_column(f"{_prefix}time_bound", "text", f"{_phase}bound by", aggregation="none",
                    needs=TIME_NEEDS, statistic=Statistic(
                        (f"{_prefix}device_samples_ms", f"{_prefix}host_samples_ms"), _bound),
                    description="host: issuing the work took the host longer (under hooks, "
                    "whose cost is in the host time) than the device took to run it; device: "
                    "the other way round. The model's row: the regime of the hook-free "
                    "iteration (time_modules)")

for _name, _unit, _what in (
        ("device_launches_samples", "", "kernels, copies and sets its forward launched"),
        ("device_busy_samples_ms", "ms", "time the device ran some of its forward's work"),
        ("device_span_samples_ms", "ms", "span from its forward's first device work to the "
         "end of its last")):
    register_column(_name, "samples", aggregation="inclusive", unit=_unit, needs=TIME_NEEDS,
                    description=f"the call's {_what} (with its children's) in each traced "
                    "iteration")


def _idle_share(busy: Any, span: Any) -> float | None:
    """The median over the traced iterations of the share of a module's device span in which
    the device ran none of its work (iterations in which it launched nothing left out)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        idle = np.clip(1.0 - np.asarray(busy) / np.asarray(span), 0.0, 1.0)
    return median_of(idle[np.isfinite(idle)])


register_column("device_launches", "count", "launches", aggregation="inclusive",
                needs=TIME_NEEDS, statistic=median_statistic("device_launches_samples"),
                description="kernels, copies and sets the forward launched, with its "
                "children's (median over the traced iterations)")
register_column("device_idle_share", "fraction", "device idle", aggregation="none",
                needs=TIME_NEEDS, statistic=Statistic(
                    ("device_busy_samples_ms", "device_span_samples_ms"), _idle_share),
                description="share of the span of the call's device work in which the device "
                "ran none of it")


def _summary(field: str) -> Callable[..., float | None]:
    """One field of :func:`~moduleprofiler.timing.stats.summarize` of a module's totals, at
    the pass's confidence level (the CI bounds)."""
    def compute(totals: Any, facts: Any = None) -> float | None:
        summary = summarize(totals, facts.confidence if facts is not None else 0.95)
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

for _stem, _samples_name in (
        ("time", "forward_samples_ms"), ("backward_time", "backward_samples_ms"),
        ("device", "device_samples_ms"), ("backward_device", "backward_device_samples_ms")):
    for _own in ("", "self_"):
        for _field in STATISTICS:
            register_column(f"{_own}{_stem}_{_field}_ms", "time", aggregation="none",
                            unit="ms", needs=TIME_NEEDS, detail=True, statistic=Statistic(
                                (f"{_own}{_samples_name}",), _summary(_field), facts=True),
                            description=f"{_field} over the kept iterations of the module's "
                            f"{_own.replace('self_', 'own ')}{_stem.replace('_', ' ')} per "
                            "iteration")

for _phase in ("forward", "backward"):
    _prefix = "" if _phase == "forward" else "backward_"
    for _own, _what in (("", "with its children's"), ("self_", "of its own code")):
        register_column(f"{_own}{_phase}_error_samples_ms", "samples",
                        aggregation="inclusive" if not _own else "sum", unit="ms",
                        needs=TIME_NEEDS, description=f"the hooks' calibrated error in the "
                        f"call's {_phase} time {_what}, in each kept iteration")
        _pair = (f"{_own}{_phase}_samples_ms", f"{_own}{_phase}_error_samples_ms")
        if _phase == "forward":  # a backward node's error is its own: self = inclusive
            register_column(f"{_own}expected_error_ms", "time", aggregation="none",
                            unit="ms", needs=TIME_NEEDS, detail=True,
                            statistic=median_statistic(_pair[1]),
                            description="the hooks' calibrated error in the module's forward "
                            f"time {_what} (median per iteration)")
        register_column(f"{_own}{_prefix}time_corrected_median_ms", "time", aggregation="none",
                        unit="ms", needs=TIME_NEEDS, detail=True,
                        statistic=Statistic(_pair, _less_error),
                        description=f"median {_phase} time {_what} less the hooks' calibrated "
                        "error, at least 0; shown beside the raw median, never instead")
        # a text column (its yes/no a label): a narrow terminal hides it before eliding names
        register_column(f"{_own}{_prefix}low_confidence", "text", aggregation="none",
                        needs=TIME_NEEDS, statistic=Statistic(_pair, _low_confidence,
                                                              facts=True),
                        description=f"the module's median {_phase} time {_what} is within "
                        "10x of the hooks' expected error, or it kept fewer samples than the "
                        "run's min_iters")

register_column("self_share", "fraction", "self %", aggregation="none", needs=TIME_NEEDS,
                description="the module's median time in its own code over the model's median "
                "time (a timing result's text report)")

register_quantity("time", "self_time_median_ms", "time_median_ms", "time")
register_quantity("time", "self_device_ms", "device_ms", "device time", prefer=True)
