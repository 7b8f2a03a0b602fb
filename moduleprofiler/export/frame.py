"""Profile -> plain dict and tidy DataFrames: one row per call, per module or per module type.
The one place where records become tables; every view and file format is rendered from
these frames.

Every registered column is in every frame it applies to (``backward_*`` stay ``<NA>`` when no
backward pass was profiled, so the columns never depend on options), then every column the
listeners wrote into ``CallRecord.metrics`` and every per-module column attached with
``Profile.with_metrics``. Modules and types combine their calls by each column's aggregation
(:mod:`moduleprofiler.export.aggregate`); a column with a
:class:`~moduleprofiler.export.columns.Statistic` (a per-module median time) is computed for
each module from its calls' per-iteration samples instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd

from moduleprofiler.count_dtype import count_dtype
from moduleprofiler.export.aggregate import (
    CallTree,
    call_tree,
    combine,
    combine_group,
    outermost_of_type,
    placed_calls,
    sum_known,
)
from moduleprofiler.export.columns import (
    BUILTIN,
    ColumnSpec,
    column_spec,
    registered_columns,
    registry_key,
    value_spec,
)
from moduleprofiler.export.keys import FIELD_KEYS
from moduleprofiler.export.names import module_name, module_path
from moduleprofiler.export.renamed import RenamedKeysDict
from moduleprofiler.export.values import plain
from moduleprofiler.records import CALLED, GROUPING, shared_overlap

if TYPE_CHECKING:
    from moduleprofiler.export.columns import Aggregation
    from moduleprofiler.records import Aggregate, CallRecord, ModuleInfo
    from moduleprofiler.records import ProfileData as Profile

SCHEMA_VERSION = 5
"""Version of :func:`profile_to_dict`'s layout. 2: ``records[].metrics`` holds the listeners'
columns (always an object) and ``columns`` declares the ones this package does not define.
3: a bare name is the module with everything inside it, ``self_`` its own share
(``self_ops``/``ops``, ``self_params``/``params``). 4: so are the last own-only columns
(``self_launches``/``launches``, ``self_comm_ms``/``comm_ms``, ``self_roofline_ms``/
``roofline_ms``...). 5: a record's, a module's and a peak call's ``index``, ``path`` and
``type_name`` are ``call``, ``module`` and ``type``, as the frames name them
(:data:`~moduleprofiler.export.keys.FIELD_KEYS`). Documents of every earlier version are
still read, under the names of this one."""

_RECORD_COLUMNS: tuple[tuple[str, str], ...] = tuple(
    (FIELD_KEYS.get(attribute, attribute), attribute) for attribute in (
        "index", "parent", "depth", "path", "type_name", "call_number", "input_shapes",
        "input_dtypes", "output_shapes", "output_dtypes", "output_bytes", "params",
        "self_params"))
"""The per-call frame's columns taken from the record's fields: (column, attribute), the
column named as the record's key in dicts and JSON (:data:`FIELD_KEYS`)."""
_FACTS = ("trainable_params", "buffers", "param_bytes", "buffer_bytes")
"""Module facts (:class:`ModuleInfo` fields) repeated on each of its calls."""
_COUNTS = ("self_ops", "self_macs", "ops_source", "ops", "macs", "complete",
           "self_backward_ops", "self_backward_macs")
"""The per-call frame's columns taken from the record's fields of the same name."""
_NOT_PER_MODULE = frozenset({"module", "type", "depth", "ops_source"})
"""Call columns a module row gets from its :class:`ModuleInfo` or its own rule."""
_MODULE_FACTS = ("params", "self_params", *_FACTS)
_SHARED = "shared_with"
"""The module fact naming a tied parameter's owner: a column only of models that tie one."""


def _facts(profile: Profile) -> tuple[str, ...]:
    """:data:`_FACTS`, with ``shared_with`` when some module registers a parameter that
    another module owns (a tied weight)."""
    shared = any(info.shared_with for info in profile.modules)
    return (*_FACTS, _SHARED) if shared else _FACTS


def count_series(values: Sequence[int | float | None], name: str) -> pd.Series:
    """Counts as a nullable integer column (``<NA>`` for unknown), or float if any is
    fractional, or exact Python integers if any is beyond 64 bits (:func:`count_dtype`)."""
    return _count_series(plain(values), name)


def _count_series(data: list[Any], name: str) -> pd.Series:
    """:func:`count_series` of values that are plain already."""
    return pd.Series(data, name=name, dtype=count_dtype(data))


def typed_series(values: Sequence[Any], spec: ColumnSpec) -> pd.Series:
    """``values`` as the column type of ``spec``: nullable integers (or floats) for counts,
    bytes and integers, nullable floats for other numbers, booleans for flags, objects
    otherwise (or when the values are not what the kind promises)."""
    data = plain(values)
    # the values' types, not each value, decide (a long pass has tens of thousands of rows)
    kinds = set(map(type, data))
    missing = type(None) in kinds
    kinds.discard(type(None))
    if spec.kind == "flag" and kinds <= {bool}:
        return pd.Series(data, name=spec.name, dtype="boolean" if missing else "bool")
    numbers = all(issubclass(kind, (int, float)) and not issubclass(kind, bool)
                  for kind in kinds)
    if spec.numeric and spec.kind != "flag" and numbers:
        if spec.kind in ("count", "bytes", "int"):
            return _count_series(data, spec.name)
        return pd.Series(data, name=spec.name, dtype="Float64")
    return pd.Series(data, name=spec.name, dtype=object)


def metric_names(records: Sequence[CallRecord]) -> list[str]:
    """The listeners' column names, in the order they first appear."""
    names: dict[str, None] = {}
    for record in records:
        names.update(dict.fromkeys(record.metrics or ()))
    return list(names)


def _derive(frame: pd.DataFrame, specs: Sequence[ColumnSpec]) -> None:
    """Add every derived column of ``specs`` whose inputs ``frame`` holds, those derived from
    other derived columns after them, whatever order the columns were registered in."""
    pending = [spec for spec in specs if spec.derive is not None and spec.name not in frame]
    while pending:
        ready = [spec for spec in pending
                 if spec.derive is not None and all(c in frame for c in spec.derive.inputs)]
        if not ready:
            return
        for spec in ready:
            assert spec.derive is not None
            frame[spec.name] = typed_series(list(spec.derive.compute(frame)), spec)
        done = {spec.name for spec in ready}
        pending = [spec for spec in pending if spec.name not in done]


def _kept(profile: Profile, key: Any, build: Callable[[], pd.DataFrame]) -> pd.DataFrame:
    """A copy of the frame ``build()`` makes of ``profile``, built once per profile and
    registry state (the records never change; a report asks for the module frame five
    times): the caller may change its copy."""
    kept = profile._frames
    state = registry_key()
    if kept.get("registry") != state:
        kept.clear()
        kept["registry"] = state
    frame = kept.get(key)
    if frame is None:
        frame = kept[key] = build()
    return frame.copy()


def call_frame(profile: Profile) -> pd.DataFrame:
    """One row per module call, in execution order: the record's fields, its module's facts,
    the derived columns (``self_flops``, ``backward_ops``, ...) and the listeners'
    columns (``CallRecord.metrics``)."""
    return _kept(profile, "calls", lambda: _call_frame(profile))


def _call_frame(profile: Profile) -> pd.DataFrame:
    records = profile.records
    infos: dict[str, ModuleInfo] = {info.path: info for info in profile.modules}
    columns: dict[str, Any] = {}
    for name, attribute in _RECORD_COLUMNS:
        columns[name] = [getattr(record, attribute) for record in records]
    columns["module"] = [module_name(path) for path in columns["module"]]
    for name in _facts(profile):
        columns[name] = [getattr(infos[r.path], name) if r.path in infos else None
                         for r in records]
    for name in _COUNTS:
        columns[name] = [getattr(record, name) for record in records]
    frame = pd.DataFrame({name: typed_series(values, column_spec(name))
                          for name, values in columns.items()})
    frame["call"] = frame["call"].astype("int64") if len(frame) else frame["call"]
    registered = registered_columns()
    _derive(frame, [spec for spec in registered if spec.name in BUILTIN])
    if "ops_complete" in frame:  # beside the flag it refines, not after the derived counts
        frame.insert(int(frame.columns.get_loc("complete")) + 1, "ops_complete",
                     frame.pop("ops_complete"))
    for name in metric_names(records):
        values = [(record.metrics or {}).get(name) for record in records]
        spec = value_spec(name, values)
        if spec.kind != "samples":  # kept for the per-module statistics, never shown
            frame[name] = typed_series(values, spec)
    _derive(frame, [spec for spec in registered if spec.name not in BUILTIN])
    return frame


def _module_source(status: str, sources: list[str]) -> str:
    if status != CALLED:
        return status
    kinds = set(sources)
    return kinds.pop() if len(kinds) == 1 else "unknown"


def module_frame(profile: Profile, *, by_caller: bool = False) -> pd.DataFrame:
    """One row per module (``named_modules()`` order, uncalled modules included). Each
    column combines the module's calls by its aggregation: own quantities are summed,
    inclusive ones summed over the outermost calls, shapes taken from the first call. A
    grouping (a container never called itself whose children ran) shows the sum of its
    children's calls and ``ops_source == "grouping"``.

    ``by_caller`` (the tree's rows): a module shared between blocks has a row under each
    block that called it, holding those calls (:attr:`CallTree.placed`); its parameters
    (and buffers) are on its own row only, the others' are unknown (``<NA>``)."""
    return _kept(profile, ("modules", by_caller),
                 lambda: _module_frame(profile, call_frame(profile), by_caller))


def _module_frame(profile: Profile, calls: pd.DataFrame, by_caller: bool) -> pd.DataFrame:
    tree = call_tree(profile)
    specs = {name: column_spec(name, calls[name].dtype) for name in calls.columns
             if name not in _NOT_PER_MODULE and name not in _MODULE_FACTS and name != _SHARED}
    aggregations = {name: spec.aggregation for name, spec in specs.items()
                    if spec.aggregation != "none"}
    values = {name: plain(calls[name]) for name in [*aggregations, "ops_source"]}
    sources = values["ops_source"]
    rows: list[dict[str, Any]] = []
    elsewhere: list[dict[str, Any]] = []  # a shared module's calls drawn under their callers
    for info in profile.modules:
        status = tree.status(info.path)
        placed = placed_calls(tree, info.path) if by_caller else {}
        own = placed.pop(info.path, []) if by_caller else tree.rows.get(info.path, [])
        for at, rows_at in placed.items():
            elsewhere.append({**_module_row(at, info, rows_at, tree, aggregations, values,
                                            sources, facts=False), "_rows": rows_at,
                              "_owner": info.path})
        row = _module_row(info.path, info, own, tree, aggregations, values, sources)
        if status == GROUPING:
            for name, aggregation in aggregations.items():
                row[name] = combine_group(aggregation, values[name], tree.group_top[info.path],
                                          tree.group_rows[info.path])
        row["ops_source"] = _module_source(status, [sources[i] for i in own])
        rows.append({**row, "_owner": info.path})
    split = {row["_owner"] for row in elsewhere}
    for row in elsewhere:  # among the children of the module that made the calls
        rows.insert(_position(rows, row, tree.rows), row)
    owners = [row.pop("_owner") for row in rows]
    for row in elsewhere:
        del row["_rows"]
    order = ["module", "type", "depth", "calls", "params", "self_params", "trainable_params",
             "buffers", "param_bytes", "buffer_bytes", "input_shapes", "output_shapes", "self_ops",
             "self_macs", "ops", "macs", "ops_source"]
    names = [*order, *(n for n in (rows[0] if rows else {}) if n not in order)]
    if _SHARED in _facts(profile):
        names.insert(names.index("self_params") + 1, _SHARED)
    statistics = _statistics(profile.records)
    names += [spec.name for spec in statistics if spec.name not in names]
    for row, owner in zip(rows, owners):
        if owner in split:  # a shared module drawn under several callers: its statistic
            continue  # covers all of their calls, so no one of its rows holds it
        totals: dict[str, np.ndarray | None] = {}  # one module's, shared by its statistics
        for spec in statistics:
            row[spec.name] = module_statistic(spec, profile.records, tree.rows.get(owner, []),
                                              tree.outermost, profile.facts, totals)
    frame = pd.DataFrame({name: typed_series([row.get(name) for row in rows],
                                             specs.get(name) or _spec_of(name, calls))
                          for name in names})
    attached = list(dict.fromkeys(
        name for columns in profile.module_metrics.values() for name in columns))
    for name in attached:  # measured per-module columns (Profile.with_metrics) win
        combined = list(frame[name]) if name in frame else [None] * len(frame)
        # a shared module drawn under several callers: its per-module value covers all of
        # their calls, so no one of its rows holds it (a per-call column still splits)
        measured = [combined[row] if path in split
                    else profile.module_metrics.get(path, {}).get(name, combined[row])
                    for row, path in enumerate(owners)]
        frame[name] = typed_series(measured, value_spec(name, plain(measured)))
    # one name per quantity: a per-call median whose per-module twin is here (``forward_ms``
    # beside ``time_median_ms``) held the same numbers under a second name
    twins = [name for name in frame.columns if column_spec(name).per_module in frame]
    return frame.drop(columns=twins) if twins else frame


def _statistics(records: Sequence[CallRecord]) -> list[ColumnSpec]:
    """The registered :class:`Statistic` columns whose sample columns the records keep."""
    kept = set(metric_names(records))
    return [spec for spec in registered_columns() if spec.statistic is not None
            and all(name in kept for name in spec.statistic.samples)]


def module_statistic(spec: ColumnSpec, records: Sequence[CallRecord], rows: Sequence[int],
                     outermost: Sequence[bool], facts: Any = None,
                     cache: dict[str, np.ndarray | None] | None = None) -> Any:
    """One module's value of a :class:`Statistic` column from its calls ``rows``: each sample
    column totalled per iteration (:func:`sample_totals`), the iterations in which none of
    the calls has a sample left out. ``cache``: the module's totals by sample column, filled
    here, so that its statistics share one array of each (a module has about a dozen per
    quantity, and a statistic that summarizes its totals can do so once per array)."""
    assert spec.statistic is not None
    totals = []
    for name in spec.statistic.samples:
        if cache is not None and name in cache:
            total = cache[name]
        else:
            total = sample_totals(records, rows, outermost, name)
            if total is not None:
                total = total[~np.isnan(total)]
            if cache is not None:
                cache[name] = total
        if total is None:
            return None
        totals.append(total)
    if spec.statistic.facts:
        return spec.statistic.compute(*totals, facts=facts)
    return spec.statistic.compute(*totals)


def sample_totals(records: Sequence[CallRecord], rows: Sequence[int],
                  outermost: Sequence[bool], name: str) -> np.ndarray | None:
    """One module's per-iteration totals of the sample column ``name`` over its calls
    ``rows`` (:func:`iteration_totals` of the outermost calls of an ``inclusive`` column, of
    every call of a ``sum`` one); ``None`` when none of them keeps it."""
    whole = column_spec(name).aggregation == "inclusive"
    kept = [(records[row].metrics or {}).get(name) for row in rows
            if outermost[row] or not whole]
    return iteration_totals([samples for samples in kept if samples is not None])


def module_totals(profile: Profile, names: Sequence[str]) -> list[list[np.ndarray | None]]:
    """Per sample column of ``names``, per module (``profile.modules`` order),
    :func:`sample_totals` of all its calls: the per-iteration totals its :class:`Statistic`
    columns summarize (``nan`` in an iteration none of its calls has a sample of); the call
    tree is built once for all of them."""
    tree = call_tree(profile)
    return [[sample_totals(profile.records, tree.rows.get(info.path, []), tree.outermost, name)
             for info in profile.modules] for name in names]


def iteration_totals(samples: Sequence[Sequence[float]]) -> np.ndarray | None:
    """Per iteration, the sum of the calls' samples (``nan`` where no call has one), added in
    call order; ``None`` without calls or when their iterations differ."""
    if not samples or len({len(one) for one in samples}) != 1:
        return None
    calls = np.asarray(samples, dtype=np.float64)
    missing = np.isnan(calls)
    total = np.zeros(calls.shape[1])
    for values, absent in zip(calls, missing):
        total += np.where(absent, 0.0, values)
    total[missing.all(axis=0)] = np.nan
    return total


def _module_row(path: str, info: ModuleInfo, own: list[int], tree: CallTree,
                aggregations: Mapping[str, Aggregation], values: dict[str, list[Any]],
                sources: list[Any], facts: bool = True) -> dict[str, Any]:
    """The row of ``info``'s calls ``own`` drawn at ``path``; ``facts=False``: parameters and
    buffers unknown there (a shared module's are on its own row, once)."""
    row: dict[str, Any] = {
        "module": module_name(path), "type": info.type_name,
        "depth": info.depth if path == info.path else path.count(".") + 1,
        "calls": len(own),
        **{name: getattr(info, name) if facts else None for name in _MODULE_FACTS},
    }
    if info.shared_with and facts:
        row[_SHARED] = info.shared_with
    for name, aggregation in aggregations.items():
        row[name] = combine(aggregation, values[name], own, tree.outermost)
    row["ops_source"] = _module_source(CALLED, [sources[i] for i in own])
    return row


def _position(rows: list[dict[str, Any]], drawn: dict[str, Any],
              calls: dict[str, list[int]]) -> int:
    """Where a shared module's row ``drawn`` goes among ``rows`` (pre-order): under the row
    of the module that made its calls, before the first child of that row that started
    later (children in the order they ran), else after that row's subtree."""
    path = module_path(drawn["module"])
    parent = path.rpartition(".")[0]
    start = min(drawn["_rows"])
    end = len(rows)
    for index, row in enumerate(rows):
        other = module_path(row["module"])
        if other == parent or parent == "" or other.startswith(parent + "."):
            end = index + 1
            child = other.rpartition(".")[0] == parent and other != parent
            first = row.get("_rows") or calls.get(other)
            if child and first and min(first) > start:
                return index
    return end


def _spec_of(name: str, calls: pd.DataFrame) -> ColumnSpec:
    return column_spec(name, calls[name].dtype if name in calls else None)


def group_by_type(modules: pd.DataFrame, columns: Sequence[str] | None = None,
                  infos: Sequence[ModuleInfo] = ()) -> pd.DataFrame:
    """One row per module type of a module frame (first-seen order): ``modules``, ``calls``,
    then each of ``columns`` (default: every quantity) combined by its aggregation: own
    quantities summed, inclusive ones summed over the modules not inside another module of
    the same type, maxima and flags combined; shapes and text are left out. ``infos`` (the
    profile's modules): a tensor that several of a type's modules hold (a weight tied between
    two embeddings) counts once in its parameter and buffer sums."""
    if columns is None:
        columns = [name for name in modules.columns if name not in ("module", "type", "depth",
                                                                    "calls")]
    paths = [module_path(str(name)) for name in modules["module"]]
    types = [str(kind) for kind in modules["type"]]
    outermost = outermost_of_type(paths, types)
    order = list(dict.fromkeys(types))
    members: dict[str, list[int]] = {kind: [] for kind in order}
    for row, kind in enumerate(types):
        members[kind].append(row)
    # only where some module holds a tied tensor: nothing to take away otherwise
    by_path = {info.path: info for info in infos} if any(
        info.shared_tensors for info in infos) else {}
    out: dict[str, Any] = {"type": order, "modules": [len(members[k]) for k in order],
                           "calls": [int(sum(modules["calls"].iloc[members[k]])) for k in order]}
    for name in columns:
        spec = column_spec(name, modules[name].dtype)
        values = plain(modules[name])
        if spec.aggregation in ("sum", "inclusive"):
            # per type, an unknown module (one never called) adds nothing rather than
            # hiding the others: the sum of the known values (None when none is known)
            combined = [sum_known(values[r] for r in members[k] if values[r] is not None
                                  and (spec.aggregation == "sum" or outermost[r]))
                        for k in order]
            if by_path and spec.aggregation == "inclusive":
                combined = [None if total is None else total - shared_overlap(
                    name, [by_path[paths[r]] for r in members[k]
                           if outermost[r] and paths[r] in by_path])
                    for total, k in zip(combined, order)]
        elif spec.aggregation in ("max", "all"):
            combined = [combine(spec.aggregation, values, members[k], outermost) for k in order]
        else:
            continue
        out[name] = typed_series(combined, spec)
    return pd.DataFrame(out)


def type_frame(profile: Profile) -> pd.DataFrame:
    """One row per module type: how many modules and calls, every quantity combined by its
    aggregation, the calls whose own ops are unknown and ``self_ops_pct``, the type's share
    of the model's ops (its modules' own work, 0-100). Sorted by ops, largest first."""
    modules = module_frame(profile)
    frame = group_by_type(modules, infos=profile.modules)
    if frame.empty:
        return frame
    unknown: dict[str, int] = {}
    for record in profile.records:
        unknown[record.type_name] = unknown.get(record.type_name, 0) + (
            record.ops_source == "unknown")
    frame["unknown_calls"] = [unknown.get(kind, 0) for kind in frame["type"]]
    total_ops = profile.total_ops
    # the type's share of the model's own ops, named and scaled as every view's share column
    # (add_percentages: self_ops_pct, 0-100); a type whose own ops are unknown has an unknown
    # share, and so has every type of a model without ops (0 of 0) or whose ops total is a
    # lower bound (work without a formula: the true total, so every share, is unknown): <NA>
    ops = pd.to_numeric(frame["self_ops"], errors="coerce").astype("Float64")
    frame["self_ops_pct"] = (ops * 100.0 / total_ops
                             if total_ops and "ops" not in profile.lower_bounds
                             else pd.array([pd.NA] * len(frame), "Float64"))
    return frame.sort_values("self_ops", ascending=False, kind="stable",
                             na_position="last").reset_index(drop=True)


FrameColumns = Literal["data", "all"]
"""Which columns a frame keeps: ``"data"`` those that hold data, ``"all"`` every one."""


def _is_backward(name: str) -> bool:
    return name.startswith(("backward_", "self_backward_"))


def data_columns(frame: pd.DataFrame, profile: Profile) -> pd.DataFrame:
    """``frame`` without the columns that hold nothing to read: a column no row knows a value
    of, among the backward columns of a profile that ran no backward pass and the columns
    beyond the forward pass's own (a listener's, a time or memory column). The forward
    counts, shapes and parameters (and their shares, ``self_ops_pct``) stay even when unknown:
    their ``<NA>`` is an answer (the ops of that module are unknown), as the backward columns'
    are after a backward pass."""
    # a share (``self_ops_pct``) goes as the column it is a share of (``self_ops``)
    empty = [name for name in frame.columns
             if (name.removesuffix("_pct") not in BUILTIN
                 or (_is_backward(name) and not profile.backward))
             and not frame[name].notna().any()]
    return frame.drop(columns=empty)


def module_values(profile: Profile, names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per module path (every module, ``named_modules()`` order), the module frame's values of
    ``names`` as Python (``None`` where missing): a result's per-module columns read from the
    one place that combines its calls."""
    frame = module_frame(profile)
    shown = [name for name in names if name in frame]
    rows = dict(zip(frame["module"].map(module_path), frame[shown].to_dict("records")))
    return {info.path: dict(zip(names, plain(rows.get(info.path, {}).get(name)
                                             for name in names)))
            for info in profile.modules}


def profile_frame(profile: Profile, aggregate: Aggregate = "call",
                  columns: FrameColumns = "all") -> pd.DataFrame:
    """The tidy DataFrame for ``aggregate`` in ``"call"``, ``"module"`` or ``"type"``;
    ``columns="data"`` leaves out the columns that hold nothing (:func:`data_columns`)."""
    if columns not in ("data", "all"):
        raise ValueError(f"columns must be 'data' or 'all', got {columns!r}")
    frames = {"call": call_frame, "module": module_frame, "type": type_frame}
    if aggregate not in frames:
        raise ValueError(f"aggregate must be one of {tuple(frames)}, got {aggregate!r}")
    frame = frames[aggregate](profile)
    return data_columns(frame, profile) if columns == "data" else frame


def declared_columns(profile: Profile) -> dict[str, dict[str, Any]]:
    """How the listeners' columns of ``profile`` that this package does not define are
    shown and combined (kind, label, aggregation, unit), so a saved profile renders the same
    where they are not registered."""
    names = metric_names(profile.records)
    names += [n for columns in profile.module_metrics.values() for n in columns]
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(names):
        if name in BUILTIN:
            continue
        values = [(record.metrics or {}).get(name) for record in profile.records]
        spec = value_spec(name, values)
        out[name] = {"kind": spec.kind, "label": spec.label, "aggregation": spec.aggregation,
                     "unit": spec.unit, "additive": spec.additive}
    return out


def keyed_fields(row: Mapping[str, Any], owner: str) -> RenamedKeysDict:
    """The fields ``row`` of a record, a module or a peak call (attribute -> value) under
    their keys (:data:`FIELD_KEYS`: ``path`` is ``module``...); the old keys, the attribute
    names (those of schema version 4 and before), still read their value with a
    ``DeprecationWarning`` naming the new one until 0.3.0. ``owner`` names the dict there."""
    return RenamedKeysDict({FIELD_KEYS.get(name, name): value for name, value in row.items()},
                           FIELD_KEYS, owner)


def _module_fields(info: ModuleInfo) -> dict[str, Any]:
    """``info``'s fields under their keys; ``shared_tensors`` only where the module holds a
    tied tensor."""
    row = dataclasses.asdict(info)
    if not row["shared_tensors"]:
        del row["shared_tensors"]
    return keyed_fields(row, "Profile.to_dict()['modules']")


def profile_to_dict(profile: Profile) -> dict[str, Any]:
    """Plain-Python view of a profile (numbers stay numbers, shapes stay tuples); the count
    totals of a pass that counted nothing (a timing, a memory pass) are unknown (``None``),
    never 0."""
    return {
        "schema_version": SCHEMA_VERSION,
        "totals": {
            "params": profile.total_params,
            "buffers": profile.total_buffers,
            # the model's values: its root's (and the sum of the self_ columns)
            "ops": profile.total_ops,
            "macs": profile.total_macs,
            "flops": profile.total_flops,
            "backward_ops": profile.total_backward_ops,
            "backward_macs": profile.total_backward_macs,
            "complete": profile.complete,
            "lower_bounds": list(profile.lower_bounds),
        },
        "columns": declared_columns(profile),
        "records": [keyed_fields(dataclasses.asdict(record), "Profile.to_dict()['records']")
                    for record in profile.records],
        "modules": [_module_fields(info) for info in profile.modules],
        "uncalled": list(profile.uncalled),
        "groupings": list(profile.groupings),
        "unsupported": list(profile.unsupported),
        "excluded": list(profile.excluded),
    }


_FORWARD_COUNTS = ("ops", "macs", "flops")


def lower_bound_rows(frame: pd.DataFrame, column: str) -> pd.Series:
    """Per row of a module frame (or a view's frame), whether its ``column`` is only a lower
    bound there: a count that includes work without a formula (the inclusive ops of a module
    not ``ops_complete``, its MACs and FLOPs where it is not ``complete``, an own count of a
    ``mixed`` call, a backward count of a module not ``backward_complete``). Per quantity: a
    module whose MACs alone are unknown (an ops formula only) keeps exact ops. False where
    the frame lacks the flag, or the flag is unknown; the frame's own index."""
    if _is_backward(column):
        flags = frame.get("backward_complete")
    elif column == "ops":  # a frame without the per-quantity flag: complete bounds both
        flags = frame.get("ops_complete", frame.get("complete"))
    elif column in _FORWARD_COUNTS:
        flags = frame.get("complete")
    elif column.removeprefix("self_") in _FORWARD_COUNTS and "ops_source" in frame:
        flags = frame["ops_source"].ne("mixed")
    else:
        flags = None
    if flags is None:
        return pd.Series(False, index=frame.index)
    return flags.eq(False).fillna(False).astype(bool)
