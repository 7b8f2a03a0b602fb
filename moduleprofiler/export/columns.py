"""What each column of a profile frame is: its kind (how to show one value), its header label,
and whether it is *inclusive* (a parent's value contains its children's) or *own* (values add
up over all rows). Columns nobody registered are recognised by their name, so the timing
(``*_ms``) and memory (``*_bytes``) columns of later engines flow through every view unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any, Literal

import pandas as pd

Kind = Literal[
    "name", "text", "int", "count", "bytes", "time", "percent", "fraction", "shape", "dtype",
    "flag", "number", "ratio",
]
"""How a value is shown: ``name`` a module path (``""`` is the root), ``int`` a plain integer
(indices, depths, call counts), ``count`` K/M/G, ``bytes`` KiB/MiB, ``time`` milliseconds
shown in ns/µs/ms/s, ``percent`` 0-100, ``fraction`` 0-1 shown as a percentage, ``ratio`` a factor
(``2.00x``), ``shape`` a shape tree, ``dtype`` dtype names, ``flag`` yes/no, ``number`` any
other number."""

NUMERIC_KINDS: frozenset[str] = frozenset(
    {"int", "count", "bytes", "time", "percent", "fraction", "number", "flag", "ratio"}
)
ADDITIVE_KINDS: frozenset[str] = frozenset({"count", "bytes", "time"})


@dataclass(frozen=True)
class ColumnSpec:
    """How one column is shown and totalled."""

    name: str
    kind: Kind
    label: str
    inclusive: bool | None = None
    """``True``: a parent's value includes its children's (the total is the roots' value);
    ``False``: each row holds its own share (the total is the sum of the rows); ``None``: not
    a quantity that has a total (statistics such as a standard deviation, indices, text)."""

    @property
    def numeric(self) -> bool:
        """Whether the column holds numbers (right-aligned, formatted at the last step)."""
        return self.kind in NUMERIC_KINDS


_REGISTRY: dict[str, ColumnSpec] = {}


def register_column(name: str, kind: Kind, label: str | None = None,
                    inclusive: bool | None = None) -> ColumnSpec:
    """Declare how column ``name`` is shown and totalled (overrides the name-based guess).

    Engines that add columns call this once at import, e.g.
    ``register_column("forward_median_ms", "time", "forward", inclusive=True)``.
    """
    if kind not in {*NUMERIC_KINDS, "name", "text", "shape", "dtype"}:
        raise ValueError(f"unknown column kind {kind!r}")
    spec = ColumnSpec(name, kind, label if label is not None else _default_label(name),
                      inclusive)
    _REGISTRY[name] = spec
    return spec


for _name, _kind, _label, _inclusive in (
    ("module", "name", "module", None),
    ("model", "text", "model", None),
    ("type", "text", "type", None),
    ("call", "int", "call", None),
    ("parent", "int", "parent", None),
    ("depth", "int", "depth", None),
    ("call_number", "int", "call #", None),
    ("calls", "int", "calls", None),
    ("modules", "int", "modules", None),
    ("unknown_calls", "int", "unknown calls", None),
    ("params", "count", "params", True),
    ("own_params", "count", "own params", False),
    ("trainable_params", "count", "trainable", True),
    ("buffers", "count", "buffers", True),
    ("ops", "count", "self ops", False),
    ("macs", "count", "self macs", False),
    ("inclusive_ops", "count", "ops", True),
    ("inclusive_macs", "count", "macs", True),
    ("flops", "count", "flops", False),
    ("input_shapes", "shape", "input", None),
    ("output_shapes", "shape", "output", None),
    ("input_size", "shape", "input size", None),
    ("output_size", "shape", "output size", None),
    ("input_dtypes", "dtype", "input dtype", None),
    ("output_dtypes", "dtype", "output dtype", None),
    ("ops_source", "text", "ops from", None),
    ("complete", "flag", "complete", None),
    ("ops_fraction", "fraction", "ops %", None),
):
    _REGISTRY[_name] = ColumnSpec(_name, _kind, _label, _inclusive)  # type: ignore[arg-type]
_BUILTIN: frozenset[str] = frozenset(_REGISTRY)
"""The columns of the frames of this layer; the views list the ones they show by name."""

_UNIT_SUFFIXES = ("_ms", "_bytes", "_bits", "_pct", "_fraction")
_COUNT_NAME = re.compile(r"(^|_)(ops|macs|flops|params|buffers|numel|elements|count)$")
_OWN_TOKEN = re.compile(r"(^|_)(self|own|exclusive)(_|$)")
_NOT_ADDITIVE = re.compile(r"(^|_)(std|iqr|var|ci_low|ci_high|cv|p\d+|min|max)(_|$)")


def _default_label(name: str) -> str:
    base = name
    for suffix in _UNIT_SUFFIXES:
        if base.endswith(suffix):
            base = base[: -len(suffix)]
            break
    label = base.replace("_", " ")
    if name.endswith("_bits"):
        label += " (bits)"
    return label


def _guess(name: str, dtype: Any = None) -> ColumnSpec:
    if name.endswith("_pct"):
        base = column_spec(name[: -len("_pct")])
        return ColumnSpec(name, "percent", f"{base.label} %")
    if name.endswith("_fraction"):
        return ColumnSpec(name, "fraction", _default_label(name) + " %")
    own = bool(_OWN_TOKEN.search(name))
    additive = not _NOT_ADDITIVE.search(name)
    if name.endswith("_ms"):
        return ColumnSpec(name, "time", _default_label(name), (not own) if additive else None)
    if name.endswith("_bytes"):
        return ColumnSpec(name, "bytes", _default_label(name), (not own) if additive else None)
    if name.endswith("_bits"):
        return ColumnSpec(name, "count", _default_label(name), None)
    if _COUNT_NAME.search(name):
        inclusive = name.startswith("inclusive_") or (not own and name.endswith("params"))
        return ColumnSpec(name, "count", _default_label(name), inclusive)
    if name.endswith(("_shapes", "_shape", "_size")):
        return ColumnSpec(name, "shape", _default_label(name))
    if name.endswith(("_dtype", "_dtypes")):
        return ColumnSpec(name, "dtype", _default_label(name))
    if dtype is not None and pd.api.types.is_bool_dtype(dtype):
        return ColumnSpec(name, "flag", _default_label(name))
    if dtype is not None and pd.api.types.is_numeric_dtype(dtype):
        return ColumnSpec(name, "number", _default_label(name))
    return ColumnSpec(name, "text", _default_label(name))


def column_spec(name: str, dtype: Any = None) -> ColumnSpec:
    """The registered spec of ``name``, else one guessed from its name (unit suffixes
    ``_ms``/``_bytes``/``_pct``/``_fraction``, count names such as ``*_ops``/``*_params``,
    ``*_shapes``, ``*_dtypes``) and, last, from ``dtype``."""
    spec = _REGISTRY.get(name)
    return spec if spec is not None else _guess(name, dtype)


def frame_specs(frame: pd.DataFrame, columns: list[str] | None = None) -> dict[str, ColumnSpec]:
    """Specs of ``columns`` (default: all) of ``frame``, with unique labels."""
    names = list(frame.columns) if columns is None else columns
    specs = {name: column_spec(name, frame[name].dtype if name in frame else None)
             for name in names}
    seen: dict[str, int] = {}
    for spec in specs.values():
        seen[spec.label] = seen.get(spec.label, 0) + 1
    return {name: spec if seen[spec.label] == 1 else replace(spec, label=name)
            for name, spec in specs.items()}


METRIC_COLUMNS: dict[str, tuple[str, str]] = {
    "ops": ("ops", "inclusive_ops"),
    "macs": ("macs", "inclusive_macs"),
    "params": ("own_params", "params"),
}
"""Metric name -> (own column, inclusive column) in the module frame."""


def metric_columns(metric: str, available: list[str]) -> tuple[str, str]:
    """``(own, inclusive)`` columns of ``metric``: the known pairs above, else
    ``inclusive_<metric>`` / ``self_<metric>`` partners when present, else the column itself
    for both."""
    if metric in METRIC_COLUMNS:
        return METRIC_COLUMNS[metric]
    if metric not in available:
        raise KeyError(f"unknown column {metric!r}; choose ops, macs, params or one of "
                       f"{available}")
    if f"inclusive_{metric}" in available:
        return metric, f"inclusive_{metric}"
    if f"self_{metric}" in available:
        return f"self_{metric}", metric
    return metric, metric


def is_extra_column(name: str) -> bool:
    """A quantity that is not one of this layer's own columns (e.g. a timing or memory column
    of a later engine, registered or not): views show it without being told."""
    return name not in _BUILTIN and column_spec(name).kind in ADDITIVE_KINDS | {"number"}
