"""Folding identical sibling blocks of a tree view into one row: GPT-2's twelve ``h.0`` ...
``h.11`` blocks become ``h.0-11`` (``x12`` calls), their submodules ``h.0-11.ln_1`` ..., each
row holding the blocks' numbers summed.

Siblings fold when they are adjacent, numbered (``0``, ``1``, ... or ``layer_0``,
``layer_1``, ...: one prefix, consecutive numbers), have the same type, and their subtrees
match row by row: the same relative paths and the same :data:`IDENTITY` facts (type, status,
calls, parameters, tensors, shapes, counted ops and MACs); and they hold no parameters or
buffers in common (:data:`TENSOR_FACTS`). Only these deterministic facts decide, never a
measured column (a time, a bound label, a confidence flag): the same model folds the same
way in every run and in every view, whatever columns are shown. Quantities that add up
(counts, bytes, times, calls, percentages) are summed, maxima take the largest; any other
column keeps its value where the blocks agree and is unknown where they do not.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from moduleprofiler.count_dtype import count_dtype
from moduleprofiler.export.aggregate import all_known, max_known, sum_known
from moduleprofiler.export.columns import ColumnSpec, column_spec
from moduleprofiler.export.names import module_name, module_path
from moduleprofiler.export.tree import parents, relative_name
from moduleprofiler.export.units import is_missing
from moduleprofiler.export.values import plain

FOLD_MIN = 2
"""The fewest identical siblings folded into one row."""

_NUMBERED = re.compile(r"^(.*?)(\d+)$")
IDENTITY = ("type", "ops_source", "calls", "params", "self_params", "trainable_params",
            "buffers", "param_bytes", "buffer_bytes", "input_shapes", "output_shapes",
            "input_dtypes", "output_dtypes", "self_ops", "self_macs")
"""What blocks must share, row by row, to fold: structure and the counted (deterministic)
facts, the only facts that decide. Measured columns (times, memory, labels derived from them)
are combined without having to agree, so whether blocks fold never depends on a run."""



Cells = dict[str, Any]
"""Each column of a view's frame by name: its values as an array indexed by row."""


TENSOR_FACTS = ("params", "trainable_params", "buffers", "param_bytes", "buffer_bytes")
"""Columns that count tensors, each once per row: blocks that hold the same tensors (a
module or a weight shared between them) cannot add theirs up. A run whose sum of one of
them exceeds the value of the row it sits under shares tensors, and is not folded (each
block keeps its own, true row)."""


def _shares_tensors(cells: Cells, run: list[int], parent: int | None,
                    ends: list[int]) -> bool:
    """Whether the blocks of ``run`` hold tensors in common: a shared module's calls drawn
    inside them (rows whose tensor facts are unknown under a block whose are known: the
    shared module's parameters are on its own row only), or their tensor counts adding up
    to more than the row they sit under."""
    for column in TENSOR_FACTS:
        if column not in cells:
            continue
        cell = cells[column]
        values: list[Any] = [cell[head] for head in run]
        if any(is_missing(value) for value in values):
            continue
        drawn = any(is_missing(cell[row]) for head in run for row in range(head + 1, ends[head]))
        whole: Any = cell[parent] if parent is not None else None
        if drawn or (not is_missing(whole) and sum(values) > whole):
            return True
    return False


def _combine(spec: ColumnSpec) -> Callable[[list[Any]], Any] | None:
    """How folded blocks combine a column: summed, the largest or all true
    (:mod:`~moduleprofiler.export.aggregate`); ``None``: kept where they agree."""
    if spec.kind in ("percent", "fraction"):
        return sum_known
    if spec.numeric and spec.aggregation in ("sum", "inclusive"):
        return sum_known
    return {"max": max_known, "all": all_known}.get(spec.aggregation)


def _subtree_ends(parent_of: Sequence[int | None]) -> list[int]:
    """For each row (pre-order), one past its last descendant."""
    ends = list(range(1, len(parent_of) + 1))
    for row in range(len(parent_of) - 1, -1, -1):
        parent = parent_of[row]
        if parent is not None:
            ends[parent] = max(ends[parent], ends[row])
    return ends


def _row_facts(frame: pd.DataFrame) -> list[tuple[str, ...]]:
    """Each row's :data:`IDENTITY` facts, read column by column once (a cell read per fact
    and row took most of a ResNet-50 table's time)."""
    columns = [[repr(value) for value in frame[column].tolist()]
               for column in IDENTITY if column in frame]
    return list(zip(*columns)) if columns else [()] * len(frame)


def _signature(facts: list[tuple[str, ...]], names: list[str], start: int,
               end: int) -> tuple[Any, ...]:
    """The block at ``start`` as what decides folding: each row's relative path and its
    :data:`IDENTITY` facts."""
    root = names[start]
    return tuple((relative_name(names[row], root) if row != start else "", facts[row])
                 for row in range(start, end))


def _runs(children: list[int], names: list[str], keys: dict[int, tuple[Any, ...]]) -> list[
        list[int]]:
    """Maximal runs of adjacent children with numbered names (one prefix, consecutive numbers)
    and equal signatures."""
    runs: list[list[int]] = []
    for child in children:
        match = _NUMBERED.match(names[child].rpartition(".")[2])
        if runs and match:
            last = runs[-1][-1]
            before = _NUMBERED.match(names[last].rpartition(".")[2])
            if before and before.group(1) == match.group(1) \
                    and int(match.group(2)) == int(before.group(2)) + 1 \
                    and keys[last] == keys[child]:
                runs[-1].append(child)
                continue
        runs.append([child])
    return [run for run in runs if len(run) >= FOLD_MIN]


def _fold_value(values: list[Any], combine: Callable[[list[Any]], Any] | None) -> Any:
    # plain Python numbers: numpy's int64 sums of large blocks wrap round without a word
    values = plain(values)
    if combine is None:
        return values[0] if all(repr(value) == repr(values[0]) for value in values) else pd.NA
    combined = combine(values)
    return pd.NA if combined is None else combined


def block_keys(frame: pd.DataFrame) -> dict[str, tuple[Any, ...]]:
    """What decides folding of each numbered row of ``frame`` (every module of a tree, before
    a view leaves rows out), over its whole subtree, by module name: a view of some rows
    keeps them, so that blocks differing only in rows it leaves out (a ``max_depth`` hiding a
    block's different child) do not fold as one."""
    names = [str(name) for name in frame["module"]]
    ends = _subtree_ends(parents(names))
    facts = _row_facts(frame)
    return {names[row]: _signature(facts, names, row, ends[row]) for row in range(len(names))
            if _NUMBERED.match(names[row].rpartition(".")[2])}


def fold_tree(frame: pd.DataFrame,
              blocks: Mapping[str, tuple[Any, ...]] | None = None) -> pd.DataFrame:
    """``frame`` (a tree view's rows, pre-order, with every column) with runs of identical
    numbered siblings folded into one subtree. ``blocks``: :func:`block_keys` of the whole
    tree when ``frame`` holds some of its rows only; they decide then. Returns ``frame``
    itself when nothing folds."""
    names = [str(name) for name in frame["module"]]
    parent_of = parents(names)
    ends = _subtree_ends(parent_of)
    specs = {c: column_spec(c, frame[c].dtype) for c in frame.columns}
    # each column's values once (their own array: a cell reads what ``.iat`` reads), not a
    # column lookup per cell, which took seconds on a model of thousands of modules
    cells: Cells = {str(column): frame[column].array for column in frame.columns}
    facts = _row_facts(frame)
    children: dict[int | None, list[int]] = {}
    for row, parent in enumerate(parent_of):
        children.setdefault(parent, []).append(row)
    heads: dict[int, list[int]] = {}
    for kids in children.values():
        candidates = [k for k in kids if _NUMBERED.match(names[k].rpartition(".")[2])]
        keys = {k: _signature(facts, names, k, ends[k]) if blocks is None
                else blocks.get(names[k], ()) for k in candidates}
        for run in _runs(kids, names, keys):
            if not _shares_tensors(cells, run, parent_of[run[0]], ends):
                heads[run[0]] = run
    if not heads:
        return frame
    rows: list[dict[str, Any]] = []
    row = 0
    while row < len(names):
        head = heads.get(row)
        if head is None:
            rows.append({str(key): value for key, value in frame.iloc[row].items()})
            row += 1
            continue
        rows.extend(_folded_rows(cells, names, head, ends, specs))
        row = ends[head[-1]]
    out = pd.DataFrame(rows, columns=frame.columns)
    return pd.DataFrame({column: _typed(out[column], dtype)
                         for column, dtype in frame.dtypes.items()})


def _typed(values: pd.Series, dtype: Any) -> pd.Series:
    """Folded ``values`` as their column's type ``dtype``. A folded row is unknown where its
    blocks' values do not combine (a child that never ran has no time to sum): a numpy
    float column writes that as NaN, a numpy integer or bool column becomes nullable, so
    the unknown stays unknown instead of failing the conversion or becoming a number. An
    integer column whose sums pass 64 bits holds them as Python integers
    (:func:`count_dtype`)."""
    if count_dtype(plain(values)) == "object":
        return values.astype(object)
    if not isinstance(dtype, np.dtype) or dtype.kind not in "fiub":
        return values.astype(dtype)
    present = ~values.map(is_missing).astype(bool)
    if dtype.kind == "f":
        return values.where(present, np.nan).astype(dtype)
    if bool(present.all()):
        return values.astype(dtype)
    nullable = "boolean" if dtype.kind == "b" else "Int64"
    return values.where(present, None).astype(nullable)


def _folded_rows(cells: Cells, names: list[str], run: list[int], ends: list[int],
                 specs: dict[str, ColumnSpec]) -> list[dict[str, Any]]:
    """One row per row of the first block's subtree, the blocks' values combined."""
    first, last = names[run[0]], names[run[-1]]
    parent, _, first_name = module_path(first).rpartition(".")
    number = _NUMBERED.match(last.rpartition(".")[2])
    assert number is not None  # runs hold numbered names only
    label = f"{first_name}-{number.group(2)}"
    folded_path = f"{parent}.{label}" if parent else label
    out = []
    for offset in range(ends[run[0]] - run[0]):
        row = {column: _fold_value([cells[column][head + offset] for head in run],
                                   _combine(spec))
               for column, spec in specs.items()}
        rest = module_path(names[run[0] + offset])[len(module_path(first)):]
        row["module"] = module_name(folded_path + rest)
        row["type"] = cells["type"][run[0] + offset]
        out.append(row)
    return out
