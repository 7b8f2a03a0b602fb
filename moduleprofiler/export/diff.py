"""Two profiles of the same model (e.g. one loaded from JSON) module by module: each
quantity before and after, the difference and the ratio."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

import pandas as pd

from moduleprofiler.export.columns import ColumnSpec, column_spec
from moduleprofiler.export.frame import count_series, lower_bound_rows, module_frame
from moduleprofiler.export.renamed import current_names
from moduleprofiler.export.values import plain
from moduleprofiler.export.view import View
from moduleprofiler.records import ProfileData, unknown_work
from moduleprofiler.validate import check_bool

if TYPE_CHECKING:
    from moduleprofiler.records import ProfileData as Profile

COMPARE_COLUMNS = ("params", "macs", "ops")


def compare_view(before: Profile, after: Profile, columns: Sequence[str] = COMPARE_COLUMNS, *,
                 names: tuple[str, str] = ("before", "after"), changed_only: bool = False) -> View:
    """One row per module path of either profile (``named_modules()`` order, modules of
    ``after`` only at the end) with ``<c>_<before>``, ``<c>_<after>``, ``<c>_delta``
    (after - before) and ``<c>_ratio`` (after / before) for each column ``c``.

    ``changed_only`` keeps the rows where some quantity differs (or the module is new or
    gone).

    Raises:
        TypeError: ``before`` or ``after`` is not a profile, ``columns`` is a bare string, or
            ``changed_only`` is not a bool.
        ValueError: ``names`` is not two different non-empty strings other than ``delta``
            and ``ratio`` (the suffixes of the other columns), or ``columns`` names a
            column that holds no number (``output_shapes``, ``ops_source``).
        KeyError: ``columns`` names a column neither profile has.
    """
    for argument, value in (("before", before), ("after", after)):
        if not isinstance(value, ProfileData):
            raise TypeError(f"{argument} must be a profile (the result of a pass), got "
                            f"{type(value).__name__}")
    columns = current_names(columns)
    check_bool(changed_only, "changed_only")
    if (isinstance(names, str) or not isinstance(names, Sequence) or len(names) != 2
            or not all(isinstance(name, str) and name for name in names)
            or names[0] == names[1] or {*names} & {"delta", "ratio"}):
        raise ValueError(f"names must be two different non-empty strings other than 'delta' "
                         f"and 'ratio', such as ('before', 'after'), got {names!r}")
    first, second = names
    left = module_frame(before).set_index("module")
    right = module_frame(after).set_index("module")
    unknown = [c for c in columns if c not in left or c not in right]
    if unknown:
        raise KeyError(f"cannot compare unknown column(s) {unknown}")
    # a shape or a label has no difference or ratio: its every cell would read unknown
    words = [c for c in columns if not column_spec(c, left[c].dtype).numeric]
    if words:
        raise ValueError(f"columns holds column(s) of no number {words}: compare takes "
                         "quantities such as 'ops', 'params' or a time; to_df('module') of "
                         "each profile shows the others")
    paths = list(dict.fromkeys([*left.index, *right.index]))
    frame = pd.DataFrame({"module": paths})
    # a path whose module changed class shows both (``Linear -> Conv1d``), and counts as
    # changed: one type would present two different modules as one
    before_types = [left["type"].get(p) for p in paths]
    after_types = [right["type"].get(p) for p in paths]
    frame["type"] = [_type_of(a, b) for a, b in zip(before_types, after_types)]
    overrides: dict[str, ColumnSpec] = {}
    shown = ["module", "type"]
    changed = pd.Series(frame["module"].isin(left.index) != frame["module"].isin(right.index)
                        ) | pd.Series([a is not None and b is not None and a != b
                                       for a, b in zip(before_types, after_types)])
    for column in columns:
        spec = column_spec(column)
        a = _numbers(left[column].reindex(paths))
        b = _numbers(right[column].reindex(paths))
        # a lower bound (work without a formula) on either side leaves the difference unknown
        exact = ~(_lower_bounds(left, column, paths) | _lower_bounds(right, column, paths))
        pairs = list(zip(a, b, exact))
        # in Python numbers: counts past 64 bits stay exact, their difference too
        names_of = {first: count_series(a, first), second: count_series(b, second),
                    "delta": count_series([_delta(*pair) for pair in pairs], "delta"),
                    "ratio": pd.Series([_ratio(*pair) for pair in pairs], dtype="Float64")}
        for suffix, values in names_of.items():
            name = f"{column}_{suffix}"
            frame[name] = values.array  # nullable: a float would round counts past 2**53
            kind = "ratio" if suffix == "ratio" else spec.kind
            overrides[name] = replace(spec, name=name, kind=kind, aggregation="none",
                                      label=f"{spec.label} {suffix}")
            shown.append(name)
        changed |= pd.Series([x != y for x, y in zip(a, b)], dtype=bool)
    # per side, whether the row's counts are exact (not shown: the notes say it; a CSV,
    # which holds no notes, writes them where a row is a lower bound)
    flags = []
    for name, side in ((first, left), (second, right)):
        for flag in ("complete", "ops_complete"):  # ops and MACs; the ops alone
            if flag in side:
                flags.append(f"{flag}_{name}")
                frame[flags[-1]] = side[flag].reindex(paths).astype("boolean").to_numpy()
    if changed_only:
        frame = frame[changed.to_numpy()].reset_index(drop=True)
    notes = tuple(f"{name}: {unknown_work(profile)}; where a row holds that work, its "
                  "delta and ratio are unknown"
                  for name, profile in ((first, before), (second, after))
                  if profile.counted and not profile.complete)
    return View(frame=frame, columns=tuple(shown), kind="compare",
                title=f"{first} vs {second}", overrides=overrides, notes=notes,
                exact_flags=tuple(flags))


def _numbers(column: pd.Series) -> list[float | None]:
    """``column``'s values as plain Python numbers (``None``: unknown or not a number), a
    count past 64 bits exact (``pd.to_numeric`` makes it a float)."""
    return [int(value) if isinstance(value, bool)
            else value if isinstance(value, (int, float)) else None
            for value in plain(column)]


def _delta(before: float | None, after: float | None, exact: bool) -> float | None:
    """``after - before``, unknown where either is, or where either is a lower bound."""
    return after - before if before is not None and after is not None and exact else None


def _ratio(before: float | None, after: float | None, exact: bool) -> float | None:
    """``after / before``, unknown where :func:`_delta` is or ``before`` is 0."""
    return after / before if before and after is not None and exact else None


def _lower_bounds(frame: pd.DataFrame, column: str, paths: list[str]) -> pd.Series:
    """Per path, whether ``frame``'s ``column`` is only a lower bound there
    (:func:`~moduleprofiler.export.frame.lower_bound_rows`); a path the profile lacks holds no
    value to bound."""
    return lower_bound_rows(frame, column).reindex(paths, fill_value=False).reset_index(
        drop=True)


def _type_of(before: str | None, after: str | None) -> str | None:
    """The type column of one path: its type, or ``before -> after`` where it changed."""
    if before is None or after is None or before == after:
        return after if after is not None else before
    return f"{before} -> {after}"
