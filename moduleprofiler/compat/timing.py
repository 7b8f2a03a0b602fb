"""moduleprofiler 0.0.4's two timing dicts, built from the timing engine's results (this
layer imports the engine, never the reverse).

Same keys in the same order as 0.0.4 (extra keys only after them), keyed by ``named_modules()``
path with the root as ``"__root__"``. What changed, on purpose:

* ``drop_first`` is dropped (0.0.4's per-module pass ignored it): the lists have
  ``num_iters - drop_first`` entries, and ``0 <= drop_first < num_iters`` is checked;
* modules that are never called get ``[]`` and ``None`` statistics instead of a crash;
* a module called k times per forward reports, per iteration, the **sum** of its k calls
  (0.0.4 kept the last call only); ``calls`` says k;
* per-module times come from hooks whose cost is measured and reported
  (``hook_overhead_ratio``); CUDA is timed with events (0.0.4 never synchronised);
* a ``pred_fn`` and tuple/dict inputs are accepted, as in the other passes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
from torch import nn

from moduleprofiler.export.names import module_name
from moduleprofiler.export.units import is_missing
from moduleprofiler.records import ROOT_NAME
from moduleprofiler.timing import benchmark, get_hardware_specs, time_modules
from moduleprofiler.timing.loop import validate_iterations

TIME_STATS = ("inference_time_mean_ms", "inference_time_max_ms", "inference_time_min_ms",
              "inference_time_std_ms", "inference_time_median_ms")
"""The statistics of ``inference_time_ms``, in 0.0.4's per-module order."""

LEGACY_MODULE_KEYS = (
    "type", "inference_time_ms", *TIME_STATS, "intraop_threads", "interop_threads",
    "host_name", "os", "os_release", "cpu_count", "total_memory", "gpu",
)
"""0.0.4's per-module keys, in its order."""

LEGACY_TOTAL_KEYS = (
    "type", "intraop_threads", "interop_threads", "host_name", "os", "os_release",
    "cpu_count", "total_memory", "gpu", "inference_time_ms", "inference_time_mean_ms",
    "inference_time_min_ms", "inference_time_max_ms", "inference_time_std_ms",
    "inference_time_median_ms",
)
"""0.0.4's whole-model keys, in its order (min before max, unlike the per-module dict)."""


def _time_keys(samples: list[float]) -> dict[str, Any]:
    """``inference_time_ms`` and its :data:`TIME_STATS` as numpy float64 (``std`` with
    ddof=1, NaN for one sample, as pandas); the statistics ``None`` without samples."""
    if not samples:
        return {"inference_time_ms": samples, **dict.fromkeys(TIME_STATS)}
    array = np.asarray(samples, dtype=np.float64)
    return {
        "inference_time_ms": samples,
        "inference_time_mean_ms": np.float64(array.mean()),
        "inference_time_max_ms": np.float64(array.max()),
        "inference_time_min_ms": np.float64(array.min()),
        "inference_time_std_ms": np.float64(array.std(ddof=1) if array.size > 1 else math.nan),
        "inference_time_median_ms": np.float64(np.median(array)),
    }


def inference_time_dict(
    module: nn.Module, input: Any, *, eval: bool = True, num_iters: int = 1000,
    drop_first: int = 100, pred_fn: Callable[..., Any] | None = None,
) -> dict[str, dict[str, Any]]:
    """0.0.4's ``estimate_inference_time``: per-module forward times in ms, from
    :func:`~moduleprofiler.timing.time_modules` (no warm-up beyond ``drop_first``, as 0.0.4).

    Every module (root ``"__root__"``), keys :data:`LEGACY_MODULE_KEYS` then ``calls``
    (calls per iteration), ``self_time_median_ms``, ``low_confidence`` and
    ``hook_overhead_ratio`` (hooked / hook-free whole model, from interleaved rounds).
    ``inference_time_ms`` lists one value per kept iteration: the sum of the module's calls.
    """
    validate_iterations(num_iters, drop_first)
    timing = time_modules(module, input, pred_fn=pred_fn, eval=eval, num_iters=num_iters,
                          drop_first=drop_first, warmup_seconds=0.0, overhead_fraction=0.25)
    threads = {key: timing.environment[key] for key in ("intraop_threads", "interop_threads")}
    hardware = get_hardware_specs()
    frame = timing.to_df("module")
    own = "self_device_ms" if "self_device_ms" in frame else "self_time_median_ms"
    result: dict[str, dict[str, Any]] = {}
    for info, row in zip(timing.modules, frame.to_dict(orient="records")):
        calls = row["calls"]
        result[module_name(info.path)] = {
            "type": info.type_name,
            **_time_keys([float(v) for v in timing.samples(info.path)]),
            **threads,
            **hardware,
            "calls": int(calls) if not is_missing(calls) else 0,
            "self_time_median_ms": None if is_missing(row.get(own)) else float(row[own]),
            "low_confidence": (None if is_missing(row.get("low_confidence"))
                               else bool(row["low_confidence"])),
            "hook_overhead_ratio": timing.overhead_ratio,
        }
    return result


def total_inference_time_dict(
    module: nn.Module, input: Any, *, eval: bool = True, num_iters: int = 1000,
    drop_first: int = 100, pred_fn: Callable[..., Any] | None = None,
) -> dict[str, dict[str, Any]]:
    """0.0.4's ``estimate_total_inference_time``: whole-model latency in ms, no hooks, from
    :func:`~moduleprofiler.timing.benchmark` (exactly ``num_iters`` iterations, the first
    ``drop_first`` discarded).

    ``{"__root__": {...}}`` with keys :data:`LEGACY_TOTAL_KEYS`, then
    ``inference_time_p95_ms``, ``inference_time_p99_ms``, ``inference_time_ci_low_ms`` /
    ``inference_time_ci_high_ms`` (95 % CI of the median) and ``device``.
    """
    validate_iterations(num_iters, drop_first)
    result = benchmark(
        module, input, pred_fn=pred_fn, eval=eval, warmup_iters=0, warmup_seconds=0.0,
        num_iters=num_iters, drop_first=drop_first, target_ci=None, max_seconds=None,
    )
    times = _time_keys([float(v) for v in result.samples_ms])
    return {
        ROOT_NAME: {
            "type": type(module).__name__,
            "intraop_threads": result.intraop_threads,
            "interop_threads": result.interop_threads,
            **get_hardware_specs(),
            **{key: times[key] for key in LEGACY_TOTAL_KEYS if key in times},
            "inference_time_p95_ms": result.latency_p95_ms,
            "inference_time_p99_ms": result.latency_p99_ms,
            "inference_time_ci_low_ms": result.latency_ci_low_ms,
            "inference_time_ci_high_ms": result.latency_ci_high_ms,
            "device": result.device,
        }
    }
