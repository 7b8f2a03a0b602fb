"""Tables whose columns were renamed: the old names still select their column, with the
one deprecation warning of :mod:`moduleprofiler.deprecation`, until its removal release."""

from __future__ import annotations

from typing import Any, ClassVar

import pandas as pd

from moduleprofiler.deprecation import warn_deprecated


class RenamedColumnsFrame(pd.DataFrame):
    """A table whose columns were renamed: selecting one by its old name (``frame["layer"]``,
    ``frame[["layer", "tokens"]]``, ``frame.layer``) still gives the column under its new
    name, with a ``DeprecationWarning`` naming it (:func:`warn_deprecated`). Every other
    operation is a plain ``DataFrame``'s, and what it returns is a plain ``DataFrame``: only
    the old names' selection is kept, until :data:`~moduleprofiler.deprecation.REMOVAL_VERSION`."""

    _metadata: ClassVar[list[str]] = ["renamed", "owner"]  # pandas keeps these on copies
    renamed: dict[str, str]
    """Old column name -> new one."""
    owner: str
    """What made the table, for the warning (``"ExpertLoad.to_df()"``)."""

    @property
    def _constructor(self) -> type[pd.DataFrame]:
        return pd.DataFrame

    def _new_name(self, key: object) -> object:
        renamed = self.__dict__.get("renamed") or {}
        if isinstance(key, str) and key in renamed and key not in self.columns:
            warn_deprecated(f"{self.__dict__.get('owner', 'the table')}'s column {key!r}",
                            f"use {renamed[key]!r}")
            return renamed[key]
        return key

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, list):  # frame[["layer", "tokens"]]
            return super().__getitem__([self._new_name(item) for item in key])
        return super().__getitem__(self._new_name(key))

    # pandas-stubs mark it final; the old names are only added to what a DataFrame answers
    def __getattr__(self, name: str) -> Any:  # type: ignore[misc]
        if name.startswith("_") or name in ("renamed", "owner"):
            return super().__getattr__(name)
        new = self._new_name(name)
        return super().__getattr__(new) if isinstance(new, str) else new


def renamed_columns(frame: pd.DataFrame, renamed: dict[str, str],
                    owner: str) -> RenamedColumnsFrame:
    """``frame`` as a :class:`RenamedColumnsFrame` that answers the ``renamed`` columns' old
    names (old -> new) with a ``DeprecationWarning``; ``owner`` names what made it."""
    out = RenamedColumnsFrame(frame)
    out.renamed = dict(renamed)
    out.owner = owner
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
