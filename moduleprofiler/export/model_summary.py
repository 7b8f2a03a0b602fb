"""Several profiles side by side: one row per model (parameters, MACs, FLOPs, ops, and the
whole-model value of any timing or memory column), for comparing models in one table."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pandas as pd

from moduleprofiler.export.columns import FLOPS, MACS, column_spec
from moduleprofiler.export.frame import count_series, module_frame
from moduleprofiler.export.select import (
    column_total,
    extra_columns,
    lower_bound_causes,
    lower_bounds_shown,
)
from moduleprofiler.export.view import View
from moduleprofiler.records import ProfileData, model_name
from moduleprofiler.summary_row import model_row

if TYPE_CHECKING:
    from moduleprofiler.records import ProfileData as Profile

SUMMARY_COLUMNS = ("model", "params", "macs", "flops", "ops")
_LABELS = {"params": "params", "trainable_params": "trainable", "macs": MACS,
           "flops": FLOPS, "ops": "ops"}
"""Whole-model totals, so no "self" in their headers."""


def _named(profiles: Mapping[str, Profile] | Iterable[Profile]) -> list[tuple[str, Profile]]:
    """``profiles`` as (name, profile) pairs: a mapping's keys, or each model's type
    (``Sequential``, ``Sequential #2``, ...).

    Raises:
        TypeError: ``profiles`` is one profile, a string or no collection, or holds
            something other than a profile (the message names its key or position).
        ValueError: ``profiles`` is empty.
    """
    if isinstance(profiles, (ProfileData, str, bytes)) or not isinstance(profiles, Iterable):
        hint = (" (one profile: summary([profile]); its own one-row frame is "
                "profile.summary())" if isinstance(profiles, ProfileData) else "")
        raise TypeError(f"profiles must be a mapping of names to profiles or a list of "
                        f"profiles, got {type(profiles).__name__}{hint}")
    pairs = (list(profiles.items()) if isinstance(profiles, Mapping)
             else list(enumerate(profiles)))
    if not pairs:
        raise ValueError("profiles (argument profiles) is empty: give at least one profile")
    for key, profile in pairs:
        if not isinstance(profile, ProfileData):
            raise TypeError(f"profiles[{key!r}] must be a profile (the result of a pass), "
                            f"got {type(profile).__name__}")
    if isinstance(profiles, Mapping):
        return [(str(name), profile) for name, profile in pairs]
    named: list[tuple[str, Profile]] = []
    seen: dict[str, int] = {}
    for _, profile in pairs:
        base = model_name(profile)
        seen[base] = seen.get(base, 0) + 1
        named.append((base if seen[base] == 1 else f"{base} #{seen[base]}", profile))
    return named


def _whole_model(modules: pd.DataFrame, column: str) -> Any:
    """The model's value of ``column``: the sum over modules of an own quantity, else the
    root's value (an inclusive total, or a statistic such as a latency's spread)."""
    if column_spec(column).inclusive is False:
        return column_total(modules, column, {})
    roots = pd.to_numeric(modules.loc[modules["depth"] == 0, column], errors="coerce")
    value = roots.sum(min_count=1) if len(roots) > 1 else (roots.iloc[0] if len(roots) else None)
    return None if value is None or pd.isna(value) else value


def summary_frame(profiles: Mapping[str, Profile] | Iterable[Profile]) -> pd.DataFrame:
    """One row per profile: ``model``, ``params``, ``trainable_params``, ``macs``, ``flops``
    (2 x MACs), ``ops``, ``calls``, ``modules``, ``complete`` and ``ops_complete`` (whether
    the forward counts are exact, as a module row's flags), ``backward_complete`` where a
    profile ran a backward pass, then the whole-model total of every timing/memory column
    the profiles carry."""
    return _frame(_named(profiles))


def _frame(named: Sequence[tuple[str, Profile]]) -> pd.DataFrame:
    """:func:`summary_frame` of profiles already named."""
    rows: list[dict[str, Any]] = []
    for name, profile in named:
        modules = module_frame(profile)
        row: dict[str, Any] = {
            **model_row(profile),
            "model": name,
            "ops": profile.total_ops,  # None where the pass counted nothing
            "calls": len(profile.records),
            "modules": len(profile.modules),
            # the flags of the forward counts, as a module row's: complete for the ops and
            # MACs, ops_complete for the ops alone; a backward pass's beside them
            "complete": profile.macs_complete,
            "ops_complete": profile.ops_complete,
        }
        if profile.backward:
            row["backward_complete"] = profile.backward_complete
        for column in extra_columns(modules):
            row[column] = _whole_model(modules, column)
        rows.append(row)
    frame = pd.DataFrame(rows)
    for column in ("params", "trainable_params", "macs", "flops", "ops"):
        if column in frame:
            frame[column] = count_series(list(frame[column]), column)
    if "backward_complete" in frame:  # <NA> for a model profiled without a backward pass
        frame["backward_complete"] = frame["backward_complete"].astype("boolean")
    return frame


def summary_view(profiles: Mapping[str, Profile] | Iterable[Profile],
                 columns: Sequence[str] | None = None) -> View:
    """:func:`summary_frame` as a view (default columns: model, params, MACs, FLOPs, ops,
    then the whole-model timing/memory totals such as a median latency; statistics such as
    a standard deviation are in the frame, shown when named in ``columns``).
    ``view.to_latex(caption=..., label=...)`` gives the one-row-per-model table of a paper."""
    named = _named(profiles)  # once: an iterator of profiles is read once
    frame = _frame(named)
    extras = [c for c in frame.columns if c not in SUMMARY_COLUMNS
              and column_spec(c).kind in ("time", "bytes") and column_spec(c).inclusive]
    shown = list(columns) if columns is not None else [*SUMMARY_COLUMNS, *extras]
    missing = [c for c in shown if c not in frame]
    if missing:
        raise KeyError(f"unknown column(s) {missing}; available: {list(frame.columns)}")
    if "model" not in shown:
        shown.insert(0, "model")
    overrides = {name: replace(column_spec(name), label=label, aggregation="none")
                 for name, label in _LABELS.items()}
    return View(frame=frame, columns=tuple(shown), kind="summary", title="Model summary",
                overrides=overrides, notes=lower_bound_notes(named))


_BOUNDED = {"ops": "ops", "macs": "MACs", "flops": "FLOPs", "backward": "backward counts",
            "params": "parameters"}
"""What each of :attr:`ProfileData.lower_bounds` makes a lower bound in a summary row."""


def lower_bound_models(profiles: Mapping[str, Profile] | Iterable[Profile],
                       column: str) -> set[str]:
    """The names (as the summary's ``model`` column gives them) of the models whose ``column``
    in the summary is a lower bound: ``params``, ``ops``, ``macs`` or ``flops`` where their
    profile names it in :attr:`~ProfileData.lower_bounds`."""
    return {name for name, profile in _named(profiles)
            if column in lower_bounds_shown(profile)}


def lower_bound_notes(named: Sequence[tuple[str, Profile]]) -> tuple[str, ...]:
    """One note per kind of incompleteness, naming the models whose row it bounds from below
    (a row of totals cannot carry its model's notes: they are in each model's own views)."""
    models: dict[str, list[str]] = {}
    for name, profile in named:
        bounds = lower_bounds_shown(profile)
        if bounds:
            words = [_BOUNDED[total] for total in bounds]
            text = (", ".join(words[:-1]) + " and " if len(words) > 1 else "") + words[-1]
            why = ", or ".join(lower_bound_causes(bounds))
            models.setdefault(f"{text} are lower bounds ({why}", []).append(name)
    return tuple(f"{', '.join(names)}: {text}; each model's own notes say where)"
                 for text, names in models.items())
