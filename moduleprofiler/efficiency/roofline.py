"""Per-module efficiency: achieved FLOP/s and bytes/s, % of peak, roofline time and a label.

:func:`with_efficiency` takes a profile that has operator traffic (:class:`TrafficListener`) and
measured times (merged in with ``Profile.merge``) and adds, per call and per module, for the
module's own work (children excluded) against its self time:

* ``intensity``: FLOPs per byte moved (FLOPs = the profile's ``self_ops``: every multiply and add);
* ``self_roofline_ms``: ``max(FLOPs / peak FLOP/s, bytes / bandwidth)``, the time the work needs
  at the device's peaks for the dtype it ran in (a module's: the sum of its calls'), and
  ``roofline_ms``, the same of the call with every call inside it;
* ``achieved_tflops`` / ``achieved_gbs``, and ``compute_fraction`` / ``bandwidth_fraction`` of
  the peaks;
* ``bound``: ``"compute"`` or ``"memory"`` (the larger roof), or ``"overhead"`` when the
  launches alone take longer than the roofline (``self_launches x launch_us``) or the roofline
  explains less than ``overhead_share`` of the measured time (launch, Python, CPU or
  synchronisation costs dominate);
* ``above_peak``: the achieved FLOP/s exceed the peak (a counting or dtype error: the wrong
  peak was assumed, or the FLOPs are overcounted) or the achieved bytes/s exceed the bandwidth
  (data served from cache, or overcounted bytes). Such modules also raise an
  :class:`EfficiencyWarning`: never printed silently.

Where a call's FLOPs are unknown or a lower bound (``ops_source`` ``unknown`` or ``mixed``) or
its dtype has no peak, the compute roof is unknown, and so are the intensity, the roofline time,
the FLOP rates and the label.

With a backward (``profile(backward=True)`` and training-step times) the same columns are
computed for the backward with a ``backward_`` prefix.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import torch

from moduleprofiler.devices import fp32_precision
from moduleprofiler.efficiency.peaks import DevicePeaks, dtype_argument, peak_dtype
from moduleprofiler.export.aggregate import sum_known
from moduleprofiler.export.columns import Kind, inclusive_of, register_column
from moduleprofiler.export.frame import module_values
from moduleprofiler.export.profile import Profile
from moduleprofiler.records import COUNTED_SOURCES, CallRecord, display_path
from moduleprofiler.warn import warn


class EfficiencyWarning(UserWarning):
    """Some module's achieved rate exceeds the device's peak."""


_PHASES = (("", "self_ops", "self_moved_bytes", "self_launches",
            ("self_device_ms", "self_forward_ms"), ("self_device_ms", "self_time_median_ms")),
           ("backward_", "self_backward_ops", "self_backward_moved_bytes", "self_backward_launches",
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


_COLUMNS: tuple[tuple[str, Kind, str, str, str], ...] = (
    # name, kind, label, unit, description ({work}: the call's own forward or backward work,
    # children excluded; {time}: its measured self time, the device time where the profile
    # has the kernel clock's)
    ("intensity", "number", "FLOP/byte", "FLOP/byte",
     "ops (FLOPs: every multiply and add) per byte moved of {work}"),
    ("self_roofline_ms", "time", "self roofline", "ms",
     "the time {work} needs at the device's peaks for its dtype: max(ops / peak FLOP/s, "
     "moved bytes / bandwidth); a module's is the sum of its calls'"),
    ("achieved_tflops", "number", "TFLOP/s", "TFLOP/s",
     "ops (FLOPs: every multiply and add) of {work} per second of {time}, in 1e12/s"),
    ("achieved_gbs", "number", "GB/s", "GB/s",
     "bytes moved by {work} per second of {time}, in 1e9/s"),
    ("compute_fraction", "fraction", "% peak FLOP/s", "",
     "{prefix}achieved_tflops over the device's peak FLOP/s for the dtype {work} ran in, 0-1"),
    ("bandwidth_fraction", "fraction", "% peak GB/s", "",
     "{prefix}achieved_gbs over the device's memory bandwidth, 0-1"),
    ("bound", "text", "bound", "",
     "compute or memory: the larger of the two roofs of {work}; overhead when its launches "
     "alone take longer than the roofline or the roofline explains less than overhead_share "
     "of {time}"),
    ("above_peak", "flag", "above peak", "",
     "whether {work} ran faster than the peaks allow (FLOP/s above the peak: a wrong dtype "
     "peak or overcounted work; bytes/s above the bandwidth: data served from cache)"))


def _phase_name(prefix: str, name: str, space: str = "_") -> str:
    """``name`` (or a label, words joined by ``space``) of the phase ``prefix`` (``""`` or
    ``"backward_"``): the prefix follows an own share's ``self_``
    (``self_backward_roofline_ms``)."""
    prefix, own = prefix.replace("_", space), f"self{space}"
    return f"{own}{prefix}{name.removeprefix(own)}" if name.startswith(own) else prefix + name


for _prefix, _phase in (("", "forward"), ("backward_", "backward")):
    for _name, _kind, _label, _unit, _description in _COLUMNS:
        # the roofline time is work: a module sums its calls'; the rates are per piece of work
        register_column(_phase_name(_prefix, _name), _kind,
                        _phase_name(_prefix, _label, " "),
                        aggregation="sum" if _name == "self_roofline_ms" else "none",
                        unit=_unit, description=_description.format(
                            prefix=_prefix, work=f"the call's own {_phase} work",
                            time=f"its measured {_phase} self time"))
    # pieces of work run one after another, so a subtree's bound is the sum of its calls'
    # own bounds (at least the roofline of their summed work, and tighter: each call is
    # bound by its own larger roof)
    register_column(f"{_prefix}roofline_ms", "time", f"{_prefix.replace('_', ' ')}roofline",
                    aggregation="inclusive", unit="ms",
                    derive=inclusive_of(f"self_{_prefix}roofline_ms"),
                    description=f"self_{_prefix}roofline_ms of the call and every call inside "
                                f"it: the {_phase} time the subtree's work needs at the "
                                "device's peaks, each call at its own roof")


def roofline(ops: float | None, moved: float | None, launches: float | None,
             milliseconds: float | None, flops_peak: float | None, peaks: DevicePeaks,
             overhead_share: float = 0.25) -> dict[str, Any]:
    """The efficiency columns (without prefix) of one piece of work: ``self_ops`` FLOPs and
    ``moved`` bytes in ``launches`` operators, measured at ``milliseconds`` (``None``:
    unknown), on a device with ``flops_peak`` FLOP/s for its dtype and ``peaks``' bandwidth."""
    out: dict[str, Any] = dict.fromkeys(column[0] for column in _COLUMNS)
    if moved is None:
        return out
    # the compute roof is unknown where the FLOPs are (``ops`` None) or the dtype has no
    # peak: then so are the roofline time and the label (the memory roof alone would call
    # work of any size memory-bound), and whether the FLOP rate is above the peak
    compute_s = 0.0 if ops == 0 else (
        None if ops is None or flops_peak is None else ops / flops_peak)
    memory_s = moved / peaks.bytes_per_s
    launch_s = (launches or 0) * peaks.launch_us * 1e-6
    out["intensity"] = ops / moved if ops is not None and moved else None
    seconds = None if milliseconds is None or not milliseconds > 0 else milliseconds / 1e3
    if compute_s is not None:
        roof_s = max(compute_s, memory_s)
        out["self_roofline_ms"] = roof_s * 1e3
        bound = "compute" if compute_s >= memory_s and compute_s > 0 else "memory"
        if launch_s > roof_s or (seconds is not None and roof_s < overhead_share * seconds):
            bound = "overhead"
        out["bound"] = bound if (ops or moved or launches or seconds) else None
    if seconds is None:
        return out
    out["achieved_gbs"] = moved / seconds / 1e9
    out["bandwidth_fraction"] = moved / seconds / peaks.bytes_per_s
    above: bool | None = out["bandwidth_fraction"] > 1
    if ops is not None:
        out["achieved_tflops"] = ops / seconds / 1e12
        if flops_peak is not None:
            out["compute_fraction"] = ops / seconds / flops_peak
            above = above or out["compute_fraction"] > 1
    out["above_peak"] = above if above or compute_s is not None else None
    return out


def compute_dtype(dtypes: Iterable[str], macs: float | None, peaks: DevicePeaks,
                  tf32: bool | None = None) -> str | None:
    """The peak-table dtype of a call: its first floating (or int8) output dtype; an FP32 call
    with multiply-accumulates counts as TF32 when FP32 matmuls may use tensor cores (``tf32``,
    default: torch's setting, :func:`~moduleprofiler.devices.fp32_precision`) and the device
    has a TF32 rate."""
    for name in dtypes:
        dtype = peak_dtype(name)
        if dtype is None:
            continue
        allow = fp32_precision("cuda.matmul") == "tf32" if tf32 is None else tf32
        if dtype == "fp32" and macs and allow and peaks.dense_tflops.get("tf32"):
            return "tf32"
        return dtype
    return None


def call_dtype(record: CallRecord, peaks: DevicePeaks, dtype: str | None = None,
               tf32: bool | None = None) -> str | None:
    """The peak-table dtype of ``record``'s work: ``dtype`` when given, else
    :func:`compute_dtype` of its output then input dtypes."""
    if dtype is not None:
        return dtype
    return compute_dtype((*record.output_dtypes, *record.input_dtypes), record.self_macs, peaks,
                         tf32)


def with_efficiency(profile: Profile, peaks: DevicePeaks, *, dtype: str | torch.dtype |
                    None = None, tf32: bool | None = None, overhead_share: float = 0.25
                    ) -> Profile:
    """A copy of ``profile`` with the efficiency columns (module docstring) per call and per
    module.

    Args:
        profile: profiled with a :class:`~moduleprofiler.efficiency.TrafficListener` (and
            ``backward=True`` for the backward columns), with times merged in by
            ``Profile.merge`` (without them, only intensity, roofline time and the
            roofline's label are given).
        peaks: the device's :class:`DevicePeaks` (:func:`device_peaks`, :func:`measure_peaks`).
        dtype: the dtype whose peak applies to every call (default: each call's own output
            dtype, so autocast regions get the autocast dtype's peak).
        tf32: whether FP32 matmuls ran on tensor cores (default: torch's current setting,
            ``torch.backends.cuda.matmul.fp32_precision``, whichever API set it).
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
    fixed = dtype_argument(dtype)
    if not any("self_moved_bytes" in record.metrics for record in profile.records):
        raise ValueError("with_efficiency needs the bytes moved: profile with "
                         "listeners=[TrafficListener()]")
    def peak_of(record: CallRecord) -> float | None:
        name = call_dtype(record, peaks, fixed, tf32)
        return None if name is None else peaks.flops_per_s(name)

    records = []
    grouped: dict[str, list[CallRecord]] = {}
    for record in profile.records:
        grouped.setdefault(record.path, []).append(record)
        found = _phases([record], {}, peak_of(record), peaks, overhead_share)
        records.append(dataclasses.replace(record, metrics={**record.metrics, **found}))
    flagged: list[str] = []
    modules: dict[str, dict[str, Any]] = {}
    measured = _module_times(profile)
    for path, calls in grouped.items():
        modules[path] = _phases(calls, measured.get(path, {}),
                                peak_of(calls[0]), peaks, overhead_share)
        for prefix in ("", "backward_"):
            # a module's own bound is the sum of its calls' (each call at its own roof), which
            # its calls' column gives: the roofline of their summed work would be lower
            modules[path].pop(_phase_name(prefix, "self_roofline_ms"), None)
        for prefix in ("", "backward_"):
            if modules[path].get(prefix + "above_peak"):
                phase = (prefix or "forward_").rstrip("_")
                flagged.append(f"{display_path(path)} ({phase}: {_excess(modules[path], prefix)})")
    if flagged:
        warn(f"achieved rate above the peak of {peaks.name} for: {'; '.join(flagged)}. Either "
             "the peak is for the wrong dtype (pass dtype= or tf32=), the counts are too high, "
             "or data came from cache (bytes/s above bandwidth)", EfficiencyWarning)
    return dataclasses.replace(profile, records=tuple(records)).with_metrics(modules)


def _module_times(profile: Profile) -> dict[str, dict[str, Any]]:
    """Per module path, its measured per-module self times (the module view's medians over
    the kept iterations, and any attached with ``with_metrics``)."""
    out = module_values(profile, [name for phase in _PHASES for name in phase[5]])
    for path, columns in profile.module_metrics.items():
        out.setdefault(path, {}).update(columns)
    return out


def _phases(calls: list[CallRecord], measured: dict[str, Any], flops_peak: float | None,
            peaks: DevicePeaks, overhead_share: float) -> dict[str, Any]:
    """The efficiency columns (prefixed) of the summed work of ``calls`` (one call, or a
    module's calls) at the self time of ``measured`` (a module's measured columns), else at
    the calls' summed self times."""
    # a count with operators that have no formula is a lower bound: unknown FLOPs here (for
    # the backward, known only of a whole subtree: a call with an incomplete child reads
    # unknown too, never a rate of part of its work)
    rows = [{**r.metrics,
             "self_backward_ops": r.self_backward_ops
             if r.metrics.get("backward_complete", True) else None,
             "self_ops": r.self_ops if r.ops_source in COUNTED_SOURCES else None}
            for r in calls]
    out: dict[str, Any] = {}
    for prefix, ops, moved, launches, seconds, module_seconds in _PHASES:
        if prefix and rows[0].get(moved) is None:
            continue
        time_ms = _first(measured, module_seconds)
        if time_ms is None:
            time_ms = sum_known(_first(row, seconds) for row in rows)
        total = {c: sum_known(row.get(c) for row in rows) for c in (ops, moved, launches)}
        found = roofline(total[ops], total[moved], total[launches], time_ms, flops_peak, peaks,
                         overhead_share)
        out.update({_phase_name(prefix, name): value for name, value in found.items()})
    return out


def _excess(found: dict[str, Any], prefix: str) -> str:
    parts = []
    if (found[prefix + "compute_fraction"] or 0) > 1:
        parts.append(f"{found[prefix + 'compute_fraction']:.0%} of peak FLOP/s")
    if (found[prefix + "bandwidth_fraction"] or 0) > 1:
        parts.append(f"{found[prefix + 'bandwidth_fraction']:.0%} of peak bandwidth")
    return ", ".join(parts)
