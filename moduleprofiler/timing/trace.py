"""A profile's numbers on the module ranges of a PyTorch profiler trace.

With :class:`~moduleprofiler.timing.ranges.RangeListener` (``ranges=True``), every module call
is a ``record_function`` range named by its path and every autograd node it created one named
``"<path> (backward)"``. A trace of them, exported with ``prof.export_chrome_trace(path)``,
shows module names but no numbers; :func:`annotate_trace` adds the profile's numbers of each
module to the ``args`` of its ranges, which Perfetto's slice details, ``chrome://tracing`` and
Holistic Trace Analysis show.

Which numbers (the profile's per-call columns, :mod:`moduleprofiler.export.columns`):

* a forward range: the call's counts (``flops``, ``macs``,
  ``ops`` and the own ``self_flops``, ``self_macs``, ``self_ops``), ``params``, ``output_bytes``,
  and every measured time, memory or listener quantity it has (``forward_ms`` after
  ``with_timing``, a roofline's predicted time, bytes moved...);
* a backward range: the call's own backward counts (``self_backward_flops``...) and its measured
  backward quantities (``backward_ms``...). A module's backward is one range per autograd node
  it created, and each carries the numbers of the module's whole backward.

A module called several times (a shared block) has one range per call: when its calls agree
on a number, every range gets it; otherwise, when the trace holds whole passes (the forward
ranges of that module a multiple of its calls), the ranges are matched to the calls in order.
Anything else is left out, as is every unknown value: never written as 0.

This lives beside the ranges (not in ``export``): it reads the names they write, and the
export layer imports nothing of the timing layer.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from moduleprofiler.export.columns import BUILTIN, column_spec
from moduleprofiler.export.frame import call_frame
from moduleprofiler.export.select import unknown_as_missing
from moduleprofiler.export.units import is_missing
from moduleprofiler.records import ProfileData
from moduleprofiler.timing.ranges import BACKWARD_SUFFIX

__all__ = ["RANGE_CATEGORIES", "annotate_trace", "load_trace"]

RANGE_CATEGORIES = ("user_annotation", "gpu_user_annotation")
"""Trace categories of ``record_function`` ranges: on the host's timeline, and (CUDA) the
same range on the device's timeline."""

FORWARD_COUNTS = ("flops", "macs", "ops", "self_flops", "self_macs", "self_ops",
                  "params", "output_bytes")
BACKWARD_COUNTS = ("self_backward_flops", "self_backward_macs", "self_backward_ops")

TracePath = str | os.PathLike[str]


def load_trace(trace: TracePath) -> dict[str, Any]:
    """A Chrome trace file (``.json``, or ``.json.gz`` as ``export_chrome_trace`` writes for
    such a name) as a dict with a ``traceEvents`` list (a bare event array is wrapped)."""
    path = Path(trace)
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as file:
        data = json.load(file)
    return _checked(data, "trace")


def _checked(data: Any, name: str) -> dict[str, Any]:
    if isinstance(data, list):
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise ValueError(f"{name} is not a Chrome trace: expected a JSON object with a "
                         "'traceEvents' list (prof.export_chrome_trace) or a list of events")
    return data


def _columns(frame: pd.DataFrame) -> tuple[list[str], list[str]]:
    """The forward and the backward columns of ``frame`` worth writing: the counts above and
    every measured or listener quantity it holds a value of (a name with ``backward`` in it
    is the backward's)."""
    measured = [name for name in frame.columns
                if name not in BUILTIN and frame[name].notna().any()
                and column_spec(name, frame[name].dtype).kind in ("count", "bytes", "time",
                                                                  "number")]
    forward = [*FORWARD_COUNTS, *(n for n in measured if "backward" not in n)]
    backward = [*BACKWARD_COUNTS, *(n for n in measured if "backward" in n)]
    return ([n for n in forward if n in frame], [n for n in backward if n in frame])


def _plain(value: Any) -> int | float:
    """A JSON number: integers stay exact."""
    number = float(value)
    return int(number) if number.is_integer() and not isinstance(value, float) else number


def _per_range(calls: pd.DataFrame, columns: Sequence[str],
               ranges: int) -> list[dict[str, int | float]]:
    """The args of each of ``ranges`` ranges of one module whose calls are ``calls``."""
    shared: dict[str, int | float] = {}
    by_call: list[dict[str, int | float]] = [{} for _ in range(len(calls))]
    for name in columns:
        values = list(calls[name])
        if all(not is_missing(v) for v in values) and len({float(v) for v in values}) == 1:
            shared[name] = _plain(values[0])
        else:
            for known, value in zip(by_call, values):
                if not is_missing(value):
                    known[name] = _plain(value)
    positional = bool(by_call) and ranges % len(by_call) == 0
    return [{**shared, **(by_call[i % len(by_call)] if positional else {})}
            for i in range(ranges)]


def annotate_trace(trace: TracePath | Mapping[str, Any] | list[Any], profile: ProfileData,
                   out_path: TracePath | None = None) -> dict[str, Any]:
    """``trace`` (a path written by ``prof.export_chrome_trace``, or its loaded JSON) with
    ``profile``'s numbers added to the ``args`` of every module range (named by
    :class:`~moduleprofiler.timing.ranges.RangeListener`), written to ``out_path`` when given
    (``.gz``: gzipped). Returns the annotated trace; a loaded ``trace`` is not changed.

    Each annotated range also gets ``"module_type"``; ranges of modules the profile does not
    hold, and every other event, are left as they were."""
    if not isinstance(profile, ProfileData):
        raise TypeError(f"profile must be a Profile, got {type(profile).__name__}")
    if isinstance(trace, (str, os.PathLike)):
        data = load_trace(trace)
    else:
        data = _checked(json.loads(json.dumps(trace)), "trace")  # a deep copy, plain JSON
    frame = unknown_as_missing(call_frame(profile)).sort_values("call")
    forward_columns, backward_columns = _columns(frame)
    by_module = {str(name): calls for name, calls in frame.groupby("module", sort=False)}

    ranges: dict[tuple[str, str, bool], list[dict[str, Any]]] = {}
    for event in data["traceEvents"]:
        if not (isinstance(event, dict) and event.get("ph") == "X"
                and event.get("cat") in RANGE_CATEGORIES and isinstance(event.get("name"), str)):
            continue
        name = event["name"]
        backward = name.endswith(BACKWARD_SUFFIX)
        module = name[: -len(BACKWARD_SUFFIX)] if backward else name
        if module in by_module:
            ranges.setdefault((module, event["cat"], backward), []).append(event)

    for (module, _, backward), events in ranges.items():
        calls = by_module[module]
        events.sort(key=lambda event: event.get("ts", 0))
        columns = backward_columns if backward else forward_columns
        if backward:  # backward ranges are per autograd node: no order to match calls by
            args_of = _per_range(calls, columns, 1) * len(events)
        else:
            args_of = _per_range(calls, columns, len(events))
        module_type = str(calls["type"].iloc[0])
        for event, args in zip(events, args_of):
            event["args"] = {**event.get("args", {}), "module_type": module_type, **args}

    if out_path is not None:
        path = Path(out_path)
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "wt", encoding="utf-8") as file:
            json.dump(data, file)
    return data
