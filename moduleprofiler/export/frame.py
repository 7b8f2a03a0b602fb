"""Profile -> plain dict and tidy DataFrames. The one place where records become tables; every
file format is rendered from these frames."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

if TYPE_CHECKING:
    from moduleprofiler.records import Aggregate, CallRecord
    from moduleprofiler.records import ProfileData as Profile

SCHEMA_VERSION = 1
_AGGREGATES = ("call", "module", "type")


def count_series(values: Sequence[int | float | None], name: str) -> pd.Series:
    """Counts as a nullable integer column (``<NA>`` for unknown), or float if any is fractional."""
    data: list[Any] = list(values)  # a list: the stubs want one element type
    if any(isinstance(value, float) for value in values):
        return pd.Series(data, name=name, dtype="Float64")
    return pd.Series(data, name=name, dtype="Int64")


def sum_known(values: Iterable[int | float | None]) -> int | float | None:
    """Sum of the values, or ``None`` when any of them is unknown (or there are none)."""
    total: int | float = 0
    seen = False
    for value in values:
        if value is None:
            return None
        total += value
        seen = True
    return total if seen else None


def call_frame(profile: Profile) -> pd.DataFrame:
    """One row per module call, in execution order."""
    records = profile.records
    frame = pd.DataFrame(
        {
            "call": [r.index for r in records],
            "parent": pd.Series([r.parent for r in records], dtype="Int64"),
            "depth": [r.depth for r in records],
            "module": [r.path for r in records],
            "type": [r.type_name for r in records],
            "call_number": [r.call_number for r in records],
            "input_shapes": [r.input_shapes for r in records],
            "input_dtypes": [r.input_dtypes for r in records],
            "output_shapes": [r.output_shapes for r in records],
            "output_dtypes": [r.output_dtypes for r in records],
            "output_bytes": [r.output_bytes for r in records],
            "params": [r.params for r in records],
            "own_params": [r.own_params for r in records],
        }
    )
    frame["ops"] = count_series([r.ops for r in records], "ops")
    frame["macs"] = count_series([r.macs for r in records], "macs")
    frame["ops_source"] = [r.ops_source for r in records]
    frame["inclusive_ops"] = count_series([r.inclusive_ops for r in records], "inclusive_ops")
    frame["inclusive_macs"] = count_series([r.inclusive_macs for r in records], "inclusive_macs")
    frame["complete"] = [r.complete for r in records]
    return frame


def _module_source(calls: Sequence[CallRecord]) -> str:
    if not calls:
        return "uncalled"
    sources = {record.ops_source for record in calls}
    return sources.pop() if len(sources) == 1 else "unknown"


def module_frame(profile: Profile) -> pd.DataFrame:
    """One row per module (``named_modules()`` order, uncalled modules included); the numbers
    of all calls of a module are summed."""
    calls = profile.calls_by_module()
    rows: list[dict[str, Any]] = []
    for info in profile.modules:
        module_calls = calls.get(info.path, [])
        first = module_calls[0] if module_calls else None
        rows.append(
            {
                "module": info.path,
                "type": info.type_name,
                "depth": info.depth,
                "calls": len(module_calls),
                "params": info.params,
                "own_params": info.own_params,
                "trainable_params": info.trainable_params,
                "buffers": info.buffers,
                "input_shapes": first.input_shapes if first else None,
                "output_shapes": first.output_shapes if first else None,
                "ops": sum_known(r.ops for r in module_calls),
                "macs": sum_known(r.macs for r in module_calls),
                "inclusive_ops": sum_known(r.inclusive_ops for r in module_calls),
                "inclusive_macs": sum_known(r.inclusive_macs for r in module_calls),
                "ops_source": _module_source(module_calls),
            }
        )
    frame = pd.DataFrame(rows)
    for column in ("ops", "macs", "inclusive_ops", "inclusive_macs"):
        frame[column] = count_series([row[column] for row in rows], column)
    metric_names = list(dict.fromkeys(
        name for columns in profile.module_metrics.values() for name in columns))
    for name in metric_names:  # measured columns (time, memory) attached to the profile
        frame[name] = [profile.module_metrics.get(info.path, {}).get(name)
                       for info in profile.modules]
    return frame


def type_frame(profile: Profile) -> pd.DataFrame:
    """One row per module type: how many modules and calls, their parameters and own ops,
    and each type's share of the total ops. Sorted by ops, largest first."""
    calls = profile.calls_by_module()
    total_ops = profile.total_ops
    by_type: dict[str, dict[str, Any]] = {}
    for info in profile.modules:
        row = by_type.setdefault(
            info.type_name,
            {"type": info.type_name, "modules": 0, "calls": 0, "own_params": 0,
             "ops": 0, "macs": 0, "unknown_calls": 0},
        )
        module_calls = calls.get(info.path, [])
        row["modules"] += 1
        row["calls"] += len(module_calls)
        row["own_params"] += info.own_params
        for record in module_calls:
            row["ops"] += record.ops or 0
            row["macs"] += record.macs or 0
            row["unknown_calls"] += record.ops_source == "unknown"
    frame = pd.DataFrame(list(by_type.values()))
    if frame.empty:
        return frame
    frame["ops_fraction"] = frame["ops"] / total_ops if total_ops else 0.0
    return frame.sort_values("ops", ascending=False, kind="stable").reset_index(drop=True)


def profile_frame(profile: Profile, aggregate: Aggregate = "call") -> pd.DataFrame:
    """The tidy DataFrame for ``aggregate`` in ``"call"``, ``"module"`` or ``"type"``."""
    if aggregate == "call":
        return call_frame(profile)
    if aggregate == "module":
        return module_frame(profile)
    if aggregate == "type":
        return type_frame(profile)
    raise ValueError(f"aggregate must be one of {_AGGREGATES}, got {aggregate!r}")


def profile_to_dict(profile: Profile) -> dict[str, Any]:
    """Plain-Python view of a profile (numbers stay numbers, shapes stay tuples)."""
    return {
        "schema_version": SCHEMA_VERSION,
        "totals": {
            "params": profile.total_params,
            "buffers": profile.total_buffers,
            "ops": profile.total_ops,
            "macs": profile.total_macs,
            "flops": profile.total_flops,
            "complete": profile.complete,
        },
        "records": [dataclasses.asdict(record) for record in profile.records],
        "modules": [dataclasses.asdict(info) for info in profile.modules],
        "uncalled": list(profile.uncalled),
        "unsupported": list(profile.unsupported),
        "excluded": list(profile.excluded),
    }
