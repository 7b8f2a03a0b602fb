"""The kernel clock's column block: the columns only its readings fill (device and host
times, the regime each call is bound by, launches and the device's idle share), declared once
beside the clock (:class:`~.kernels.KernelClock` names them as its ``columns``). Under the
kernel clock a call's time is the median of its samples, a module's the median of its calls'
samples summed per iteration."""

from __future__ import annotations

from typing import Any

import numpy as np

from moduleprofiler.export.columns import (
    ColumnSpec,
    Kind,
    Statistic,
    median_of,
    median_statistic,
    register_column,
    register_quantity,
)
from moduleprofiler.timing.columns import (
    TIME_NEEDS,
    corrected_median,
    sample_columns,
    statistic_columns,
)

_declared: list[ColumnSpec] = []


def _column(name: str, kind: Kind, label: str | None = None, **declared: Any) -> None:
    """Register one of this block's columns and keep it in :data:`DEVICE_COLUMNS`."""
    _declared.append(register_column(name, kind, label, **declared))


def time_bound(device_ms: float | None, host_ms: float | None) -> str | None:
    """A call's or module's ``time_bound``: ``"host"`` when issuing its work took the host
    longer (``host_ms``, at least 0) than the device took to run it (the device then waits for
    launches), else ``"device"``; ``None`` where either is unknown."""
    if device_ms is None or host_ms is None:
        return None
    return "host" if max(0.0, host_ms) > device_ms else "device"


def _bound(device: Any, host: Any) -> str | None:
    """The ``time_bound`` of a module's median host and device times."""
    return time_bound(median_of(device), median_of(host))


for _prefix, _phase in (("", ""), ("backward_", "bwd ")):
    _declared.extend(sample_columns(f"{_prefix}device_samples_ms", "device time"))
    _declared.extend(sample_columns(f"{_prefix}host_samples_ms",
                                    "host time less the hooks' calibrated error"))
    _column(f"{_prefix}device_ms", "time", f"{_phase}device", aggregation="inclusive",
            unit="ms", needs=TIME_NEEDS,
            statistic=median_statistic(f"{_prefix}device_samples_ms"),
            description="summed duration of the kernels, copies and sets the call "
            "launched (the kernel clock), with its children's")
    _column(f"self_{_prefix}device_ms", "time", f"{_phase}self device",
            aggregation="sum", unit="ms", needs=TIME_NEEDS,
            statistic=median_statistic(f"self_{_prefix}device_samples_ms"),
            description="device time of the work the call launched itself")
    _column(f"{_prefix}host_ms", "time", f"{_phase}host", aggregation="inclusive",
            unit="ms", needs=TIME_NEEDS,
            statistic=corrected_median(f"{_prefix}host_samples_ms"),
            description="wall time on the host between the call's hooks, less the "
            "calibrated hook cost, with its children's")
    _column(f"self_{_prefix}host_ms", "time", f"{_phase}self host", aggregation="sum",
            unit="ms", needs=TIME_NEEDS,
            statistic=corrected_median(f"self_{_prefix}host_samples_ms"),
            description="host time of the call's own code")
    _column(f"{_prefix}time_bound", "text", f"{_phase}bound by", aggregation="none",
            needs=TIME_NEEDS, statistic=Statistic(
                (f"{_prefix}device_samples_ms", f"{_prefix}host_samples_ms"), _bound),
            description="host: issuing the work took the host longer (under hooks, "
            "whose cost is in the host time) than the device took to run it; device: "
            "the other way round. The model's row: the regime of the hook-free "
            "iteration (time_modules)")

TRACE_SAMPLES = ("device_launches_samples", "device_busy_samples_ms", "device_span_samples_ms")
"""The sample columns of each traced iteration's launches, busy time and span (per call, with
its children's)."""

for _name, _unit, _what in zip(TRACE_SAMPLES, ("", "ms", "ms"), (
        "kernels, copies and sets its forward launched",
        "time the device ran some of its forward's work",
        "span from its forward's first device work to the end of its last")):
    _column(_name, "samples", aggregation="inclusive", unit=_unit, needs=TIME_NEEDS,
            description=f"the call's {_what} (with its children's) in each traced "
            "iteration")


def _idle_share(busy: Any, span: Any) -> float | None:
    """The median over the traced iterations of the share of a module's device span in which
    the device ran none of its work (iterations in which it launched nothing left out);
    ``None`` where no span was read (the compiled clock reads none)."""
    busy, span = np.asarray(busy, dtype=np.float64), np.asarray(span, dtype=np.float64)
    if busy.shape != span.shape:
        return None
    with np.errstate(invalid="ignore", divide="ignore"):
        idle = np.clip(1.0 - busy / span, 0.0, 1.0)
    return median_of(idle[np.isfinite(idle)])


_column("device_launches", "count", "device launches", aggregation="inclusive",
        needs=TIME_NEEDS, statistic=median_statistic("device_launches_samples"),
        description="kernels, copies and sets the device ran for the forward, with its "
        "children's (median over the traced iterations; launches is the estimate from the "
        "operators)")
_column("device_idle_share", "fraction", "device idle", aggregation="none",
        needs=TIME_NEEDS, statistic=Statistic(
            ("device_busy_samples_ms", "device_span_samples_ms"), _idle_share),
        description="share of the span of the call's device work in which the device "
        "ran none of it")

TRACE_MODULE_COLUMNS = ("device_launches", "device_idle_share")
"""The per-module columns of the traced iterations beside the times."""

for _stem, _samples_name in (("device", "device_samples_ms"),
                             ("backward_device", "backward_device_samples_ms")):
    _declared.extend(statistic_columns(_stem, _samples_name))


def _few_traced(totals: Any, facts: Any = None) -> bool | None:
    """Whether a module's device time comes from fewer traced samples than the traced block's
    own minimum (``facts.min_traced_samples``). Only a share of the kept iterations is traced,
    by design, so the loop's ``min_iters`` is not the measure; kernel durations carry no hook
    error, so the count is the whole test."""
    least = facts.min_traced_samples if facts is not None else 0
    if median_of(totals) is None or least is None:  # no samples, or a minimum not known
        return None
    return bool(len(totals) < least)


for _prefix, _phase in (("", "forward"), ("backward_", "backward")):
    for _own, _what in (("", "with its children's"), ("self_", "of its own code")):
        # a text column (its yes/no a label) that a narrow table shows while a device
        # time of the module is shown: it counts the module's traced iterations, the same
        # for its self and its inclusive time
        _column(f"{_own}{_prefix}device_low_confidence", "text", aggregation="none",
                needs=TIME_NEEDS, qualifies=(f"{_prefix}device_ms", f"self_{_prefix}device_ms"),
                statistic=Statistic(
                    (f"{_own}{_prefix}device_samples_ms",), _few_traced, facts=True),
                description=f"the module's median {_phase} device time {_what} comes from "
                "fewer traced iterations than the traced block's own minimum (its share of "
                "min_iters, one at least: the kernel clock traces a quarter of each round's "
                "iterations, the compiled clock half); a fixed num_iters run is never flagged")

register_quantity("time", "self_device_ms", "device_ms", "device time", prefer=True)

DEVICE_COLUMNS: tuple[ColumnSpec, ...] = tuple(_declared)
"""Every column the kernel clock's readings fill, in their order."""
