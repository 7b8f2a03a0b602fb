"""Per-module efficiency: achieved FLOP/s and bytes/s, % of peak, roofline time and a label.

:func:`with_efficiency` takes a profile that has operator traffic (:class:`TrafficListener`) and
measured times (``Profile.with_timing``) and adds, per call and per module, for the module's own
work (children excluded) against its self time:

* ``intensity``: FLOPs per byte moved (FLOPs = the profile's ``ops``: every multiply and add);
* ``roofline_ms``: ``max(FLOPs / peak FLOP/s, bytes / bandwidth)``, the time the work needs at
  the device's peaks for the dtype it ran in;
* ``achieved_tflops`` / ``achieved_gbs``, and ``compute_fraction`` / ``bandwidth_fraction`` of
  the peaks;
* ``bound``: ``"compute"`` or ``"memory"`` (the larger roof), or ``"overhead"`` when the
  launches alone take longer than the roofline (``launches x launch_us``) or the roofline
  explains less than ``overhead_share`` of the measured time (launch, Python, CPU or
  synchronisation costs dominate);
* ``above_peak``: the achieved FLOP/s exceed the peak (a counting or dtype error: the wrong
  peak was assumed, or the FLOPs are overcounted) or the achieved bytes/s exceed the bandwidth
  (data served from cache, or overcounted bytes). Such modules also raise an
  :class:`EfficiencyWarning`: never printed silently.

With a backward (``profile(backward=True)`` and training-step times) the same columns are
computed for the backward with a ``backward_`` prefix.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterable
from typing import Any

import torch

from moduleprofiler.efficiency.peaks import DevicePeaks, peak_dtype
from moduleprofiler.export.aggregate import sum_known
from moduleprofiler.export.columns import register_column
from moduleprofiler.export.profile import Profile
from moduleprofiler.records import CallRecord, display_path


class EfficiencyWarning(UserWarning):
    """Some module's achieved rate exceeds the device's peak."""


_PHASES = (("", "ops", "moved_bytes", "launches", ("self_device_ms", "self_forward_ms"),
            ("self_device_ms", "self_time_median_ms")),
           ("backward_", "backward_ops", "backward_moved_bytes", "backward_launches",
            ("self_backward_device_ms", "self_backward_ms"),
            ("self_backward_device_ms", "self_backward_time_median_ms")))
"""(column prefix, ops, bytes, launches, per-call self time, per-module self time): the
kernel clock's device time where the profile has it, else the clock's time."""


def _first(values: dict[str, Any], names: tuple[str, ...]) -> Any:
    """The value of the first of ``names`` that ``values`` holds (``None``: none)."""
    for name in names:
        if values.get(name) is not None:
            return values[name]
    return None

for _prefix in ("", "backward_"):
    register_column(f"{_prefix}intensity", "number", f"{_prefix.replace('_', ' ')}FLOP/byte",
                    aggregation="none", unit="FLOP/byte",
                    description="FLOPs (ops) per byte moved")
    register_column(f"{_prefix}roofline_ms", "time", f"{_prefix.replace('_', ' ')}roofline",
                    aggregation="sum", unit="ms",
                    description="max(FLOPs / peak, bytes / bandwidth)")
    register_column(f"{_prefix}achieved_tflops", "number",
                    f"{_prefix.replace('_', ' ')}TFLOP/s", aggregation="none", unit="TFLOP/s")
    register_column(f"{_prefix}achieved_gbs", "number", f"{_prefix.replace('_', ' ')}GB/s",
                    aggregation="none", unit="GB/s")
    register_column(f"{_prefix}compute_fraction", "fraction",
                    f"{_prefix.replace('_', ' ')}% peak FLOP/s", aggregation="none")
    register_column(f"{_prefix}bandwidth_fraction", "fraction",
                    f"{_prefix.replace('_', ' ')}% peak GB/s", aggregation="none")
    register_column(f"{_prefix}bound", "text", f"{_prefix.replace('_', ' ')}bound",
                    aggregation="none")
    register_column(f"{_prefix}above_peak", "flag", f"{_prefix.replace('_', ' ')}above peak",
                    aggregation="none")


def roofline(ops: float | None, moved: float | None, launches: float | None,
             milliseconds: float | None, flops_peak: float | None, peaks: DevicePeaks,
             overhead_share: float = 0.25) -> dict[str, Any]:
    """The efficiency columns (without prefix) of one piece of work: ``ops`` FLOPs and
    ``moved`` bytes in ``launches`` operators, measured at ``milliseconds`` (``None``:
    unknown), on a device with ``flops_peak`` FLOP/s for its dtype and ``peaks``' bandwidth."""
    out: dict[str, Any] = dict.fromkeys(
        ("intensity", "roofline_ms", "achieved_tflops", "achieved_gbs", "compute_fraction",
         "bandwidth_fraction", "bound", "above_peak"))
    if moved is None:
        return out
    compute_s = None if ops is None or flops_peak is None else ops / flops_peak
    memory_s = moved / peaks.bytes_per_s
    launch_s = (launches or 0) * peaks.launch_us * 1e-6
    out["intensity"] = ops / moved if ops is not None and moved else None
    roof_s = memory_s if compute_s is None else max(compute_s, memory_s)
    out["roofline_ms"] = roof_s * 1e3
    seconds = None if milliseconds is None or not milliseconds > 0 else milliseconds / 1e3
    bound = "compute" if compute_s is not None and compute_s >= memory_s else "memory"
    if launch_s > roof_s or (seconds is not None and roof_s < overhead_share * seconds):
        bound = "overhead"
    out["bound"] = bound if (ops or moved or launches or seconds) else None
    if seconds is None:
        return out
    out["achieved_gbs"] = moved / seconds / 1e9
    out["bandwidth_fraction"] = moved / seconds / peaks.bytes_per_s
    above = out["bandwidth_fraction"] > 1
    if ops is not None:
        out["achieved_tflops"] = ops / seconds / 1e12
        if flops_peak is not None:
            out["compute_fraction"] = ops / seconds / flops_peak
            above = above or out["compute_fraction"] > 1
    out["above_peak"] = above
    return out


def compute_dtype(dtypes: Iterable[str], macs: float | None, peaks: DevicePeaks,
                  tf32: bool | None = None) -> str | None:
    """The peak-table dtype of a call: its first floating (or int8) output dtype; an FP32 call
    with multiply-accumulates counts as TF32 when FP32 matmuls may use tensor cores (``tf32``,
    default ``torch.backends.cuda.matmul.allow_tf32``) and the device has a TF32 rate."""
    for name in dtypes:
        dtype = peak_dtype(name)
        if dtype is None:
            continue
        allow = torch.backends.cuda.matmul.allow_tf32 if tf32 is None else tf32
        if dtype == "fp32" and macs and allow and peaks.dense_tflops.get("tf32"):
            return "tf32"
        return dtype
    return None


def _dtype_of(record: CallRecord, peaks: DevicePeaks, dtype: str | None,
              tf32: bool | None) -> str | None:
    if dtype is not None:
        return dtype
    return compute_dtype((*record.output_dtypes, *record.input_dtypes), record.macs, peaks,
                         tf32)


def with_efficiency(profile: Profile, peaks: DevicePeaks, *, dtype: str | torch.dtype |
                    None = None, tf32: bool | None = None, overhead_share: float = 0.25
                    ) -> Profile:
    """A copy of ``profile`` with the efficiency columns (module docstring) per call and per
    module.

    Args:
        profile: profiled with a :class:`~moduleprofiler.efficiency.TrafficListener` (and
            ``backward=True`` for the backward columns), with times attached by
            ``Profile.with_timing`` (without them, only intensity, roofline time and the
            roofline's label are given).
        peaks: the device's :class:`DevicePeaks` (:func:`device_peaks`, :func:`measure_peaks`).
        dtype: the dtype whose peak applies to every call (default: each call's own output
            dtype, so autocast regions get the autocast dtype's peak).
        tf32: whether FP32 matmuls ran on tensor cores (default: the current
            ``torch.backends.cuda.matmul.allow_tf32``).
        overhead_share: below this share of the measured time explained by the roofline, a
            call is labelled ``"overhead"``.

    Raises:
        ValueError: the profile has no traffic columns, or ``dtype`` / ``overhead_share`` is
            invalid.
    """
    if not isinstance(peaks, DevicePeaks):
        raise TypeError(f"peaks must be a DevicePeaks, got {type(peaks).__name__}")
    if not 0 <= overhead_share <= 1:
        raise ValueError(f"overhead_share must be between 0 and 1, got {overhead_share!r}")
    fixed = None if dtype is None else peak_dtype(dtype)
    if dtype is not None and fixed is None:
        raise ValueError(f"dtype {dtype!r} has no peak; use one of fp64, fp32, tf32, bf16, "
                         "fp16, fp8, int8")
    if not any("moved_bytes" in record.metrics for record in profile.records):
        raise ValueError("with_efficiency needs the bytes moved: profile with "
                         "listeners=[TrafficListener()]")
    flagged: list[str] = []
    records = []
    grouped: dict[str, list[CallRecord]] = {}
    for record in profile.records:
        grouped.setdefault(record.path, []).append(record)
        flops_peak = _peak(peaks, _dtype_of(record, peaks, fixed, tf32))
        columns: dict[str, Any] = {}
        for prefix, ops, moved, launches, seconds, _ in _PHASES:
            values = {**record.metrics, "ops": record.ops, "backward_ops": record.backward_ops}
            if prefix and values.get(moved) is None:
                continue
            found = roofline(values.get(ops), values.get(moved), values.get(launches),
                             _first(values, seconds), flops_peak, peaks, overhead_share)
            columns.update({prefix + name: value for name, value in found.items()})
        records.append(dataclasses.replace(record, metrics={**record.metrics, **columns}))
    modules: dict[str, dict[str, Any]] = {}
    for path, calls in grouped.items():
        flops_peak = _peak(peaks, _dtype_of(calls[0], peaks, fixed, tf32))
        measured = profile.module_metrics.get(path, {})
        columns = {}
        for prefix, ops, moved, launches, seconds, module_seconds in _PHASES:
            rows = [{**r.metrics, "ops": r.ops, "backward_ops": r.backward_ops}
                    for r in calls]
            if prefix and rows[0].get(moved) is None:
                continue
            time_ms = _first(measured, module_seconds)
            if time_ms is None:
                time_ms = sum_known(_first(row, seconds) for row in rows)
            found = roofline(sum_known(row.get(ops) for row in rows),
                             sum_known(row.get(moved) for row in rows),
                             sum_known(row.get(launches) for row in rows), time_ms, flops_peak,
                             peaks, overhead_share)
            if found["above_peak"]:
                phase = (prefix or "forward_").rstrip("_")
                flagged.append(f"{display_path(path)} ({phase}: {_excess(found)})")
            columns.update({prefix + name: value for name, value in found.items()})
        modules[path] = columns
    if flagged:
        warnings.warn(EfficiencyWarning(
            f"achieved rate above the peak of {peaks.name} for: {'; '.join(flagged)}. Either "
            "the peak is for the wrong dtype (pass dtype= or tf32=), the counts are too high, "
            "or data came from cache (bytes/s above bandwidth)"), stacklevel=2)
    return dataclasses.replace(profile, records=tuple(records)).with_metrics(modules)


def _peak(peaks: DevicePeaks, dtype: str | None) -> float | None:
    return None if dtype is None else peaks.flops_per_s(dtype)


def _excess(found: dict[str, Any]) -> str:
    parts = []
    if (found["compute_fraction"] or 0) > 1:
        parts.append(f"{found['compute_fraction']:.0%} of peak FLOP/s")
    if (found["bandwidth_fraction"] or 0) > 1:
        parts.append(f"{found['bandwidth_fraction']:.0%} of peak bandwidth")
    return ", ".join(parts)
