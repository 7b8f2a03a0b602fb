"""The model-level summary table: one row, as in the PyTorch profiling tutorial's metrics table
(parameters, model size, peak activations, MACs, FLOPs, latency, throughput). Below both the
memory package and the export layer (``Profile.summary`` and ``moduleprofiler.memory`` share
it): it reads a memory report through its attributes and imports neither."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import pandas as pd

from moduleprofiler.count_dtype import count_dtype
from moduleprofiler.records import model_name
from moduleprofiler.validate import check_bounded

if TYPE_CHECKING:
    from moduleprofiler.records import ProfileData as Profile

SUMMARY_COLUMNS = (
    "model", "params", "trainable_params", "model_size_bytes", "param_bytes", "buffer_bytes",
    "peak_activation_bytes", "inference_peak_bytes", "training_peak_bytes", "saved_bytes",
    "macs", "flops", "latency_ms", "throughput", "complete",
)
_INTEGER_COLUMNS = SUMMARY_COLUMNS[1:12]

SUMMARY_ONLY: dict[str, str] = {
    "model_size_bytes": "parameter and buffer bytes of the model (needs a memory report)",
    "peak_activation_bytes": "the inference peak above the parameters and inputs: the "
                             "activations a forward needs at most (needs a memory report)",
    "inference_peak_bytes": "the most memory live during a no-grad forward (needs a memory "
                            "report)",
    "training_peak_bytes": "the most memory live during a training step's forward and backward "
                           "(needs a memory report of train=True)",
    "latency_ms": "median whole-model latency with no hooks installed (needs a latency result, "
                  "or a timing pass's own; a compiled model's timing: its compiled program's)",
    "throughput": "items per second: the batch size over the latency",
}
"""What each column of the one-row model table that is no per-module column holds (the others
are registered columns, the model's value of each): docs/glossary.md lists them."""


def _check(memory: Any, latency: Any) -> None:
    """The two optional results, refused by name when they are something else (a memory
    report's attributes are read below: a number there was an ``AttributeError``; a latency
    of no known kind was a silent NaN)."""
    if memory is not None and not hasattr(memory, "model_size_bytes"):
        raise TypeError(f"memory must be the result of measure_memory() or None, got "
                        f"{type(memory).__name__} {memory!r:.40}")
    if latency is None:
        return
    if isinstance(latency, (int, float)) and not isinstance(latency, bool):
        # a number of ms is a time: -1, 0, NaN or infinity was shown as the model's latency
        check_bounded(latency, "latency (a number of ms)", above=0)
        return
    if not any(hasattr(latency, name) for name in ("latency_ms", "median_ms", "median")):
        raise TypeError("latency must be the result of benchmark(), a "
                        "torch.utils.benchmark.Measurement, a number of ms or None, got "
                        f"{type(latency).__name__} {latency!r:.40}")


def _latency_ms(latency: Any) -> float:
    """Median latency in ms of a duck-typed result: ``latency_ms`` (moduleprofiler's
    ``LatencyResult``; ``median_ms``, its name before 0.2, of an object without it), else
    ``median`` in seconds (``torch.utils.benchmark.Measurement``); a number is one in ms
    already."""
    if latency is None:
        return math.nan
    if isinstance(latency, (int, float)):
        return float(latency)
    for name in ("latency_ms", "median_ms"):  # a LatencyResult has the first: no warning
        value = getattr(latency, name, None)
        if value is not None:
            return float(value)
    value = getattr(latency, "median", None)
    return math.nan if value is None else float(value) * 1e3


def _throughput(latency: Any) -> float:
    value = getattr(latency, "throughput", None) if latency is not None else None
    return math.nan if value is None else float(value)


def model_row(profile: Profile) -> dict[str, Any]:
    """The counts every one-row model summary starts from: ``model`` (root type), ``params``,
    ``trainable_params`` (the root's), ``macs`` and ``flops``."""
    root = profile.modules[0] if profile.modules else None
    return {"model": model_name(profile),
            "params": profile.total_params,
            "trainable_params": root.trainable_params if root is not None else None,
            # a pass that counted nothing (timing, memory) has unknown counts (None), not 0
            "macs": profile.total_macs,
            "flops": profile.total_flops}


def model_summary(profile: Profile, memory: Any = None, latency: Any = None) -> pd.DataFrame:
    """One row: ``model`` (root type), ``params``, ``trainable_params``, ``model_size_bytes``,
    ``param_bytes``, ``buffer_bytes``, ``peak_activation_bytes`` (inference peak above the
    baseline), ``inference_peak_bytes``, ``training_peak_bytes``, ``saved_bytes``, ``macs``,
    ``flops``, ``latency_ms`` (median), ``throughput`` (items per second), ``complete``
    (False: ``macs`` and ``flops`` are lower bounds, some work had no formula; the profile's
    ``lower_bounds`` and notes say which).

    Byte columns other than ``param_bytes`` / ``buffer_bytes`` (taken from the profile) are
    ``<NA>`` without a ``memory`` report (:func:`~moduleprofiler.memory.measure_memory`)
    (``training_peak_bytes`` and ``saved_bytes`` also without its training pass);
    ``latency_ms`` and ``throughput`` are NaN without ``latency``, an object with
    ``latency_ms`` (or ``median`` in seconds) and ``throughput`` attributes such as
    :class:`~moduleprofiler.timing.latency.LatencyResult`, or a number of ms; a timing pass's
    profile gives its own hook-free latency (``facts.latency_ms``) when none is given.
    """
    _check(memory, latency)
    root = profile.modules[0] if profile.modules else None
    if latency is None and profile.facts is not None:  # a timing pass's own hook-free latency
        latency = profile.facts.latency_ms
    row: dict[str, Any] = {**model_row(profile), "latency_ms": _latency_ms(latency),
                           "throughput": _throughput(latency),
                           # the forward MACs' flag, as a module row's complete: the row shows
                           # no backward count, so an unknown backward operator bounds none
                           "complete": profile.macs_complete}
    if root is not None:
        row.update(param_bytes=root.param_bytes, buffer_bytes=root.buffer_bytes)
    if memory is not None:
        # packed weights that cannot be read leave the report's parameter bytes unknown, as
        # the modules say (``None``), not the 0 of the weights that could be read
        unknown = bool(memory.modules) and memory.modules[0].param_bytes is None
        row.update(model_size_bytes=None if unknown else memory.model_size_bytes,
                   param_bytes=None if unknown else memory.param_bytes,
                   buffer_bytes=memory.buffer_bytes,
                   peak_activation_bytes=memory.peak_activation_bytes,
                   inference_peak_bytes=memory.inference.peak_bytes)
        if memory.training is not None:
            row.update(training_peak_bytes=memory.training.peak_bytes,
                       saved_bytes=memory.training.saved_bytes)
    frame = pd.DataFrame([row], columns=list(SUMMARY_COLUMNS))
    for column in _INTEGER_COLUMNS:
        value = row.get(column)
        frame[column] = pd.Series([value], dtype=count_dtype([value]))
    frame["latency_ms"] = frame["latency_ms"].astype("float64")
    frame["throughput"] = frame["throughput"].astype("float64")
    frame["complete"] = frame["complete"].astype(bool)
    return frame
