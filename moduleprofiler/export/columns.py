"""The column registry: every column a profile can show, with its unit, how the calls of one
module (and the modules of one type) combine into one value, and how one value is shown.

A listener that writes ``call.values["my_count"]`` declares its column once::

    register_column("my_count", "count", unit="items", aggregation="sum")

and every view shows it: the frames per call, module and type, the tree, tables, top-k, CSV,
JSON, Markdown, LaTeX, the HTML report and the command line. Columns nobody registered are
recognised by their name (:func:`column_spec`): ``*_ms`` times, ``*_bytes`` memory, names
ending in ``ops``/``macs``/``flops``/``params``/``count``... counts; ``self``/``own`` mark an own
quantity, ``max``/``peak`` a maximum, ``std``/``p95``/``min``... a statistic.
"""

from __future__ import annotations

import dataclasses
import operator
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import numpy as np
import pandas as pd

from moduleprofiler.export.aggregate import Aggregation as Aggregation
from moduleprofiler.export.renamed import current_name
from moduleprofiler.export.values import plain
from moduleprofiler.records import COUNTED_SOURCES, subtree_totals

Kind = Literal[
    "name", "text", "int", "count", "bytes", "time", "percent", "fraction", "shape", "dtype",
    "flag", "number", "ratio", "samples",
]
"""How a value is shown: ``name`` a module name, ``int`` a plain integer (indices, depths, call
counts), ``count`` K/M/G, ``bytes`` KiB/MiB, ``time`` milliseconds shown in ns/µs/ms/s,
``percent`` 0-100, ``fraction`` 0-1 shown as a percentage, ``ratio`` a factor (``2.00x``),
``shape`` a shape tree, ``dtype`` dtype names, ``flag`` yes/no, ``number`` any other number;
``samples`` a call's per-iteration values (a tuple), kept on the record for the
:class:`Statistic` columns and never shown."""

NUMERIC_KINDS: frozenset[str] = frozenset(
    {"int", "count", "bytes", "time", "percent", "fraction", "number", "flag", "ratio"}
)
ADDITIVE_KINDS: frozenset[str] = frozenset({"count", "bytes", "time"})
KINDS: frozenset[str] = frozenset(get_args(Kind))
AGGREGATIONS: tuple[str, ...] = get_args(Aggregation)


@dataclass(frozen=True)
class Derived:
    """A column computed from other columns of the per-call frame (``flops = 2 * macs``)."""

    inputs: tuple[str, ...]
    """The columns it needs; it is computed for every profile whose calls have them all."""
    compute: Callable[[pd.DataFrame], Sequence[Any] | pd.Series]
    """Per-call frame -> one value per row."""


@dataclass(frozen=True)
class Statistic:
    """A per-module column computed from the per-iteration samples its module's calls keep
    (``samples`` columns): a module's value is not a combination of its calls' values (the
    median of a sum is no sum of medians) but ``compute`` of its per-iteration totals.

    Each sample column is totalled per iteration by its own aggregation (``inclusive``: the
    outermost calls, ``sum``: every call); an iteration in which none of the module's calls
    has a sample is left out. A module without calls (uncalled, a grouping) has none."""

    samples: tuple[str, ...]
    """The sample columns it reads, in the order ``compute`` takes their totals."""
    compute: Callable[..., Any]
    """One per-iteration totals array per sample column (aligned) -> the module's value; with
    :attr:`facts`, the profile's ``facts`` as the keyword ``facts`` too."""
    facts: bool = False
    """Whether ``compute`` reads the pass's facts (its confidence level, its fewest trusted
    samples)."""


def median_of(totals: Any) -> float | None:
    """The median of ``totals`` (``None`` when there are none): the 50th percentile, as every
    timing summary's median."""
    return float(np.percentile(totals, 50)) if len(totals) else None


def median_statistic(samples: str) -> Statistic:
    """The median over the kept iterations of a module's totals of ``samples``."""
    return Statistic((samples,), median_of)


def scaled(column: str, factor: int | float) -> Derived:
    """``factor * column`` (``scaled("self_macs", 2)`` is ``self_flops``)."""
    # in Python numbers: Int64 arithmetic wraps past 2**63 without a word
    return Derived((column,), lambda calls: [
        None if value is None else value * factor for value in plain(calls[column])])


def inclusive_of(column: str) -> Derived:
    """Each call's ``column`` plus that of every call made inside it (unknown values count as
    nothing; a call whose subtree knows none stays unknown)."""
    return Derived((column, "call", "parent"),
                   lambda calls: subtree_totals(plain(calls[column]), _parent_rows(calls)))


def register_own_and_inclusive(name: str, kind: Kind, label: str, unit: str,
                               description: str) -> tuple[ColumnSpec, ColumnSpec]:
    """Declare the pair every own/inclusive quantity is: ``self_<name>``, the call's own
    share that a listener writes (summed over calls), and ``<name>``, derived, the call with
    every call made inside it (:func:`inclusive_of`)."""
    own = register_column(f"self_{name}", kind, f"self {label}", aggregation="sum",
                          unit=unit, description=description)
    inclusive = register_column(name, kind, label, aggregation="inclusive", unit=unit,
                                derive=inclusive_of(f"self_{name}"),
                                description=f"self_{name} of the call and every call "
                                            "inside it")
    return own, inclusive


def _parent_rows(calls: pd.DataFrame) -> list[int | None]:
    """Per row of a per-call frame, the row of its parent call (``None``: an outermost call)."""
    position = {index: row for row, index in enumerate(plain(calls["call"]))}
    return [None if parent is None else position.get(parent)
            for parent in plain(calls["parent"])]


def ops_known_inside(calls: pd.DataFrame) -> list[bool]:
    """Per row of a per-call frame, whether the own ops of the call and of every call inside
    it are known (``ops_source`` counted, excluded on purpose included): its ``ops`` is exact,
    whatever its MACs are. Derived from the records, so a document saved before the column
    existed reads it too."""
    own = [source in COUNTED_SOURCES for source in calls["ops_source"]]
    return [bool(flag) for flag in subtree_totals(own, _parent_rows(calls), operator.and_)]


@dataclass(frozen=True)
class ColumnSpec:
    """One column: what it is called, its unit, how it combines and how it is shown."""

    name: str
    kind: Kind
    label: str
    aggregation: Aggregation = "first"
    unit: str = ""
    """What one unit of the value is (``"ops"``, ``"bytes"``, ``"ms"``); documentation only."""
    additive: bool = True
    """Whether the rows of a ``sum`` column add up to a whole-model total (``False`` for
    ``output_bytes``: a container's output is also its last child's)."""
    derive: Derived | None = dataclasses.field(default=None, compare=False)
    """How the column is computed from other per-call columns (``None``: a listener writes it
    or it is a module fact)."""
    description: str = ""
    needs: str = ""
    """What makes a profile hold the column (``"time_modules()"``): a view asked for it on a
    profile without it says so. Declared by the column's producer; the views name no producer."""
    per_module: str | None = None
    """The column that holds the same quantity measured per module (a per-call median's
    per-module median): module views show that one instead of combining the calls."""
    statistic: Statistic | None = dataclasses.field(default=None, compare=False)
    """How a module's value is computed from its calls' samples (:class:`Statistic`) instead
    of by ``aggregation``, which then only combines modules into types."""
    detail: bool = False
    """A statistic shown only when asked for (a percentile, a CI bound): the views' defaults
    leave it out, the module frame holds it."""
    qualifies: tuple[str, ...] = ()
    """The columns this one is a flag on (a time's low confidence: the time's median and its
    share; a column's ``_pct`` share counts as the column). A table too wide for its width
    shows the flag as long as one of them is shown, in every view: it hides the flag with
    the last of them, never before (after every other column where none is shown)."""

    @property
    def inclusive(self) -> bool | None:
        """``True``: a parent's value includes its children's, so the whole model's value is
        the root's (``inclusive`` and ``max`` columns); ``False``: each row holds its own
        share and the total is the sum of the rows; ``None``: no total."""
        if self.aggregation in ("inclusive", "max"):
            return True
        if self.aggregation == "sum" and self.additive:
            return False
        return None

    @property
    def numeric(self) -> bool:
        """Whether the column holds numbers (right-aligned, formatted at the last step)."""
        return self.kind in NUMERIC_KINDS


_REGISTRY: dict[str, ColumnSpec] = {}

_FROM_DOCUMENTS: set[str] = set()
"""Columns declared by a profile document read with ``from_json`` (how it shows the columns
its listeners wrote), not by code: a later :func:`register_column` of the name replaces the
declaration, whatever it says (the file may be older than the listener's present meaning)."""


def _check(name: str, kind: str, aggregation: str) -> None:
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"column name must be an identifier such as 'my_count', got {name!r}")
    if name.endswith("_pct"):
        raise ValueError(f"column {name!r}: names ending in _pct are the percentage columns "
                         "the views derive from any quantity")
    if kind not in KINDS:
        raise ValueError(f"unknown column kind {kind!r} (known: {', '.join(sorted(KINDS))})")
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"unknown aggregation {aggregation!r} (known: "
                         f"{', '.join(AGGREGATIONS)})")


def register_column(name: str, kind: Kind = "number", label: str | None = None,
                    inclusive: bool | None = None, *, aggregation: Aggregation | None = None,
                    unit: str = "", additive: bool = True, derive: Derived | None = None,
                    description: str = "", needs: str = "", per_module: str | None = None,
                    statistic: Statistic | None = None, detail: bool = False,
                    qualifies: tuple[str, ...] = (), replace: bool = False) -> ColumnSpec:
    """Declare column ``name`` and return its spec; every view then shows it.

    ``aggregation`` says how calls combine (:data:`Aggregation`); without it, ``inclusive=True``
    means ``"inclusive"``, ``inclusive=False`` means ``"sum"``, and ``None`` keeps what the name
    suggests. ``derive`` computes the column from other per-call columns
    (:func:`scaled`, :func:`inclusive_of`); ``needs``, ``per_module``, ``statistic`` and
    ``detail`` as in
    :class:`ColumnSpec`. Declaring a name again with the same kind, unit and
    aggregation returns the new spec; a different declaration raises ``ValueError`` unless
    ``replace=True`` (two listeners must not give one name two meanings).
    """
    if aggregation is None:
        aggregation = ("inclusive" if inclusive else "sum") if inclusive is not None \
            else _guess(name).aggregation
    _check(name, kind, aggregation)
    spec = ColumnSpec(name, kind, label if label is not None else _default_label(name),
                      aggregation, unit, additive, derive, description, needs, per_module,
                      statistic, detail, qualifies)
    old = _REGISTRY.get(name)
    if old is not None and not replace and name not in _FROM_DOCUMENTS and (
            old.kind, old.aggregation, old.unit) != (spec.kind, spec.aggregation, spec.unit):
        raise ValueError(f"column {name!r} is already registered as {old.kind}/"
                         f"{old.aggregation}; pass replace=True to change it")
    _REGISTRY[name] = spec
    _FROM_DOCUMENTS.discard(name)
    return spec


def declare_document_column(name: str, kind: Kind, label: str | None, *,
                            aggregation: Aggregation, unit: str, additive: bool) -> None:
    """Register a column a loaded document declares, unless this process knows it already;
    code that registers it later wins (:data:`_FROM_DOCUMENTS`).

    Raises:
        ValueError: ``name``, ``kind`` or ``aggregation`` is not one a column may have.
    """
    if is_registered(name):
        return
    register_column(name, kind, label, aggregation=aggregation, unit=unit, additive=additive)
    _FROM_DOCUMENTS.add(name)


def is_registered(name: str) -> bool:
    """Whether ``name`` is a registered column (rather than one known by its name only)."""
    return name in _REGISTRY


def registry_key() -> tuple[int, ...]:
    """What identifies the registry's present state: a frame built under another holds other
    columns."""
    return tuple(map(id, _REGISTRY.values()))


def registered_columns() -> tuple[ColumnSpec, ...]:
    """Every registered column, built-in ones first, in registration order."""
    return tuple(_REGISTRY.values())


_MACS_TO_FLOPS = 2
"""FLOPs = 2 x MACs: one multiply and one add per multiply-accumulate (FlopCounterMode's unit)."""
MACS = "MACs"
FLOPS = "FLOPs (2·MACs)"
"""The headers of the compute columns carry their convention (``ops``: multiplies and adds,
docs/conventions.md): people compare with papers that count MACs or FLOPs. Plain-text views
write the dot as ``x`` (:class:`~moduleprofiler.export.cells.Glyphs`)."""

_BUILTINS: tuple[tuple[Any, ...], ...] = (
    # name, kind, label, aggregation, unit, additive, derive
    ("module", "name", "module", "first", "", True, None),
    ("model", "text", "model", "first", "", True, None),
    ("type", "text", "type", "first", "", True, None),
    ("call", "int", "call", "none", "", True, None),
    ("parent", "int", "parent", "none", "", True, None),
    ("depth", "int", "depth", "first", "", True, None),
    ("call_number", "int", "call #", "none", "", True, None),
    ("calls", "int", "calls", "sum", "calls", False, None),
    ("modules", "int", "modules", "sum", "modules", False, None),
    ("unknown_calls", "int", "unknown calls", "sum", "calls", False, None),
    ("input_shapes", "shape", "input", "first", "", True, None),
    ("input_dtypes", "dtype", "input dtype", "first", "", True, None),
    ("output_shapes", "shape", "output", "first", "", True, None),
    ("output_dtypes", "dtype", "output dtype", "first", "", True, None),
    ("output_bytes", "bytes", "output bytes", "sum", "bytes", False, None),
    ("params", "count", "params", "inclusive", "params", True, None),
    ("self_params", "count", "self params", "sum", "params", True, None),
    ("shared_with", "text", "shared with", "first", "", True, None),
    ("trainable_params", "count", "trainable", "inclusive", "params", True, None),
    ("buffers", "count", "buffers", "inclusive", "elements", True, None),
    ("param_bytes", "bytes", "param bytes", "inclusive", "bytes", True, None),
    ("buffer_bytes", "bytes", "buffer bytes", "inclusive", "bytes", True, None),
    ("self_ops", "count", "self ops", "sum", "ops", True, None),
    ("self_macs", "count", f"self {MACS}", "sum", "MACs", True, None),
    ("ops_source", "text", "ops from", "first", "", True, None),
    ("ops", "count", "ops", "inclusive", "ops", True, None),
    ("macs", "count", MACS, "inclusive", "MACs", True, None),
    ("complete", "flag", "complete", "all", "", True, None),
    ("ops_complete", "flag", "ops complete", "all", "", True,
     Derived(("ops_source", "call", "parent"), ops_known_inside)),
    ("self_flops", "count", f"self {FLOPS}", "sum", "FLOPs", True,
     scaled("self_macs", _MACS_TO_FLOPS)),
    ("flops", "count", FLOPS, "inclusive", "FLOPs", True,
     scaled("macs", _MACS_TO_FLOPS)),
    ("self_backward_ops", "count", "self backward ops", "sum", "ops", True, None),
    ("self_backward_macs", "count", f"self backward {MACS}", "sum", "MACs", True, None),
    ("self_backward_flops", "count", f"self backward {FLOPS}", "sum", "FLOPs", True,
     scaled("self_backward_macs", _MACS_TO_FLOPS)),
    ("backward_ops", "count", "backward ops", "inclusive", "ops", True,
     inclusive_of("self_backward_ops")),
    ("backward_macs", "count", f"backward {MACS}", "inclusive", "MACs", True,
     inclusive_of("self_backward_macs")),
    ("backward_flops", "count", f"backward {FLOPS}", "inclusive", "FLOPs", True,
     scaled("backward_macs", _MACS_TO_FLOPS)),
)
_OPS = "one multiply = 1 op, one add = 1 op, batch included"
_DESCRIPTIONS: dict[str, str] = {
    "module": "the module's dotted path as in named_modules(); the root is __root__ (\"\" in "
              "Profile.to_dict() and the JSON, as named_modules() gives it; the key of a "
              "record, a module and a peak call there too)",
    "model": "the profiled model's class name (the one-row model table)",
    "type": "the module's class name (the key of a record, a module and a peak call in "
            "Profile.to_dict() and the JSON too)",
    "call": "position of the call in execution order (the order calls started in), from 0 "
            "(the key of a record and a peak call in Profile.to_dict() and the JSON too)",
    "parent": "the call column of the call that was running when this one started (empty for "
              "an outermost call)",
    "depth": "nesting depth of the module in the model's tree; the root is 0",
    "call_number": "which call of its module this is, from 0",
    "calls": "module calls made in the pass: a module's, or a type's summed over its modules",
    "modules": "modules of the type (per-type tables)",
    "unknown_calls": "calls of the type whose own ops are unknown (no formula, operator "
                     "accounting off)",
    "input_shapes": "shapes of the call's tensor arguments (per module: its first call's)",
    "input_dtypes": "dtypes of the call's tensor arguments (per module: its first call's)",
    "output_shapes": "shapes of the call's tensor outputs (per module: its first call's)",
    "output_dtypes": "dtypes of the call's tensor outputs (per module: its first call's)",
    "output_bytes": "bytes of the storages among the forward call's outputs that did not exist "
                    "before it (views and in-place results of its inputs, parameters or "
                    "buffers count 0); not a share of a total: a container's output is also "
                    "its last child's",
    "params": "parameter elements of the module and its descendants, each tensor counted once "
              "(as in 0.0.4; self_params is the own count)",
    "self_params": "parameter elements registered on the module itself that no module before "
                  "it in named_modules() order registered (a tied weight is owned once), so "
                  "they add up to the model's total",
    "shared_with": "the modules owning parameters or buffers this module registers too (a "
                   "tied output layer: transformer.wte), each tensor owned by its first "
                   "holder; empty when it shares none",
    "trainable_params": "of params, the elements of parameters with requires_grad (inclusive)",
    "buffers": "buffer elements of the module and its descendants, each tensor counted once",
    "param_bytes": "bytes of params this process holds (numel x element size, each tensor "
                   "once; a DTensor's local shard, a sparse tensor's indices and stored "
                   "values; inclusive)",
    "buffer_bytes": "bytes of buffers (numel x element size, each tensor once; inclusive)",
    "self_ops": f"forward ops of the call's own work, children excluded ({_OPS}); empty when "
           "unknown",
    "self_macs": "forward multiply-accumulates of the call's own work, children excluded",
    "ops_source": "where the call's own ops came from: formula, operator, mixed (some "
                  "operators without a formula: a lower bound), excluded or unknown; per "
                  "module also uncalled, grouping or unhooked",
    "ops": f"forward ops of the call and every call inside it ({_OPS})",
    "macs": "forward multiply-accumulates of the call and every call inside it",
    "complete": "whether the ops and MACs of the call and of every call inside it are known "
                "(False: the inclusive counts are lower bounds; ops_complete says whether the "
                "ops alone are exact)",
    "ops_complete": "whether the ops of the call and of every call inside it are known (False: "
                    "ops is a lower bound); the MACs may be unknown where it is True (a type "
                    "with an ops formula only), complete says whether they are known too",
    "self_flops": "2 x self_macs of the call's own forward work: what torch's FlopCounterMode "
                  "counts",
    "flops": "2 x macs: forward FLOPs of the call and every call inside it",
    "self_backward_ops": f"ops of the backward work autograd did for the call's own forward "
                    f"operators ({_OPS}; profile(backward=True))",
    "self_backward_macs": "multiply-accumulates of the backward work autograd did for the call's "
                     "own forward operators",
    "self_backward_flops": "2 x self_backward_macs of the call's own backward work",
    "backward_ops": "self_backward_ops of the call and every call inside it",
    "backward_macs": "self_backward_macs of the call and every call inside it",
    "backward_flops": "2 x backward_macs: backward FLOPs of the call and "
                                "every call inside it",
}
"""What each built-in column holds (docs/glossary.md)."""
for _name, _kind, _label, _aggregation, _unit, _additive, _derive in _BUILTINS:
    _REGISTRY[_name] = ColumnSpec(_name, _kind, _label, _aggregation, _unit, _additive, _derive,
                                  _DESCRIPTIONS[_name])
BUILTIN: frozenset[str] = frozenset(_REGISTRY)
"""The columns of this package's own frames; the views list the ones they show by name."""

_UNIT_SUFFIXES = ("_ms", "_bytes", "_bits", "_pct", "_fraction")
_COUNT_NAME = re.compile(r"(^|_)(ops|macs|flops|params|buffers|numel|elements|count)$")
_OWN_TOKEN = re.compile(r"(^|_)(self|own|exclusive)(_|$)")
_MAX_TOKEN = re.compile(r"(^|_)(max|peak)(_|$)")
_STATISTIC = re.compile(r"(^|_)(std|iqr|var|ci_low|ci_high|cv|p\d+|min)(_|$)")


def _default_label(name: str) -> str:
    base = next((name.removesuffix(s) for s in _UNIT_SUFFIXES if name.endswith(s)), name)
    label = base.replace("_", " ")
    if name.endswith("_bits"):
        label += " (bits)"
    return label


def _measured(name: str, kind: Kind) -> ColumnSpec:
    """A time or memory column: own, a maximum, a statistic, or else inclusive."""
    if _STATISTIC.search(name):
        aggregation: Aggregation = "first"
    elif _MAX_TOKEN.search(name):
        aggregation = "max"
    elif _OWN_TOKEN.search(name):
        aggregation = "sum"
    else:
        aggregation = "inclusive"
    return ColumnSpec(name, kind, _default_label(name), aggregation,
                      "ms" if kind == "time" else "bytes")


def _guess(name: str, dtype: Any = None) -> ColumnSpec:
    label = _default_label(name)
    if name.endswith("_pct"):
        base = column_spec(name[: -len("_pct")])
        return ColumnSpec(name, "percent", f"{base.label} %", "none", "%")
    if name.endswith("_fraction"):
        return ColumnSpec(name, "fraction", label + " %", "none")
    if name.endswith("_ms"):
        return _measured(name, "time")
    if name.endswith("_bytes"):
        return _measured(name, "bytes")
    if name.endswith("_bits"):
        return ColumnSpec(name, "count", label, "none", "bits")
    if _COUNT_NAME.search(name):
        own = bool(_OWN_TOKEN.search(name))
        inclusive = name.startswith("inclusive_") or (not own and name.endswith("params"))
        return ColumnSpec(name, "count", label, "inclusive" if inclusive else "sum")
    if name.endswith(("_shapes", "_shape", "_size")):
        return ColumnSpec(name, "shape", label)
    if name.endswith(("_dtype", "_dtypes")):
        return ColumnSpec(name, "dtype", label)
    if dtype is not None and pd.api.types.is_bool_dtype(dtype):
        return ColumnSpec(name, "flag", label, "all")
    if dtype is not None and pd.api.types.is_numeric_dtype(dtype):
        # a number of unknown meaning: summed over calls, but no whole-model total claimed
        return ColumnSpec(name, "number", label, "sum", additive=False)
    return ColumnSpec(name, "text", label)


def column_spec(name: str, dtype: Any = None) -> ColumnSpec:
    """The registered spec of ``name``, else one guessed from its name (unit suffixes
    ``_ms``/``_bytes``/``_pct``/``_fraction``, count names such as ``*_ops``/``*_params``,
    ``*_shapes``, ``*_dtypes``) and, last, from ``dtype``."""
    spec = _REGISTRY.get(name)
    return spec if spec is not None else _guess(name, dtype)


def value_spec(name: str, values: Sequence[Any]) -> ColumnSpec:
    """:func:`column_spec` for a column given as raw per-call values (a listener's metric)."""
    if name in _REGISTRY:
        return _REGISTRY[name]
    known = [value for value in values if value is not None]
    if known and all(isinstance(value, bool) for value in known):
        return _guess(name, "bool")
    if known and all(isinstance(value, (int, float)) for value in known):
        return _guess(name, "float64")
    return _guess(name)


def frame_specs(frame: pd.DataFrame, columns: list[str]) -> dict[str, ColumnSpec]:
    """Specs of ``columns`` of ``frame``, with unique labels."""
    specs = {name: column_spec(name, frame[name].dtype if name in frame else None)
             for name in columns}
    seen = Counter(spec.label for spec in specs.values())
    return {name: spec if seen[spec.label] == 1 else dataclasses.replace(spec, label=name)
            for name, spec in specs.items()}


@dataclass(frozen=True)
class Quantity:
    """A quantity the figures and views name in a word (``"time"``): its own and inclusive
    columns and its axis label."""

    own: str
    inclusive: str
    label: str


_QUANTITIES: dict[str, list[Quantity]] = {
    "ops": [Quantity("self_ops", "ops", "ops")],
    "macs": [Quantity("self_macs", "macs", MACS)],
    "flops": [Quantity("self_flops", "flops", FLOPS)],
    "params": [Quantity("self_params", "params", "parameters")],
}


def register_quantity(name: str, own: str, inclusive: str, label: str, *,
                      prefer: bool = False) -> None:
    """Declare quantity ``name`` (``plot(metric=name)``) as the columns ``own`` and
    ``inclusive``; a second declaration of the same name is an alternative, tried after the
    first (``prefer=True``: before it) when a profile has both."""
    alternatives = _QUANTITIES.setdefault(name, [])
    quantity = Quantity(own, inclusive, label)
    if quantity not in alternatives:
        alternatives.insert(0 if prefer else len(alternatives), quantity)


def quantity(name: str, available: Sequence[str]) -> Quantity | None:
    """The first declaration of quantity ``name`` whose inclusive column is ``available``;
    ``None`` when ``name`` is no declared quantity. A ``ValueError`` saying what the column
    needs (:attr:`ColumnSpec.needs`) when none of its declarations is available."""
    alternatives = _QUANTITIES.get(name)
    if not alternatives:
        return None
    for declared in alternatives:
        if declared.inclusive in available:
            return declared
    column = alternatives[-1].inclusive
    need = column_spec(column).needs or "a profile that has it"
    raise ValueError(f"metric {name!r} needs the column {column!r}: use {need}")


def metric_columns(metric: str, available: list[str]) -> tuple[str, str]:
    """``(own, inclusive)`` columns of ``metric``: a declared quantity's (``params``:
    ``self_params``/``params``), else ``self_<metric>``/``<metric>`` partners when present,
    else the column itself for both."""
    metric = current_name(metric)
    chosen = next((q for q in _QUANTITIES.get(metric, ()) if q.inclusive in available), None)
    if chosen is not None:
        return chosen.own, chosen.inclusive
    if metric not in available:
        raise KeyError(f"unknown column {metric!r}; choose ops, macs, flops, params or one of "
                       f"{available}")
    if f"self_{metric}" in available:
        return f"self_{metric}", metric
    return metric, metric


def is_extra_column(name: str) -> bool:
    """A quantity that is not one of this package's own columns (a listener's, a timing or
    memory column, registered or not): views show it without being told."""
    spec = column_spec(name)
    return name not in BUILTIN and spec.kind in ADDITIVE_KINDS | {"number"} and not spec.detail
