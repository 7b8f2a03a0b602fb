"""The columns the timing passes write, declared once: per call the median time of that call
and its samples over the kept iterations; per module the median over the kept iterations of
the module's calls summed (``time_median_ms``), computed from those samples; and the kernel
clock's host and device times. Each declares what makes a profile hold it, so a view asked
for a time on a profile without one can say so."""

from __future__ import annotations

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

register_quantity("time", "self_time_median_ms", "time_median_ms", "time")
register_quantity("time", "self_device_ms", "device_ms", "device time", prefer=True)
