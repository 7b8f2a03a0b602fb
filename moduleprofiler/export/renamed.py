"""Column names that 0.2 gave new meanings, and the old names still read.

One own/inclusive rule holds for every column: a bare name (``ops``, ``params``,
``forward_ms``) is the module's whole subtree, its call and every call made inside it;
``self_`` is the module's own share (``self_ops``, ``self_params``, ``self_forward_ms``), and
the ``self_`` rows of a table add up to the model's total. Up to 0.1, counts followed the
opposite rule (``ops`` own, ``inclusive_ops`` inclusive) and the own parameters were called
``own_params``; up to schema version 3 of the JSON files, the last own-only columns (``launches``,
``recompute_ops``, ``collectives``, ``comm_bus_bytes``, ``comm_ms``, ``roofline_ms``...) had no
inclusive twin and were own under their bare names (:data:`OWN_ONLY`).

Selecting a column by an old name (a view's ``columns``, ``sort_by``, ``pct_of``, ``top(by=)``,
the command line's ``--what`` and ``--sort``) still works, with a ``DeprecationWarning`` naming
the new column (:func:`current_name`); ``ops`` (``launches``...) itself cannot warn, its meaning
changed. A JSON document written before (schema version 3 or less) is read under the new names
with the same numbers (:func:`upgraded_names`).

A name whose quantity moved to a column on another scale (:data:`RESCALED`: ``ops_fraction``,
a 0-1 share, is ``self_ops_pct``, 0-100, as every view's share column) cannot be read under
its old name without lying by a factor of 100: selecting it raises
:class:`~moduleprofiler.errors.RescaledColumnError` naming the new column.

A table that is no profile's view (``ExpertLoad.to_df()``, ``KVCacheSize.to_df()``,
``DistributedProfile.stragglers()``) and a dict (``DistributedProfile.totals()``,
``LatencyResult.to_dict()``) whose names changed answer the old ones themselves
(:func:`renamed_columns`, :class:`RenamedKeysDict`), with the same warning.
"""

from __future__ import annotations

import copy
import functools
import inspect
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, ClassVar, Literal, NamedTuple

import pandas as pd
from pandas.core import indexing as pandas_indexing
from pandas.core.groupby import DataFrameGroupBy
from pandas.plotting import PlotAccessor

from moduleprofiler.deprecation import warn_deprecated
from moduleprofiler.errors import RescaledColumnError

PAIRED: tuple[str, ...] = (
    "ops", "macs", "flops", "backward_ops", "backward_macs", "backward_flops",
    "moved_bytes", "backward_moved_bytes", "comm_bytes", "backward_comm_bytes",
)
"""The quantities whose own and inclusive columns were ``X`` and ``inclusive_X``: now
``self_X`` and ``X``."""

RENAMED: dict[str, str] = {
    **{f"inclusive_{name}": name for name in PAIRED},
    **{f"inclusive_{name}_pct": f"{name}_pct" for name in PAIRED},
    "own_params": "self_params",
    "own_params_pct": "self_params_pct",
}
"""Old name -> new name, for the names that no longer exist (selecting one warns)."""

SCHEMA_2_NAMES: dict[str, str] = {
    **{name: f"self_{name}" for name in PAIRED},
    **{f"inclusive_{name}": name for name in PAIRED},
    "own_params": "self_params",
}
"""How the fields and columns of a document of schema version 2 or less are named now (an
own ``ops`` there is ``self_ops``)."""


OWN_ONLY: tuple[str, ...] = (
    "launches", "backward_launches",
    "recompute_moved_bytes", "recompute_ops", "recompute_macs", "recompute_flops",
    "collectives", "backward_collectives", "comm_bus_bytes", "backward_comm_bus_bytes",
    "comm_ms", "backward_comm_ms", "roofline_ms", "backward_roofline_ms",
)
"""The quantities that were own under their bare name ``X`` until schema version 3: now
``self_X``, and ``X`` is the call with every call inside it."""

SCHEMA_3_NAMES: dict[str, str] = {name: f"self_{name}" for name in OWN_ONLY}
"""How the fields and columns of a document of schema version 3 are named now (an own
``launches`` there is ``self_launches``); a document of version 2 or less is renamed by
:data:`SCHEMA_2_NAMES` first."""


RESCALED: dict[str, tuple[str, str]] = {
    "ops_fraction": ("self_ops_pct", "a type's share of the model's own ops was 0-1 under "
                                     "ops_fraction; self_ops_pct holds it in percent, 0-100"),
}
"""Old name -> (new name, what changed), for names retired in 0.2 whose quantity is now on
another scale: no alias could hold the old numbers under the old name honestly, so selecting
one is a :class:`~moduleprofiler.errors.RescaledColumnError`."""


def current_name(name: str) -> str:
    """``name``, or the column an old name became (with a ``DeprecationWarning`` naming it);
    a :class:`~moduleprofiler.errors.RescaledColumnError` naming the new column for a name
    whose quantity changed scale (:data:`RESCALED`)."""
    rescaled = RESCALED.get(name)
    if rescaled is not None:
        column, why = rescaled
        raise RescaledColumnError(f"the column {name!r} is now {column!r}: {why} (select "
                                  f"{column!r}, or divide it by 100)", name, column)
    new = RENAMED.get(name)
    if new is None:
        return name
    warn_deprecated(f"the column name {name!r}",
                    f"use {new!r} (a bare name is the module with everything inside it, "
                    "self_ its own share)")
    return new


def current_names(names: Iterable[str], argument: str = "columns") -> list[str]:
    """:func:`current_name` of each of ``names``; a bare string (which would be read letter by
    letter, ``"ops"`` as ``["o", "p", "s"]``) is a ``TypeError`` naming ``argument``."""
    if isinstance(names, str):
        raise TypeError(f"{argument} must be a list of column names, got the str {names!r} "
                        f"(one column: [{names!r}])")
    return [current_name(name) for name in names]


def upgraded_names(mapping: Mapping[str, Any], version: int) -> dict[str, Any]:
    """A copy of ``mapping`` (a record, module, metrics or column table of a document of
    schema ``version``, 3 or less) with its keys named as they are now."""
    renames = (SCHEMA_2_NAMES, SCHEMA_3_NAMES) if version < 3 else (SCHEMA_3_NAMES,)
    out = dict(mapping)
    for names in renames:
        out = {names.get(key, key): value for key, value in out.items()}
    return out


class RenamedColumnsFrame(pd.DataFrame):
    """A table whose columns were renamed: the old names still answer, each with a
    ``DeprecationWarning`` naming the new column (:func:`warn_deprecated`), until
    :data:`~moduleprofiler.deprecation.REMOVAL_VERSION`, wherever pandas takes a column name:
    selection (``frame["layer"]``, ``frame[["layer", "tokens"]]``, ``frame.layer``,
    ``frame.get("layer")``), writing (``frame["layer"] = ...``, ``frame.layer = ...``,
    ``del frame["layer"]``), ``frame.loc[:, "layer"]`` and ``frame.at[0, "layer"]`` (reading
    and writing), ``"layer" in frame``, ``frame.plot(x="layer")``, every method of
    :data:`COLUMN_ARGUMENTS` (``groupby("layer")``, ``drop(columns="layer")``,
    ``query("layer == 'moe'")``, ``droplevel("layer")``...) and what ``groupby`` returns
    (``groupby("module")[["layer"]]``, ``.agg({"layer": "sum"})``).

    One rule everywhere (:meth:`_new_name`): an old name stands for its new column where the
    frame holds the new column and no column of the old name; a column the frame holds under
    the old name (a user's own) wins. ``frame.columns`` lists the new names only: holding a
    column under both names would show one quantity twice; what reads them (``to_dict()``'s
    keys, ``frame.columns.get_loc``) takes and gives the new names only. What pandas builds
    from the table (a copy, a slice, a ``groupby`` result) is a renamed table too, under the
    new names; ``pd.DataFrame(frame)`` is a plain one."""

    _metadata: ClassVar[list[str]] = ["renamed", "owner", "rescaled"]  # kept on copies
    renamed: dict[str, str]
    """Old column name -> new one."""
    rescaled: frozenset[str]
    """Old names of :data:`RESCALED` the table refuses with a
    :class:`~moduleprofiler.errors.RescaledColumnError` (a profile's frames)."""
    owner: str
    """What made the table, for the warning (``"ExpertLoad.to_df()"``)."""

    @property
    def _constructor(self) -> type[pd.DataFrame]:
        # pandas builds copies, slices and results through it, then copies _metadata onto them
        return RenamedColumnsFrame

    def _holds(self, name: str) -> bool:
        """Whether ``name`` is a column of the table or the name of a level of its index (where
        ``query``, ``groupby`` and ``merge`` find names too)."""
        return name in self.columns or name in self.index.names

    def _new_name(self, key: object, seen: dict[str, object] | None = None) -> object:
        """``key``, or the new column an old name stands for (with the warning): the one rule
        every accessor and method follows. ``seen`` holds the names one call has already
        answered, so that a name it takes twice warns once."""
        if not isinstance(key, str):
            return key
        if seen is not None:
            if key not in seen:
                seen[key] = self._new_name(key)
            return seen[key]
        if key in (self.__dict__.get("rescaled") or ()) and key not in self.columns:
            current_name(key)  # a name whose quantity is on another scale now: refused
        new = (self.__dict__.get("renamed") or {}).get(key)
        if new is None or self._holds(key) or not self._holds(new):
            return key
        warn_deprecated(f"{self.__dict__.get('owner') or 'the table'}'s column {key!r}",
                        f"use {new!r}")
        return new

    def _new_names(self, key: Any, seen: dict[str, object] | None = None) -> Any:
        """``key`` with its old column names replaced (a name, or a list or tuple of names)."""
        if isinstance(key, (list, tuple)):  # frame[["layer", "tokens"]], groupby(["layer", ...])
            return type(key)(self._new_name(item, seen) for item in key)
        return self._new_name(key, seen)

    def _new_expression(self, expression: str, seen: dict[str, object]) -> str:
        """A ``query``/``eval`` expression with its old column names (bare or backticked)
        replaced; names in string literals, attributes (``.layer``) and local variables
        (``@layer``) are left alone."""

        def replace(match: re.Match[str]) -> str:
            quoted, name = match["quoted"], match["name"]
            if match["string"] is not None or match["prefix"]:
                return match[0]
            new = self._new_name(quoted if quoted is not None else name, seen)
            if new in (quoted, name):
                return match[0]
            return f"`{new}`" if quoted is not None else str(new)

        return _EXPRESSION_TOKENS.sub(replace, expression)

    def _with_new_names(self, method: str, args: tuple[Any, ...],
                        kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The arguments of the DataFrame ``method`` with the old column names in those that
        name columns (:data:`COLUMN_ARGUMENTS`), given by position or keyword, replaced; an
        argument that names columns on one axis only is left alone on the other, one that
        names another table's columns (``right_on``) is that table's to answer."""
        positions = _positions(method)
        given, named = list(args), dict(kwargs)
        # a name given twice (pivot_table's values and aggfunc) warns once, per table
        seen: dict[int, dict[str, object]] = {}

        def value(name: str) -> Any:  # the argument as given, or its default
            if name in named:
                return named[name]
            position = positions.get(name)
            if position is not None and position < len(given):
                return given[position]
            return _defaults(method).get(name)

        for name, argument in COLUMN_ARGUMENTS[method].items():
            if argument.axes is not None and value("axis") not in argument.axes:
                continue
            table = self if argument.table is None else value(argument.table)
            if not isinstance(table, RenamedColumnsFrame):  # a plain table: its own names
                continue
            names = seen.setdefault(id(table), {})
            if argument.form == "keywords":  # assign(layer=...): every keyword is a column
                named = {str(table._new_name(key, names)): item for key, item in named.items()}
            elif argument.form == "aggregations":  # agg(total=("layer", "sum"))
                if value("func") is None:  # named aggregation: pandas' rule too
                    named = {key: table._new_aggregation(item, names)
                             for key, item in named.items()}
            elif name in named:
                named[name] = table._new_argument(argument.form, named[name], names)
            elif positions.get(name, len(given)) < len(given):
                given[positions[name]] = table._new_argument(argument.form,
                                                             given[positions[name]], names)
        return tuple(given), named

    def _new_argument(self, form: str, value: Any, seen: dict[str, object]) -> Any:
        """``value`` of an argument of ``form`` (:class:`ColumnArgument`) with its old column
        names replaced."""
        if form == "mapping":  # a dict's keys; a Series or callable is left alone
            return ({self._new_name(key, seen): item for key, item in value.items()}
                    if isinstance(value, Mapping) else value)
        if form == "expression":
            return self._new_expression(value, seen) if isinstance(value, str) else value
        return self._new_names(value, seen)

    def _new_aggregation(self, item: Any, seen: dict[str, object]) -> Any:
        """A named aggregation's ``(column, function)`` pair or ``pd.NamedAgg`` with an old
        column name replaced; any other keyword value is left alone."""
        if isinstance(item, pd.NamedAgg):
            column = self._new_name(item.column, seen)
            if column == item.column:
                return item
            if hasattr(item, "_replace"):  # pandas 2: a namedtuple
                return item._replace(column=column)
            renamed: Any = copy.copy(item)  # pandas 3: a class with the function's arguments
            renamed.column = column
            return renamed
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)):
            return item
        column = self._new_name(item[0], seen)
        return item if column == item[0] else (column, item[1])

    def __getitem__(self, key: Any) -> Any:
        return super().__getitem__(self._new_names(key))

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(self._new_names(key), value)

    # pandas-stubs mark it final; an old name is only added to what a DataFrame answers
    def __delitem__(self, key: Any) -> None:  # type: ignore[misc]
        super().__delitem__(self._new_name(key))

    # pandas-stubs mark it final; an old name is only added to what a DataFrame answers
    def __contains__(self, key: object) -> bool:  # type: ignore[misc]
        renamed = self.__dict__.get("renamed") or {}
        if isinstance(key, str) and renamed.get(key) in self.columns:  # warns: it answers
            return super().__contains__(self._new_name(key))
        return super().__contains__(key)

    # pandas-stubs mark it final; the old names are only added to what a DataFrame answers
    def __getattr__(self, name: str) -> Any:  # type: ignore[misc]
        if name.startswith("_") or name in self._metadata:
            return super().__getattr__(name)
        new = self._new_name(name)
        return super().__getattr__(new) if isinstance(new, str) else new

    # pandas-stubs mark it final; an old name is only added to what a DataFrame answers
    def __setattr__(self, name: str, value: Any) -> None:  # type: ignore[misc]
        # pandas writes a column for a name it holds and makes an attribute of any other
        # (frame.old = ... would hide the column behind a new attribute)
        if name in (self.__dict__.get("renamed") or ()) and not hasattr(type(self), name) \
                and name not in self.__dict__:  # as frame.old reads: where no attribute is
            name = str(self._new_name(name))
        super().__setattr__(name, value)

    @property
    def loc(self) -> Any:
        """``DataFrame.loc``, whose column part (``frame.loc[rows, "layer"]``) answers the old
        names too."""
        if _LocIndexer is None:  # a pandas without that private class: plain ``.loc``
            return super().loc
        return _RenamedLoc("loc", self)

    @property
    def at(self) -> Any:
        """``DataFrame.at``, whose column part (``frame.at[row, "layer"]``) answers the old
        names too."""
        if _AtIndexer is None:  # a pandas without that private class: plain ``.at``
            return super().at
        return _RenamedAt("at", self)

    @property
    def plot(self) -> Any:
        """``DataFrame.plot`` (and ``plot.scatter``, ``plot.bar``...), whose ``x``, ``y``,
        ``by``, ``column``, ``c``, ``s`` and ``C`` answer the old names too."""
        return _RenamedPlot(self)


class ColumnArgument(NamedTuple):
    """How an argument of a DataFrame method names columns (or index levels)."""

    form: Literal["names", "mapping", "expression", "keywords", "aggregations"] = "names"
    """``names``: a name or a list of names; ``mapping``: a dict's keys (``rename(columns=)``,
    ``astype``); ``expression``: the identifiers of a ``query``/``eval`` string;
    ``keywords``: the names of the keyword arguments (``assign``); ``aggregations``: the
    columns of the keyword arguments' ``(column, function)`` pairs (named aggregation,
    ``agg(total=("layer", "sum"))``)."""
    axes: tuple[object, ...] | None = None
    """Where the argument names columns on one axis only: the values of the call's ``axis``
    (given, or its default) under which it does (``drop("layer", axis=1)``)."""
    table: str | None = None
    """Where the argument names the columns of another table of the call (``merge``'s
    ``right_on`` names ``right``'s): that argument. Its old names are answered by that table's
    own rule where it is a renamed table too, and left alone where it is not."""


_NAMES = ColumnArgument()
_MAPPING = ColumnArgument("mapping")
_ON_COLUMNS = (1, "columns")  # the call works on the columns: its labels are column names
_ON_ROWS = (0, "index", "rows")  # the call works along the rows: its subset is column names

_LEVELS = ColumnArgument(axes=_ON_ROWS)  # level names of the index (the row axis)
_AGGREGATIONS = ColumnArgument("aggregations")

COLUMN_ARGUMENTS: dict[str, dict[str, ColumnArgument]] = {
    "groupby": {"by": _NAMES, "level": _NAMES},
    "sort_values": {"by": ColumnArgument(axes=_ON_ROWS)},
    "set_index": {"keys": _NAMES},
    "sort_index": {"level": _LEVELS},
    "reset_index": {"level": _NAMES},
    "droplevel": {"level": _LEVELS},
    "swaplevel": {"i": _LEVELS, "j": _LEVELS},
    "reorder_levels": {"order": _LEVELS},
    "unstack": {"level": _NAMES},
    "drop": {"columns": _NAMES, "labels": ColumnArgument(axes=_ON_COLUMNS),
             "level": _LEVELS},
    "rename": {"columns": _MAPPING, "mapper": ColumnArgument("mapping", _ON_COLUMNS)},
    "reindex": {"columns": _NAMES, "labels": ColumnArgument(axes=_ON_COLUMNS)},
    "filter": {"items": ColumnArgument(axes=(None, *_ON_COLUMNS)),
               "arg": ColumnArgument(axes=(None, *_ON_COLUMNS))},
    "query": {"expr": ColumnArgument("expression")},
    "eval": {"expr": ColumnArgument("expression")},
    "assign": {"kwargs": ColumnArgument("keywords")},
    "merge": {"on": _NAMES, "left_on": _NAMES,
              "right_on": ColumnArgument(table="right")},
    "join": {"on": _NAMES},
    "pivot": {"columns": _NAMES, "index": _NAMES, "values": _NAMES},
    "pivot_table": {"values": _NAMES, "index": _NAMES, "columns": _NAMES,
                    "aggfunc": _MAPPING},
    "melt": {"id_vars": _NAMES, "value_vars": _NAMES},
    "explode": {"column": _NAMES},
    "nlargest": {"columns": _NAMES},
    "nsmallest": {"columns": _NAMES},
    "drop_duplicates": {"subset": _NAMES},
    "duplicated": {"subset": _NAMES},
    "value_counts": {"subset": _NAMES},
    "dropna": {"subset": ColumnArgument(axes=_ON_ROWS)},
    "fillna": {"value": ColumnArgument("mapping", (None, *_ON_ROWS))},
    "agg": {"func": ColumnArgument("mapping", _ON_ROWS), "kwargs": _AGGREGATIONS},
    "aggregate": {"func": ColumnArgument("mapping", _ON_ROWS), "kwargs": _AGGREGATIONS},
    "transform": {"func": ColumnArgument("mapping", _ON_ROWS)},
    "astype": {"dtype": _MAPPING},
    "round": {"decimals": _MAPPING},
    "pop": {"item": _NAMES},
    "xs": {"key": ColumnArgument(axes=_ON_COLUMNS), "level": _LEVELS},
    "hist": {"column": _NAMES, "by": _NAMES},
    "boxplot": {"column": _NAMES, "by": _NAMES},
    "to_csv": {"columns": _NAMES},
    "to_excel": {"columns": _NAMES},
    "to_string": {"columns": _NAMES, "formatters": _MAPPING},
    "to_html": {"columns": _NAMES, "formatters": _MAPPING},
    "to_latex": {"columns": _NAMES, "formatters": _MAPPING},
    "plot": {name: _NAMES for name in ("x", "y", "by", "column", "c", "s", "C")},
    "DataFrameGroupBy.agg": {"func": _MAPPING, "kwargs": _AGGREGATIONS},
    "DataFrameGroupBy.aggregate": {"func": _MAPPING, "kwargs": _AGGREGATIONS},
    "DataFrameGroupBy.value_counts": {"subset": _NAMES},
}
"""The DataFrame methods of a :class:`RenamedColumnsFrame` whose arguments answer the old
column names: method -> the arguments that name columns (or levels of the index, where the
new name is one). ``DataFrameGroupBy.<method>`` is a method of what the table's ``groupby``
returns, whose names are the table's."""

_EXPRESSION_TOKENS = re.compile(
    r"""(?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")"""  # a string literal: left alone
    r"|`(?P<quoted>[^`]*)`"  # a backticked name
    r"|(?P<prefix>[.@]\s*)?(?<!\w)(?P<name>[^\W\d]\w*)")  # a bare name, .attribute or @local
"""The parts of a ``query``/``eval`` expression that can be column names."""


def _plot_call(frame: object, x: object = None, y: object = None, /, *args: object,
               **kwargs: object) -> None:
    """Where ``DataFrame.plot(...)`` takes its ``x`` and ``y`` by position (its accessor has
    no signature of its own)."""


_GROUPBY = "DataFrameGroupBy."
"""How :data:`COLUMN_ARGUMENTS` names a method of what the table's ``groupby`` returns."""


def _pandas_method(method: str) -> Callable[..., Any]:
    """The pandas function of the :data:`COLUMN_ARGUMENTS` entry ``method``."""
    if method.startswith(_GROUPBY):
        return getattr(DataFrameGroupBy, method.removeprefix(_GROUPBY))
    return getattr(pd.DataFrame, method)


@functools.cache
def _signature(method: str) -> inspect.Signature:
    return inspect.signature(_plot_call if method == "plot" else _pandas_method(method))


@functools.cache
def _positions(method: str) -> Mapping[str, int]:
    """Where each argument of the pandas ``method`` can be given by position (after the
    frame itself); read on every call of the method, made once."""
    positional = [parameter.name for parameter in _signature(method).parameters.values()
                  if parameter.kind in (inspect.Parameter.POSITIONAL_ONLY,
                                        inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    return MappingProxyType({name: position for position, name in enumerate(positional[1:])})


@functools.cache
def _defaults(method: str) -> Mapping[str, Any]:
    """The defaults of the pandas ``method``'s arguments (made once)."""
    return MappingProxyType({
        name: parameter.default for name, parameter in _signature(method).parameters.items()
        if parameter.default is not inspect.Parameter.empty})


_READS_CALLERS_NAMES = ("query", "eval")
"""The methods whose expression reads the caller's variables (``@threshold``)."""


class _RenamedGroupBy(DataFrameGroupBy):
    """What a :class:`RenamedColumnsFrame`'s ``groupby`` returns: its selection
    (``[old]``, ``[[old, ...]]``, ``.old``) and the methods of :data:`COLUMN_ARGUMENTS`
    named ``DataFrameGroupBy.<method>`` answer the table's old names by the table's rule
    (pandas' own reads ``self.obj.columns``, which lists the new names only)."""

    def __getitem__(self, key: Any) -> Any:
        frame = self.obj
        return super().__getitem__(frame._new_names(key)
                                   if isinstance(frame, RenamedColumnsFrame) else key)

    def __getattr__(self, attr: str) -> Any:
        frame = self.__dict__.get("obj")  # absent while pandas builds the object
        if isinstance(frame, RenamedColumnsFrame) and not attr.startswith("_"):
            attr = str(frame._new_name(attr))
        return super().__getattr__(attr)


def _answering_old_names(method: str) -> Callable[..., Any]:
    """The pandas ``method``, its column-name arguments answering the old names."""
    pandas_method = _pandas_method(method)

    def answering(self: Any, *args: Any, **kwargs: Any) -> Any:
        if method in _READS_CALLERS_NAMES and "local_dict" not in kwargs \
                and "global_dict" not in kwargs:
            # pandas reads @names from the frame `level` calls up, which is this one now:
            # hand it the names of the line that called
            caller = sys._getframe(1 + kwargs.pop("level", 0))
            kwargs = {**kwargs, "local_dict": caller.f_locals, "global_dict": caller.f_globals}
        frame = self.obj if isinstance(self, DataFrameGroupBy) else self
        if isinstance(frame, RenamedColumnsFrame):
            args, kwargs = frame._with_new_names(method, args, kwargs)
        result = pandas_method(self, *args, **kwargs)
        if type(result) is DataFrameGroupBy:
            # pandas builds it in DataFrame.groupby with no constructor to override (and its
            # arguments differ between versions): the subclass adds methods, no state
            result.__class__ = _RenamedGroupBy
        return result

    answering.__name__ = answering.__qualname__ = method.removeprefix(_GROUPBY)
    answering.__doc__ = (f"``{method if method.startswith(_GROUPBY) else 'DataFrame.' + method}``"
                         f", whose {', '.join(COLUMN_ARGUMENTS[method])} answer the old "
                         "column names too.")
    return answering


for _method in COLUMN_ARGUMENTS:
    if _method.startswith(_GROUPBY):
        setattr(_RenamedGroupBy, _method.removeprefix(_GROUPBY), _answering_old_names(_method))
    elif _method != "plot":  # an accessor: RenamedColumnsFrame.plot
        setattr(RenamedColumnsFrame, _method, _answering_old_names(_method))


_LocIndexer: Any = getattr(pandas_indexing, "_LocIndexer", None)
"""The indexer ``DataFrame.loc`` returns (pandas-stubs declare none of its methods); private
to pandas, so read with a fallback: where it is gone, ``.loc`` answers the new names only and
``import moduleprofiler`` still works."""
_AtIndexer: Any = getattr(pandas_indexing, "_AtIndexer", None)
"""The indexer ``DataFrame.at`` returns, read as :data:`_LocIndexer` is."""


class _RenamedColumnKey:
    """The column part of a ``[rows, columns]`` key given the new names first: what the
    renamed ``.loc`` and ``.at`` add to pandas' own indexers."""

    obj: Any

    def _new_key(self, key: Any) -> Any:
        frame = self.obj
        if isinstance(key, tuple) and len(key) == 2 and isinstance(frame, RenamedColumnsFrame):
            return key[0], frame._new_names(key[1])
        return key

    def __getitem__(self, key: Any) -> Any:
        return super().__getitem__(self._new_key(key))  # type: ignore[misc]

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(self._new_key(key), value)  # type: ignore[misc]


# subclasses of pandas' own indexers, so that pandas' code using frame.loc keeps working
class _RenamedLoc(_RenamedColumnKey, _LocIndexer or object):  # type: ignore[misc]
    """``.loc`` of a :class:`RenamedColumnsFrame`."""


class _RenamedAt(_RenamedColumnKey, _AtIndexer or object):  # type: ignore[misc]
    """``.at`` of a :class:`RenamedColumnsFrame`."""


class _RenamedPlot(PlotAccessor):
    """``.plot`` of a :class:`RenamedColumnsFrame`: ``plot.scatter(...)`` and the other kinds
    call it too."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        frame = getattr(self, "_parent", None)  # the frame (pandas-stubs do not declare it)
        if isinstance(frame, RenamedColumnsFrame):
            args, kwargs = frame._with_new_names("plot", args, kwargs)
        return super().__call__(*args, **kwargs)


def renamed_columns(frame: pd.DataFrame, renamed: dict[str, str],
                    owner: str, rescaled: Iterable[str] = ()) -> RenamedColumnsFrame:
    """``frame`` as a :class:`RenamedColumnsFrame` that answers the ``renamed`` columns' old
    names (old -> new) with a ``DeprecationWarning`` and refuses the ``rescaled`` ones (names
    of :data:`RESCALED`) naming their new column; ``owner`` names what made it."""
    out = RenamedColumnsFrame(frame)
    out.renamed = dict(renamed)
    out.owner = owner
    out.rescaled = frozenset(rescaled)
    return out


class RenamedKeysDict(dict[str, Any]):
    """A dict whose keys were renamed: reading one by its old name (``totals["total_macs"]``,
    ``totals.get("total_macs")``) still gives the value under its new name, with a
    ``DeprecationWarning`` naming it, until
    :data:`~moduleprofiler.deprecation.REMOVAL_VERSION`; everything else is a plain dict's
    (the old names are no keys: ``list(totals)`` holds the new ones only)."""

    def __init__(self, values: dict[str, Any], renamed: dict[str, str], owner: str) -> None:
        super().__init__(values)
        self.renamed = dict(renamed)
        """Old key -> new one."""
        self.owner = owner
        """What made the dict, for the warning (``"DistributedProfile.totals()"``)."""

    def _new_key(self, key: str) -> str:
        if isinstance(key, str) and key in self.renamed and not super().__contains__(key):
            warn_deprecated(f"{self.owner}'s key {key!r}", f"use {self.renamed[key]!r}")
            return self.renamed[key]
        return key

    def __getitem__(self, key: str) -> Any:
        return super().__getitem__(self._new_key(key))

    def get(self, key: str, default: Any = None) -> Any:
        """The value of ``key`` (its new name's, for an old one, with the warning)."""
        return super().get(self._new_key(key), default)
