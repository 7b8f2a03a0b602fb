"""The per-operator table (fvcore's ``by_operator``): one row per aten operator, for the whole
model or the calls inside one module, from the tallies an
:class:`~moduleprofiler.operator_listener.OperatorListener` wrote into each call record
(``CallRecord.metrics["operators"]``). Data in, a :class:`~moduleprofiler.export.view.View`
out; this module names no producer."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd

from moduleprofiler.export.aggregate import sum_known
from moduleprofiler.export.columns import FLOPS, MACS, ColumnSpec, register_column
from moduleprofiler.export.frame import count_series
from moduleprofiler.export.names import module_name, module_path
from moduleprofiler.export.select import add_percentages, listing, share_note
from moduleprofiler.export.view import View
from moduleprofiler.records import CallRecord, ProfileData

OPERATORS_COLUMN = "operators"
"""The per-call metric the listener writes: operator name -> ``{"calls", "ops", "macs",
"bytes"}`` of the call's own operators (``None`` ops/macs: unknown)."""

# A fact of one call (like its index): module and type frames leave it out, the per-call frame
# and the JSON keep it.
register_column(OPERATORS_COLUMN, "text", "operators", aggregation="none",
                description="per aten operator: calls, ops, macs, bytes of the call's own work")
register_column("operator_bytes", "bytes", "bytes", aggregation="sum", unit="bytes",
                description="bytes an aten operator reads plus writes (the traffic rule)")

_OVERRIDES = {
    "operator": ColumnSpec("operator", "text", "operator", "none"),
    "calls": ColumnSpec("calls", "int", "calls", "sum", "calls"),
    "ops": ColumnSpec("ops", "count", "ops", "sum", "ops"),
    "macs": ColumnSpec("macs", "count", MACS, "sum", "MACs"),
    "flops": ColumnSpec("flops", "count", FLOPS, "sum", "FLOPs"),
    "ops_pct": ColumnSpec("ops_pct", "percent", "ops %", "none", "%"),
    "operator_bytes_pct": ColumnSpec("operator_bytes_pct", "percent", "bytes %", "none", "%"),
}
_COLUMNS = ("operator", "calls", "ops", "macs", "flops", "operator_bytes", "ops_pct",
            "operator_bytes_pct")
_NOTE_ITEMS = 6


def _calls_under(records: Iterable[CallRecord], path: str) -> list[CallRecord]:
    """The calls of the module at ``path`` and every call made inside them (the runtime call
    tree: a shared module called from inside counts there)."""
    inside: set[int] = set()
    chosen = []
    for record in records:  # execution order: a parent before its children
        if record.path == path or (record.parent is not None and record.parent in inside):
            inside.add(record.index)
            chosen.append(record)
    return chosen


def by_operator_view(profile: ProfileData, module: str | None = None) -> View:
    """One row per aten operator: calls, ops, MACs, FLOPs (2 x MACs), bytes read and written,
    and each row's share of the table's ops and bytes.

    ``module``: a module path (``"layer1"``; ``"__root__"`` or ``""`` for the root) to count
    only its calls and the calls made inside them; ``None``: the whole model. An operator
    without a formula has unknown ops (``<NA>``), and the totals are then lower bounds.

    Raises:
        ValueError: the profile holds no per-operator tallies (profile with
            ``listeners=[OperatorListener()]``), or ``module`` names no module of it.
        TypeError: ``module`` is not a string.
    """
    if module is not None and not isinstance(module, str):
        raise TypeError(f"module must be a module path such as 'layer1' or None, got "
                        f"{type(module).__name__}")
    if profile.records and not any(OPERATORS_COLUMN in r.metrics for r in profile.records):
        raise ValueError(
            "this profile holds no per-operator tallies: profile with "
            "listeners=[moduleprofiler.OperatorListener()] to get them")
    records: list[CallRecord] = list(profile.records)
    if module is not None:
        path = module_path(module)
        if path not in {info.path for info in profile.modules}:
            raise ValueError(f"module={module!r} is not a module of this profile "
                             "(module paths as in model.named_modules(); the root is "
                             "'__root__')")
        records = _calls_under(records, path)
    rows: dict[str, dict[str, Any]] = {}
    for record in records:
        for name, tally in (record.metrics.get(OPERATORS_COLUMN) or {}).items():
            row = rows.get(name)
            if row is None:
                rows[name] = dict(tally)
                continue
            row["calls"] += tally["calls"]
            row["bytes"] += tally["bytes"]
            row["ops"] = sum_known((row["ops"], tally["ops"]))  # one unknown: unknown
            row["macs"] = sum_known((row["macs"], tally["macs"]))
    names = list(rows)
    ops = [rows[n]["ops"] for n in names]
    macs = [rows[n]["macs"] for n in names]
    moved = [rows[n]["bytes"] for n in names]
    total_ops = sum(v for v in ops if v is not None)
    total_macs = sum(v for v in macs if v is not None)
    total_bytes = sum(moved)
    frame = pd.DataFrame({
        "operator": pd.Series(names, dtype=object),
        "calls": pd.Series([rows[n]["calls"] for n in names], dtype="int64"),
        "ops": count_series(ops, "ops"),
        "macs": count_series(macs, "macs"),
        "flops": count_series([None if v is None else 2 * v for v in macs], "flops"),
        "operator_bytes": count_series(moved, "operator_bytes"),
    })
    # an operator without a formula leaves the ops total a lower bound, and so every ops
    # share unknown (the true total is larger by an unknown amount); bytes are always known
    bounded = any(v is None for v in ops)
    frame = add_percentages(frame, ["ops_pct", "operator_bytes_pct"],
                            {"ops": None if bounded else total_ops, "operator_bytes": total_bytes})
    frame = frame.sort_values(["ops", "operator_bytes", "operator"],
                              ascending=[False, False, True], kind="stable",
                              na_position="last").reset_index(drop=True)
    where = "the whole model" if module is None else f"{module_name(module_path(module))} " \
        "and the calls inside it"
    return View(
        frame=frame, columns=_COLUMNS, kind="table",
        title=f"Operators of {where}",
        totals={"ops": total_ops, "macs": total_macs,
                "flops": 2 * total_macs, "operator_bytes": total_bytes},
        lower_bounds=(*(("ops",) if bounded else ()),
                      *(("macs", "flops") if any(v is None for v in macs) else ())),
        notes=_notes(profile, records, module is None, names, ops),
        overrides=_OVERRIDES, optional=("operator_bytes_pct", "calls", "flops"),
        keep=("operator", "ops", "ops_pct"))


def _notes(profile: ProfileData, records: list[CallRecord], whole: bool, names: list[str],
           ops: list[int | float | None]) -> tuple[str, ...]:
    """What the table leaves out or counts differently from the module rows."""
    notes = []
    unknown = [name for name, value in zip(names, ops, strict=True) if value is None]
    if unknown:
        notes.append(f"operators without a formula (ops unknown): "
                     f"{listing(unknown, _NOTE_ITEMS)}; the ops, MACs and FLOPs totals are "
                     "lower bounds")
        notes.append(share_note(["ops %"]))
    table_ops = sum(value for value in ops if value is not None)
    module_ops = sum(r.self_ops for r in records if r.self_ops is not None)
    if not unknown and table_ops != module_ops:
        notes.append(f"the module rows count {module_ops:,} ops for these calls, the "
                     f"operators {table_ops:,}: some module formula prices its layer "
                     "differently from the operators inside it (docs/operators.md)")
    if whole and profile.outside_ops:
        notes.append(f"{profile.outside_ops:,} ops ran outside every module call: not in "
                     "this table")
    return tuple(notes)
