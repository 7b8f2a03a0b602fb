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

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

import pandas as pd
from pandas.core import indexing as pandas_indexing

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
    """A table whose columns were renamed: the old names still answer, each access with a
    ``DeprecationWarning`` naming the new column (:func:`warn_deprecated`), until
    :data:`~moduleprofiler.deprecation.REMOVAL_VERSION`, in the accessors code written for
    them uses: selection (``frame["layer"]``, ``frame[["layer", "tokens"]]``, ``frame.layer``,
    ``frame.get("layer")``), ``frame.loc[:, "layer"]`` (reading and writing), ``"layer" in
    frame``, ``frame.groupby("layer")``, ``frame.sort_values("layer")`` and
    ``frame.set_index("layer")``. ``frame.columns`` lists the new names only: holding a
    column under both names would show one quantity twice. Every other operation is a plain
    ``DataFrame``'s, and what any operation returns is a plain ``DataFrame``."""

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
        return pd.DataFrame

    def _new_name(self, key: object) -> object:
        renamed = self.__dict__.get("renamed") or {}
        if isinstance(key, str) and key in (self.__dict__.get("rescaled") or ()) \
                and key not in self.columns:
            current_name(key)  # a name whose quantity is on another scale now: refused
        if isinstance(key, str) and key in renamed and key not in self.columns:
            warn_deprecated(f"{self.__dict__.get('owner', 'the table')}'s column {key!r}",
                            f"use {renamed[key]!r}")
            return renamed[key]
        return key

    def _new_names(self, key: Any) -> Any:
        """``key`` with its old column names replaced (a name, or a list of names)."""
        if isinstance(key, list):  # frame[["layer", "tokens"]], groupby(["layer", "expert"])
            return [self._new_name(item) for item in key]
        return self._new_name(key)

    def _with_new_names(self, argument: str, args: tuple[Any, ...],
                        kwargs: dict[str, Any]) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """A method's arguments with the column names of its first one, ``argument``
        (``by``, ``keys``), given by position or keyword, replaced."""
        if args:
            return (self._new_names(args[0]), *args[1:]), kwargs
        if argument in kwargs:
            return args, {**kwargs, argument: self._new_names(kwargs[argument])}
        return args, kwargs

    def __getitem__(self, key: Any) -> Any:
        return super().__getitem__(self._new_names(key))

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

    @property
    def loc(self) -> Any:
        """``DataFrame.loc``, whose column part (``frame.loc[rows, "layer"]``) answers the old
        names too."""
        if _LocIndexer is None:  # a pandas without that private class: plain ``.loc``
            return super().loc
        return _RenamedLoc("loc", self)

    def groupby(self, *args: Any, **kwargs: Any) -> Any:
        """``DataFrame.groupby``, whose ``by`` answers the old names too."""
        args, kwargs = self._with_new_names("by", args, kwargs)
        return super().groupby(*args, **kwargs)

    def sort_values(self, *args: Any, **kwargs: Any) -> Any:
        """``DataFrame.sort_values``, whose ``by`` answers the old names too."""
        args, kwargs = self._with_new_names("by", args, kwargs)
        return super().sort_values(*args, **kwargs)

    def set_index(self, *args: Any, **kwargs: Any) -> Any:
        """``DataFrame.set_index``, whose ``keys`` answer the old names too."""
        args, kwargs = self._with_new_names("keys", args, kwargs)
        return super().set_index(*args, **kwargs)


_LocIndexer: Any = getattr(pandas_indexing, "_LocIndexer", None)
"""The indexer ``DataFrame.loc`` returns (pandas-stubs declare none of its methods); private
to pandas, so read with a fallback: where it is gone, ``.loc`` answers the new names only and
``import moduleprofiler`` still works."""


# a subclass of pandas' own indexer, so that pandas' code using frame.loc keeps working
class _RenamedLoc(_LocIndexer or object):  # type: ignore[misc]
    """``.loc`` of a :class:`RenamedColumnsFrame`: pandas' own indexer, the column part of a
    ``[rows, columns]`` key given the new names first."""

    def _new_key(self, key: Any) -> Any:
        frame = self.obj
        if isinstance(key, tuple) and len(key) == 2 and isinstance(frame, RenamedColumnsFrame):
            return key[0], frame._new_names(key[1])
        return key

    def __getitem__(self, key: Any) -> Any:
        return super().__getitem__(self._new_key(key))

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(self._new_key(key), value)


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
