"""How per-call values become per-module and per-type values, by each column's aggregation
(:data:`Aggregation`).

Two facts of the call tree decide what may be added up:

* a call nested inside another call of the *same module* (a module that calls itself, or a
  shared module called inside its own call) is already contained in the outer call's
  inclusive values, so a module's inclusive value sums only its outermost calls;
* a module that was never called itself but whose descendants ran (a ``ModuleList``, a
  ``ModuleDict``, a root whose ``pred_fn`` calls its children) is a *grouping*: it shows the
  sum of its topmost descendant calls, and is not "never called";
* a module shared between blocks (one ``Linear`` registered in three blocks) has one path,
  its first in ``named_modules()``, but its calls happen inside each block: a tree places
  each call where it happened (:attr:`CallTree.placed`), so no child holds more work than
  the block it is drawn under.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from moduleprofiler.export.units import is_missing
from moduleprofiler.records import CALLED, GROUPING, UNCALLED, ModuleStatus, ancestor_paths

if TYPE_CHECKING:
    from moduleprofiler.records import CallRecord, ProfileData

Aggregation = Literal["sum", "inclusive", "max", "first", "all", "none"]
"""How the calls of one module (and the modules of one type) combine into one value:

* ``sum``: each call holds its own share (``self_ops``, ``self_params``): a module sums its calls, a
  type its modules, and the rows of a table add up to the whole model;
* ``inclusive``: a call's value contains the calls made inside it (``ops``, a
  forward time): a module sums its *outermost* calls (a call nested inside another call of the
  same module is already counted in it), a type its outermost modules; the whole model's value
  is the root's;
* ``max``: the largest value of the calls (a peak); the whole model's value is the largest;
* ``first``: the first call's value (shapes, dtypes); types have none;
* ``all``: true when every call's value is (``complete``);
* ``none``: a fact of one call (its index, its parent) that modules and types do not have.
"""


_INTEGERS = frozenset((int, bool))


def sum_known(values: Iterable[Any]) -> Any:
    """Sum of the values, or ``None`` when any of them is unknown (or there are none)."""
    values = list(values)
    if values and set(map(type, values)) <= _INTEGERS:  # the usual case, summed in C
        return sum(values)
    total: Any = 0
    seen = False
    for value in values:
        if is_missing(value):
            return None
        total += value
        seen = True
    return total if seen else None


def max_known(values: Iterable[Any]) -> Any:
    """The largest known value (``None`` when none is known)."""
    present = [value for value in values if not is_missing(value)]
    return max(present) if present else None


def all_known(values: Iterable[Any]) -> Any:
    """Whether every known value is true (``None`` when none is known)."""
    present = [bool(value) for value in values if not is_missing(value)]
    return all(present) if present else None


def is_under(path: str, group: str) -> bool:
    """Whether the module at ``path`` is the one at ``group`` or inside it."""
    return group == "" or path == group or path.startswith(group + ".")


@dataclass
class CallTree:
    """Which rows of the per-call frame (records order) each module combines."""

    rows: dict[str, list[int]] = field(default_factory=dict)
    """Module path -> its calls' rows."""
    outermost: list[bool] = field(default_factory=list)
    """Per row: not nested inside another call of the same module."""
    group_rows: dict[str, list[int]] = field(default_factory=dict)
    """Grouping path -> rows of every call of its descendants."""
    group_top: dict[str, list[int]] = field(default_factory=dict)
    """Grouping path -> rows of its topmost descendant calls (not inside one another)."""
    placed: list[str] = field(default_factory=list)
    """Per row: the tree path the call is drawn at. Its module's path when the call ran
    inside a call of the module's nearest called ancestor (by path); a call made outside
    every such call (a shared module called by another block) is drawn under the call that
    made it, as ``<caller's placed path>.<last part of its path>`` (``1.0`` for the shared
    ``0.0`` called by block ``1``), and its descendants' calls follow it."""
    statuses: dict[str, ModuleStatus] = field(default_factory=dict)
    """Module path -> its status (:func:`moduleprofiler.records.module_statuses`)."""

    def status(self, path: str) -> ModuleStatus:
        """:data:`CALLED`, :data:`GROUPING`, :data:`UNCALLED` or :data:`UNHOOKED`."""
        return self.statuses.get(path, CALLED if self.rows.get(path) else UNCALLED)


def call_tree(profile: ProfileData) -> CallTree:
    """The :class:`CallTree` of ``profile``'s records."""
    records = profile.records
    position = {record.index: row for row, record in enumerate(records)}
    parent_row = [position.get(r.parent) if r.parent is not None else None for r in records]
    tree = CallTree(statuses=profile.statuses())
    for row, record in enumerate(records):
        tree.rows.setdefault(record.path, []).append(row)
    groups = {path for path, status in tree.statuses.items() if status == GROUPING}

    def ancestors(row: int) -> Iterable[str]:
        above = parent_row[row]
        while above is not None:
            yield records[above].path
            above = parent_row[above]

    tree.placed = _placements(records, parent_row, set(tree.rows),
                              {info.path for info in profile.modules})
    for row, record in enumerate(records):
        tree.outermost.append(record.path not in ancestors(row))
        for group in ancestor_paths(record.path):
            if group not in groups:
                continue
            tree.group_rows.setdefault(group, []).append(row)
            if not any(is_under(path, group) for path in ancestors(row)):
                tree.group_top.setdefault(group, []).append(row)
    return tree


def _placements(records: Sequence[CallRecord], parent_row: Sequence[int | None],
                called: set[str], paths: set[str]) -> list[str]:
    """:attr:`CallTree.placed` of each record (records in execution order, so a call's
    enclosing calls are placed before it)."""
    enclosing: list[int | None] = []  # the call of the nearest called ancestor around it
    for row, record in enumerate(records):
        anchor = next((above for above in reversed(ancestor_paths(record.path))
                       if above in called), None)
        above = parent_row[row] if anchor is not None else None
        while above is not None and records[above].path != anchor:
            above = parent_row[above]
        enclosing.append(above)
    # a module none of whose calls ran inside its ancestor's stays at its path: its own row
    # is never left without the calls it made
    outside = {record.path for row, record in enumerate(records)
               if enclosing[row] is None and parent_row[row] is not None}
    inside = {record.path for row, record in enumerate(records) if enclosing[row] is not None}
    placed: list[str] = []
    for row, record in enumerate(records):
        path, around, caller = record.path, enclosing[row], parent_row[row]
        if around is not None:  # follow the ancestor's call to where it is drawn
            anchor = records[around].path
            placed.append(_join(placed[around], path[len(anchor) + 1:] if anchor else path))
        elif caller is None or path not in inside or path not in outside:
            placed.append(path)
        else:  # called from outside its ancestor's calls: drawn under the call that made it
            name = _join(placed[caller], path.rpartition(".")[2])
            if name in paths and name != path:  # another module's path: keep them apart
                name = _join(placed[caller], path.replace(".", "/"))
            placed.append(name)
    return placed


def _join(base: str, rest: str) -> str:
    return f"{base}.{rest}" if base else rest


def placed_calls(tree: CallTree, path: str) -> dict[str, list[int]]:
    """The calls of the module at ``path`` by the tree path each is drawn at
    (:attr:`CallTree.placed`): ``{path: rows}`` unless it is shared and called elsewhere."""
    out: dict[str, list[int]] = {}
    for row in tree.rows.get(path, []):
        out.setdefault(tree.placed[row], []).append(row)
    return out


def combine(aggregation: Aggregation, values: Sequence[Any], rows: Sequence[int],
            outermost: Sequence[bool]) -> Any:
    """One module's value of a column from its calls' ``rows`` of ``values``."""
    if aggregation == "sum":
        return sum_known(values[row] for row in rows)
    if aggregation == "inclusive":
        return sum_known(values[row] for row in rows if outermost[row])
    if aggregation == "max":
        return max_known(values[row] for row in rows)
    if aggregation == "all":
        return all_known(values[row] for row in rows)
    if aggregation == "first":
        return values[rows[0]] if rows else None
    return None


def combine_group(aggregation: Aggregation, values: Sequence[Any], top: Sequence[int],
                  every: Sequence[int]) -> Any:
    """A grouping's value: its topmost descendant calls summed (inclusive), the largest of
    all of them (max); of its own work 0, as it never ran (sum), where the quantity is known
    for its descendants; no shape of its own (first)."""
    if aggregation == "sum":
        return 0 if any(not is_missing(values[row]) for row in every) else None
    if aggregation == "inclusive":
        return sum_known(values[row] for row in top)
    if aggregation == "all":
        return all_known(values[row] for row in top)
    if aggregation == "max":
        return max_known(values[row] for row in every)
    return None


def outermost_of_type(paths: Sequence[str], types: Sequence[str]) -> list[bool]:
    """Per module: no ancestor module (by path) has the same type, so its inclusive values
    are not already inside another module of its type."""
    type_of = dict(zip(paths, types))
    return [not any(type_of.get(above) == kind for above in ancestor_paths(path))
            for path, kind in zip(paths, types)]

