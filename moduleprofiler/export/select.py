"""Building views from a profile: which rows (depth, share of the total, name patterns), which
columns, percentages of the total, sorting, and the per-type top-k. All computing of the
export layer happens here or in ``frame.py``; renderers only format."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Literal

import pandas as pd

from moduleprofiler.export.aggregate import is_under
from moduleprofiler.export.columns import column_spec, is_extra_column, metric_columns
from moduleprofiler.export.fold import block_keys
from moduleprofiler.export.frame import call_frame, group_by_type, module_frame
from moduleprofiler.export.names import module_name, module_path
from moduleprofiler.export.renamed import current_name, current_names
from moduleprofiler.export.view import View
from moduleprofiler.records import GROUPING, ancestor_paths, model_name, ran_without
from moduleprofiler.validate import (
    check_bool,
    check_int,
    check_names,
    check_percent,
    check_str,
)

if TYPE_CHECKING:
    from moduleprofiler.records import ProfileData as Profile

Patterns = str | Sequence[str] | None
TableAggregate = Literal["module", "call"]

TREE_COLUMNS = ("params", "output_shapes", "macs", "ops",
                "ops_pct")
TABLE_COLUMNS = ("module", "type", "calls", "params", "output_shapes", "macs",
                 "ops", "ops_pct")
CALL_COLUMNS = ("call", "module", "type", "input_shapes", "output_shapes", "self_ops",
                "self_macs", "ops", "ops_pct")
BACKWARD_COLUMNS = ("backward_macs", "backward_ops")
"""Added to the default columns of a profile with a backward pass."""
FIT_DROP_ORDER = ("input_shapes", "output_shapes", "calls", "modules", "call",
                  "ops", "self_ops", "type")
"""Default columns left out first when a table must fit a width (``View.optional``): the
shapes, the call counts, ops beside MACs, then the type; names, MACs and shares stay."""
WHAT_GROUPS = ("params", "io", "ops", "flops", "backward", "bytes", "time", "memory")
"""The column groups of ``columns_for`` (the CLI's ``--what``)."""


# -- totals and percentages -------------------------------------------------------------------
def profile_totals(profile: Profile) -> dict[str, int | float]:
    """Whole-profile totals of the known quantities, by column name (own and inclusive
    columns of one quantity share the same total)."""
    backward_macs = profile.total_backward_macs
    quantities = {"params": profile.total_params, "ops": profile.total_ops,
                  "macs": profile.total_macs, "flops": profile.total_flops,
                  "backward_ops": profile.total_backward_ops, "backward_macs": backward_macs,
                  "backward_flops": None if backward_macs is None else 2 * backward_macs}
    totals: dict[str, int | float] = {}
    for name, value in quantities.items():
        if value is not None:  # the model's X is its root's; its self_X rows add up to it
            totals[name] = totals[f"self_{name}"] = value
    if profile.modules:
        # the root's tensor sums, each tensor once: the rows' sums count a tensor several
        # modules hold (a tied weight, a shared buffer) at each of them
        root = profile.modules[0]
        totals.update(trainable_params=root.trainable_params, buffers=root.buffers,
                      buffer_bytes=root.buffer_bytes)
        if root.param_bytes is not None:  # unknown (weights that cannot be read): no total
            totals["param_bytes"] = root.param_bytes
    return totals


SHOWN_TOTALS = ("params", "macs", "flops", "ops",
                "backward_macs", "backward_ops")
"""The totals printed under every view of a profile, those of :func:`profile_totals` that
are known (the backward ones only when a backward pass ran)."""


def _totals(profile: Profile) -> dict[str, int | float]:
    # a pass that counted nothing (timing, memory) has no count totals: unknown, not 0
    known = profile_totals(profile)
    return {name: known[name] for name in SHOWN_TOTALS if name in known}


def _bounded_totals(profile: Profile) -> tuple[str, ...]:
    """The totals under a view of ``profile`` that are lower bounds (:attr:`View.lower_bounds`)."""
    bounded = lower_bound_totals(profile)
    return tuple(name for name in _totals(profile) if name in bounded)


def column_total(frame: pd.DataFrame, column: str,
                 known: Mapping[str, int | float | None]) -> int | float | None:
    """The total of ``column``: a known profile total (``None`` in ``known``: none), else the
    largest value of a ``max`` column, the outermost rows' sum for an inclusive one, the sum
    of all rows for an own one, ``None`` when it has no total."""
    if column in known:
        return known[column]
    spec = column_spec(column, frame[column].dtype)
    if spec.inclusive is None or frame.empty:
        return None
    values = pd.to_numeric(frame[column], errors="coerce")
    if spec.aggregation == "max":
        largest = values.max()
        return None if pd.isna(largest) else float(largest)
    if spec.inclusive and "depth" in frame:
        values = values[frame["depth"] == frame["depth"].min()]
    total = values.sum(min_count=1)
    return None if pd.isna(total) else float(total)


def add_percentages(frame: pd.DataFrame, columns: Iterable[str],
                    known: Mapping[str, int | float | None]) -> pd.DataFrame:
    """A copy with ``<c>_pct`` = 100 * ``c`` / total(``c``) for each requested ``<c>_pct``
    whose base column exists (``<NA>`` when the value or the total is unknown or 0)."""
    out = frame.copy()
    for name in columns:
        base = name[: -len("_pct")] if name.endswith("_pct") else None
        if base is None or base not in out or name in out:
            continue
        total = column_total(out, base, known)
        values = pd.to_numeric(out[base], errors="coerce").astype("Float64")
        out[name] = values * 100.0 / total if total else pd.array([pd.NA] * len(out), "Float64")
    return out


_BOUNDED_COLUMNS = {
    "ops": ("ops", "self_ops"), "macs": ("macs", "self_macs"), "flops": ("flops", "self_flops"),
    "backward": ("backward_ops", "self_backward_ops", "backward_macs", "self_backward_macs",
                 "backward_flops", "self_backward_flops"),
    "params": ("params", "self_params"),
}
"""The columns whose whole-profile total each of :attr:`ProfileData.lower_bounds` names."""
_CAUSES = {"work without a formula": ("ops", "macs", "flops", "backward"),
           "weights that cannot be read": ("params",)}
"""Why each of :attr:`ProfileData.lower_bounds` can be one."""


def lower_bound_causes(bounds: Iterable[str]) -> list[str]:
    """Why the totals ``bounds`` (entries of :attr:`ProfileData.lower_bounds`) are lower
    bounds, each cause once, in one order: work without a formula, weights that cannot be
    read."""
    given = set(bounds)
    return [cause for cause, totals in _CAUSES.items() if given & set(totals)]


def lower_bounds_shown(profile: Profile) -> tuple[str, ...]:
    """The entries of :attr:`~moduleprofiler.records.ProfileData.lower_bounds` that bound
    what ``profile``'s views show: its counts where it counted them (work without a
    formula), its parameters wherever a weight could not be read."""
    return tuple(total for total in profile.lower_bounds
                 if profile.counted or total == "params")


def lower_bound_totals(profile: Profile) -> tuple[str, ...]:
    """The columns whose whole-profile total is only a lower bound (:func:`lower_bounds_shown`):
    ``ops`` and ``self_ops`` when the ops total is one, and so on."""
    return tuple(name for total in lower_bounds_shown(profile)
                 for name in _BOUNDED_COLUMNS[total])


def unknown_shares(frame: pd.DataFrame, bounded: Iterable[str],
                   shown: Sequence[str]) -> tuple[pd.DataFrame, tuple[str, ...]]:
    """``frame`` with each ``<c>_pct`` of a column ``c`` among ``bounded`` (its total is a
    lower bound) unknown, and the note saying so for the shown ones. Such a share is no
    share: the true total is larger by an unknown amount, so the true share of an exact row
    is smaller by an unknown amount. (A filter on it, ``min_pct``, runs before: it compares
    the share of the known total.)"""
    bounded = set(bounded)
    shares = [name for name in frame.columns
              if name.endswith("_pct") and name.removesuffix("_pct") in bounded]
    if not shares:
        return frame, ()
    out = frame.copy()
    for name in shares:
        out[name] = pd.array([pd.NA] * len(out), "Float64")
    named = [name for name in shares if name in shown]
    if not named:
        return out, ()
    bounds = [total for total, columns in _BOUNDED_COLUMNS.items()
              if any(name.removesuffix("_pct") in columns for name in named)]
    return out, (share_note([column_spec(name).label for name in named], bounds),)


def share_note(labels: Sequence[str], bounds: Iterable[str] = ("ops",)) -> str:
    """The note under a view whose shares (``labels``, as the headers name them) are unknown
    because the totals they divide, ``bounds`` (entries of :attr:`ProfileData.lower_bounds`),
    are lower bounds, with why (:func:`lower_bound_causes`)."""
    why = ", ".join(lower_bound_causes(bounds))
    return (f"{', '.join(labels)} unknown: the total is a lower bound ({why}), so no share of "
            "it is known")


def unknown_as_missing(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy where a module whose own ops (macs, flops) are unknown and whose inclusive
    count is 0 (nothing inside it was counted either) shows ``<NA>`` instead of that 0."""
    out = frame.copy()
    grouping = out["ops_source"].eq(GROUPING) if "ops_source" in out else False
    for own, inclusive in (("self_ops", "ops"), ("self_macs", "macs"),
                           ("self_flops", "flops")):
        if own in out and inclusive in out:
            unknown = out[own].isna() & out[inclusive].eq(0).fillna(False).astype(bool)
            out[inclusive] = out[inclusive].mask(unknown & ~grouping)
    return out


# -- row selection ----------------------------------------------------------------------------
def _patterns(patterns: Patterns, name: str = "patterns") -> list[str]:
    """The glob patterns of ``include=`` or ``exclude=`` (``name``) as a list: a pattern that
    is no string failed deep inside ``fnmatch``, and an empty one matched no module in
    silence; each is refused naming ``name``."""
    if patterns is None:
        return []
    if not isinstance(patterns, (str, Iterable)):
        raise TypeError(f"{name} must be a glob pattern (str) or a list of them, got "
                        f"{type(patterns).__name__} {patterns!r:.40}")
    listed = [patterns] if isinstance(patterns, str) else list(patterns)
    for pattern in listed:
        if not isinstance(pattern, str):
            raise TypeError(f"{name} must be glob patterns (str), got "
                            f"{type(pattern).__name__} {pattern!r}")
        if not pattern.strip():
            raise ValueError(f"{name}: {pattern!r} is an empty pattern, which matches no "
                             "module: give a glob of module paths or types ('Conv*', "
                             "'layer1.*')")
    return listed


def unmatched_notes(frame: pd.DataFrame, include: Patterns = None,
                    exclude: Patterns = None) -> tuple[str, ...]:
    """A note for each ``include``/``exclude`` pattern that matches no module path or type
    of ``frame`` (a misspelt type, a wrong case): the view is not what was asked for, so it
    says which pattern found nothing."""
    notes = []
    for name, patterns in (("include", include), ("exclude", exclude)):
        for pattern in _patterns(patterns, name):
            if not match_names(frame, pattern).any():
                notes.append(f"the {name} pattern {pattern!r} matches no module path or type "
                             "(globs are case-sensitive: 'Conv*', 'layer1.*')")
    return tuple(notes)


def match_names(frame: pd.DataFrame, patterns: Patterns) -> pd.Series:
    """Rows whose module path or type matches one of the glob ``patterns``
    (``fnmatch``, case-sensitive: ``"layer1.*"``, ``"Conv*"``, ``"*attn*"``)."""
    compiled = _patterns(patterns, "include or exclude")
    paths = frame["module"].astype(str)
    types = frame["type"].astype(str)
    hits = [any(fnmatch.fnmatchcase(path, p) or fnmatch.fnmatchcase(kind, p) for p in compiled)
            for path, kind in zip(paths, types)]
    return pd.Series(hits, index=frame.index, dtype=bool)


def select_rows(frame: pd.DataFrame, *, tree: bool, max_depth: int | None = None,
                min_pct: float | None = None, pct_column: str | None = None,
                include: Patterns = None, exclude: Patterns = None) -> pd.DataFrame:
    """The rows kept by every filter. For a tree, an excluded module takes its subtree with
    it and a kept module keeps its ancestors, so the tree stays connected."""
    check_int(max_depth, "max_depth", 0)
    check_percent(min_pct, "min_pct")
    _patterns(include, "include")  # each checked under its own name
    _patterns(exclude, "exclude")
    keep = pd.Series(True, index=frame.index)
    if max_depth is not None:
        keep &= frame["depth"] <= max_depth
    if min_pct is not None and pct_column is not None:
        keep &= frame[pct_column].ge(min_pct).fillna(False).astype(bool)
    if include is not None:
        keep &= match_names(frame, include)
    if exclude is not None:
        dropped = match_names(frame, exclude)
        if tree:
            roots = {module_path(name) for name in frame.loc[dropped, "module"]}
            dropped = frame["module"].map(lambda name: any(
                is_under(module_path(name), root) for root in roots)).astype(bool)
        keep &= ~dropped
    if tree:
        needed = {module_name(above) for name in frame.loc[keep, "module"]
                  for above in ancestor_paths(module_path(name))}
        keep |= frame["module"].isin(needed)
    return frame.loc[keep]


# -- columns ----------------------------------------------------------------------------------
def extra_columns(frame: pd.DataFrame) -> list[str]:
    """Quantities in ``frame`` beyond this layer's own columns (timing, memory, backward
    ops, ...) that hold at least one known value: the views add them to their defaults. Each
    quantity once: a per-call time whose per-module median the frame also holds (a module
    view of a timed profile) is left to it."""
    return [name for name in frame.columns
            if is_extra_column(name) and frame[name].notna().any()
            and column_spec(name).per_module not in frame]


def columns_for(what: Iterable[str], frame: pd.DataFrame) -> list[str]:
    """Columns of the groups in ``what`` that ``frame`` can show, or the columns named:
    ``params``; ``io`` the input and output shapes; ``ops`` MACs, ops and % of the ops;
    ``flops`` FLOPs (2 x MACs); ``backward`` the backward MACs and ops; ``bytes`` parameter,
    buffer and output bytes; ``time`` and ``memory`` the measured ``*_ms`` and ``*_bytes``
    columns; any other item is a column name (``my_count``, ``self_backward_flops``,
    ``ops_pct``)."""
    measured = [c for c in frame.columns if is_extra_column(c)]
    # each time once (a per-call column whose per-module twin the frame holds is the same
    # quantity), with the text columns measured beside the times (the regime label)
    times = [c for c in measured if column_spec(c).kind == "time"
             and column_spec(c).per_module not in frame]
    needs = {column_spec(c).needs for c in times} - {""}
    groups = {
        "params": ["params"],
        "io": ["input_shapes", "output_shapes"],
        "ops": ["macs", "ops", "ops_pct"],
        "flops": ["flops"],
        "backward": list(BACKWARD_COLUMNS),
        "bytes": ["param_bytes", "buffer_bytes", "output_bytes"],
        "time": times + [c for c in frame.columns if column_spec(c).kind == "text"
                         and column_spec(c).needs in needs],
        "memory": [c for c in measured if column_spec(c).kind == "bytes"],
    }
    out: list[str] = []
    for item in current_names(what):
        item = per_module_name(frame, item)
        if item in groups:
            out.extend(c for c in groups[item] if c not in out)
        elif item in frame or _pct_of_existing(frame, item):
            out.append(item)
        else:
            raise ValueError(f"unknown column group or column {item!r} (groups: "
                             f"{', '.join(WHAT_GROUPS)}; or a column of the module frame)")
    return out


def _current(columns: Sequence[str] | None) -> list[str] | None:
    """``columns`` with the names renamed in 0.2 replaced (:func:`current_name` warns)."""
    names = check_names(columns, "columns")
    return None if names is None else current_names(names)


def per_module_name(frame: pd.DataFrame, name: str) -> str:
    """``name``, or the column of ``frame`` holding its quantity per module when ``name`` is
    a per-call median that a module frame holds under its per-module name (``forward_ms``:
    ``time_median_ms``)."""
    twin = column_spec(name).per_module if name not in frame else None
    return twin if twin is not None and twin in frame else name


def _resolve_columns(frame: pd.DataFrame, requested: Sequence[str]) -> list[str]:
    requested = [per_module_name(frame, name) for name in requested]
    missing = [c for c in dict.fromkeys(requested)
               if c not in frame and not _pct_of_existing(frame, c)]
    if missing:
        raise KeyError(f"unknown column(s) {missing}; available: {list(frame.columns)}")
    return list(dict.fromkeys(requested))


def _pct_of_existing(frame: pd.DataFrame, name: str) -> bool:
    return name.endswith("_pct") and name[: -len("_pct")] in frame


# -- notes ------------------------------------------------------------------------------------
NOTE_ITEMS = 5
"""Names listed per note before "and N more"."""


def listing(items: Sequence[str], limit: int = NOTE_ITEMS) -> str:
    """The first ``limit`` of ``items`` (module paths as output names) and "and N more"."""
    shown = ", ".join(module_name(item) for item in items[:limit])
    more = len(items) - limit
    return f"{shown} and {more} more" if more > 0 else shown


def profile_hints(profile: Profile) -> tuple[str, ...]:
    """Advice under an interactive view of ``profile`` (:attr:`ViewData.hints`)."""
    if not profile.counted:
        return ("this pass counts no ops: merge it into a profile() result "
                "(profile.merge(this)) to see both",)
    return ()


def profile_notes(profile: Profile, uncalled_note: bool = True) -> tuple[str, ...]:
    """Caveats that belong under any table of ``profile`` (``uncalled_note=False``: without
    the list of modules never called, which only the views of every module show)."""
    notes = []
    if profile.counted and profile.unsupported:
        # unknown ops leave the MACs (and so the FLOPs) unknown too: every total they feed
        notes.append(f"ops unknown or partial in {len(profile.unsupported)} module(s): "
                     f"{listing(profile.unsupported)}; ops, MACs and FLOPs totals are lower "
                     "bounds")
    if profile.unknown_params:
        notes.append(f"parameters unknown in {len(profile.unknown_params)} module(s): "
                     f"{listing(profile.unknown_params)} (packed weights that cannot be "
                     "read); params totals are lower bounds")
    if profile.unsupported_ops:
        ops = [f"{name} x{count}" for name, count in profile.unsupported_ops.items()]
        notes.append(f"operators without a formula: {listing(ops)}")
    uncalled = profile.uncalled if uncalled_note else ()
    if uncalled:
        notes.append(f"not called ({len(uncalled)}): {listing(uncalled)}"
                     + _ran_without_clause(profile, uncalled)
                     + _uncalled_clause(profile, uncalled) + UNHOOKED_RUN_CLAUSE)
    if profile.excluded:
        notes.append(f"excluded from ops: {listing(profile.excluded)}")
    macs_unknown = tuple(dict.fromkeys(
        r.path for r in profile.records if r.self_ops is not None and r.self_macs is None))
    if macs_unknown:
        notes.append(f"macs unknown in {len(macs_unknown)} module(s) with known ops: "
                     f"{listing(macs_unknown)}; MACs and FLOPs totals are lower bounds")
    if profile.backward_unsupported_ops:
        ops = [f"{name} x{count}" for name, count in profile.backward_unsupported_ops.items()]
        notes.append(f"backward operators without a formula: {listing(ops)}; backward "
                     "totals are lower bounds")
    if profile.unhooked:
        notes.append(f"modules that carry no hooks (TorchScript, or run inside compiled code): "
                     f"{listing(profile.unhooked)}; their work is counted in the module that "
                     "calls them")
    notes.extend(profile.formula_fallbacks)
    notes.extend(profile.pass_notes)
    return tuple(notes)


def default_columns(profile: Profile, columns: Sequence[str], frame: pd.DataFrame) -> list[str]:
    """A view's default columns: ``columns``, the backward ones when a backward pass was
    profiled, then every listener's or measured quantity the frame holds (each time once).
    A default column that no row has a value in (the counts and shapes of a timing pass) is
    left out, and so is its percentage: a column of ``-`` says nothing, and the footer would
    define a unit the table does not show. Columns the caller names are shown whatever."""
    backward = list(BACKWARD_COLUMNS) if profile.backward else []
    chosen = dict.fromkeys([*columns, *backward, *extra_columns(frame)])
    return [name for name in chosen if _has_values(frame, name)]


def _has_values(frame: pd.DataFrame, name: str) -> bool:
    """Whether a row of ``frame`` has a value for ``name`` (a percentage: for its base
    column; a name the frame does not hold, ``module``/``type``: yes, it is not data)."""
    base = name.removesuffix("_pct") if name.endswith("_pct") else name
    return base not in frame or frame.empty or bool(frame[base].notna().any())


def _optional(shown: Sequence[str], chosen: bool) -> tuple[str, ...]:
    """The columns of ``shown`` a renderer may leave out: none when the caller chose them."""
    return () if chosen else tuple(c for c in FIT_DROP_ORDER if c in shown)


def _asked(shown: Sequence[str], columns: Sequence[str] | None,
           *also: str | None) -> tuple[str, ...]:
    """The shown columns the caller asked for (named in ``columns``, or the ``also`` ones a
    view sorts or filters by): the last a renderer hides (:attr:`View.keep`)."""
    asked = [*(columns or ()), *(c for c in also if c)]
    return tuple(c for c in dict.fromkeys(asked) if c in shown)


def _unfiltered(*filters: object) -> bool:
    """No row filter given: the view shows every module (:attr:`View.all_rows`)."""
    return all(value is None for value in filters)


def _modules(profile: Profile, by_caller: bool = False) -> pd.DataFrame:
    if not profile.modules:
        raise ValueError("the profile has no modules to show")
    return module_frame(profile, by_caller=by_caller)


def _shared_note(profile: Profile, frame: pd.DataFrame) -> tuple[str, ...]:
    """The note under a tree that draws a shared module's calls under their callers."""
    paths = {info.path for info in profile.modules}
    drawn = [path for path in map(module_path, map(str, frame["module"])) if path not in paths]
    if not drawn:
        return ()
    return (f"calls of a shared module drawn under the module that made them, its "
            f"parameters on its own row only: {listing(drawn)}",)


_INCLUSIVE_TENSORS = ("params", "trainable_params", "param_bytes", "buffers", "buffer_bytes")
"""Columns in which a module's row counts the parameters and buffers it registers that another
module owns."""


def _tied_note(frame: pd.DataFrame, shown: Sequence[str]) -> tuple[str, ...]:
    """The note under a flat table whose parameter or buffer columns count a tied tensor on
    more than one row (the tree marks such a row ``[shared with owner]``)."""
    if "shared_with" not in frame or not any(name in shown for name in _INCLUSIVE_TENSORS):
        return ()
    tied = [f"{module} (owned by {owner})" for module, owner in zip(frame["module"],
                                                                    frame["shared_with"])
            if isinstance(owner, str)]
    if not tied:
        return ()
    return (f"params and buffers include tied tensors another module owns, counted once in "
            f"the total: {listing(tied)}",)


def _tied_across_types_note(rows: pd.DataFrame, shown: Sequence[str]) -> tuple[str, ...]:
    """The note under a per-type table whose parameter or buffer columns count a tied tensor
    in two rows: a module of the rows holds it and a module of another type among the rows
    owns it (within one type it counts once, :func:`~moduleprofiler.export.frame.group_by_type`)."""
    if "shared_with" not in rows or not any(name in shown for name in _INCLUSIVE_TENSORS):
        return ()
    types = dict(zip(map(module_path, map(str, rows["module"])), map(str, rows["type"])))
    tied = []
    for module, kind, owners in zip(rows["module"], rows["type"], rows["shared_with"]):
        if not isinstance(owners, str):
            continue
        # shared_with names the owners, comma-separated (the root as __root__)
        others = [owner.strip() for owner in owners.split(",")
                  if types.get(module_path(owner.strip()), kind) != kind]
        if others:
            tied.append(f"{module} ({kind}, owned by {', '.join(others)})")
    if not tied:
        return ()
    return (f"params and buffers include tied tensors that a module of another type owns: "
            f"counted in both types' rows (and their shares), once in the total: "
            f"{listing(tied)}",)


# -- the views --------------------------------------------------------------------------------
def tree_view(profile: Profile, columns: Sequence[str] | None = None, *,
              max_depth: int | None = None, min_pct: float | None = None,
              pct_of: str = "ops", include: Patterns = None,
              exclude: Patterns = None) -> View:
    """The model's module tree (``named_modules()`` order, uncalled modules included), each
    module annotated with ``columns`` (default: params, output shape, macs, ops, % of the
    ops; plus any timing/memory columns). Numbers of a module include its children's.

    ``min_pct`` keeps modules whose ``pct_of`` column is at least that share (in %) of the
    total; ``include``/``exclude`` are glob patterns on module paths or type names."""
    check_str(pct_of, "pct_of")
    columns, pct_of = _current(columns), current_name(pct_of)
    base = unknown_as_missing(_modules(profile, by_caller=True))
    shown = list(columns) if columns is not None else default_columns(profile, TREE_COLUMNS, base)
    shown = [c for c in shown if c not in ("module", "type")]
    pct_column = f"{pct_of}_pct" if min_pct is not None else None
    wanted = [*shown, *([pct_column] if pct_column else [])]
    frame = add_percentages(base, wanted, profile_totals(profile))
    _resolve_columns(frame, wanted)
    whole = _unfiltered(max_depth, min_pct, include, exclude)
    blocks = None if whole else block_keys(frame)
    unmatched = unmatched_notes(frame, include, exclude)
    frame = select_rows(frame, tree=True, max_depth=max_depth, min_pct=min_pct,
                        pct_column=pct_column, include=include, exclude=exclude)
    frame, shares = unknown_shares(frame, lower_bound_totals(profile), shown)
    return View(frame=frame.reset_index(drop=True), columns=tuple(shown), kind="tree",
                title=f"{model_name(profile)} module tree", totals=_totals(profile),
                lower_bounds=_bounded_totals(profile),
                notes=(*unmatched, *profile_notes(profile), *shares,
                       *_shared_note(profile, base)),
                hints=profile_hints(profile),
                optional=_optional(["type", *shown], columns is not None),
                keep=_asked(shown, columns, pct_column), module_order=True,
                all_rows=whole, blocks=blocks)


def table_view(profile: Profile, columns: Sequence[str] | None = None, *,
               aggregate: TableAggregate = "module", max_depth: int | None = None,
               min_pct: float | None = None, pct_of: str | None = None,
               sort_by: str | None = None, ascending: bool | None = None,
               include: Patterns = None, exclude: Patterns = None,
               limit: int | None = None) -> View:
    """A flat table: one row per module (calls summed, uncalled included) or per call.

    ``sort_by`` names a column (numbers sort largest first unless ``ascending``); ``limit``
    keeps the first rows after sorting. ``min_pct`` applies to ``pct_of``, by default the
    ``sort_by`` column when it is a quantity with a total, else ``ops``; the other
    filters are as in :func:`tree_view`."""
    if aggregate not in ("module", "call"):
        raise ValueError(f"aggregate must be 'module' or 'call', got {aggregate!r}")
    columns = _current(columns)
    for name, value in (("sort_by", sort_by), ("pct_of", pct_of)):
        if value is not None:
            check_str(value, name)
    if ascending is not None:
        check_bool(ascending, "ascending")
    sort_by = None if sort_by is None else current_name(sort_by)
    pct_of = None if pct_of is None else current_name(pct_of)
    base = unknown_as_missing(
        _modules(profile) if aggregate == "module" else call_frame(profile))
    defaults = TABLE_COLUMNS if aggregate == "module" else CALL_COLUMNS
    shown = list(columns) if columns is not None else default_columns(profile, defaults, base)
    ids = ["module", "type"] if aggregate == "module" else ["call", "module", "type"]
    shown = [*[i for i in ids if i not in shown], *shown]
    if sort_by is not None and sort_by not in shown:  # the value the rows are ranked by
        shown.append(sort_by)
    if pct_of is None:
        quantity = sort_by is not None and sort_by in base \
            and column_spec(sort_by).inclusive is not None
        pct_of = sort_by if quantity and sort_by is not None else "ops"
    pct_column = f"{pct_of}_pct" if min_pct is not None else None
    wanted = [*shown, *(c for c in (pct_column, sort_by) if c)]
    frame = add_percentages(base, wanted, profile_totals(profile))
    _resolve_columns(frame, wanted)
    module_order = aggregate == "module" and sort_by is None
    blocks = block_keys(frame) if module_order and not _unfiltered(
        max_depth, min_pct, include, exclude, limit) else None
    unmatched = unmatched_notes(frame, include, exclude)
    frame = select_rows(frame, tree=False, max_depth=max_depth, min_pct=min_pct,
                        pct_column=pct_column, include=include, exclude=exclude)
    if sort_by is not None:
        numeric = column_spec(sort_by, frame[sort_by].dtype).numeric
        order = (not numeric) if ascending is None else ascending
        frame = frame.sort_values(sort_by, ascending=order, kind="stable", na_position="last")
    check_int(limit, "limit", 0)
    if limit is not None:
        frame = frame.head(limit)
    frame, shares = unknown_shares(frame, lower_bound_totals(profile), shown)
    title = f"{model_name(profile)} {'modules' if aggregate == 'module' else 'calls'}"
    return View(frame=frame.reset_index(drop=True), columns=tuple(shown), kind="table",
                title=title, totals=_totals(profile), lower_bounds=_bounded_totals(profile),
                notes=(*unmatched, *profile_notes(profile), *shares,
                       *_tied_note(frame, shown)),
                hints=profile_hints(profile),
                optional=_optional([c for c in shown if c != sort_by], columns is not None),
                keep=_asked(shown, columns, sort_by, pct_column),
                module_order=module_order, blocks=blocks,
                all_rows=module_order and blocks is None)


def top_view(profile: Profile, k: int | None = 10, *, by: str = "ops",
             depth: int | None = None) -> View:
    """The ``k`` module types with the most ``by`` (``"ops"``, ``"macs"``, ``"params"`` or
    any numeric column), DeepSpeed's "top modules at depth d".

    ``by`` is a quantity: with ``depth=None`` each module counts its own work (``self_ops``,
    ``self_macs``, ``self_params``) and the shares add up to the whole model; with
    ``depth=d`` only modules at depth ``d`` count, each with everything it contains (``ops``,
    ``macs``, ``params``). A quantity with no own share (``buffers``, ``buffer_bytes``,
    ``param_bytes``, ``trainable_params``) holds each module's children at every depth too:
    the title says so, and a note that its shares overlap."""
    check_int(k, "k", 1)
    check_int(depth, "depth", 0)
    check_str(by, "by")
    by = current_name(by)
    modules = _modules(profile)
    pick = 1 if depth is not None else 0
    extras = extra_columns(modules)
    metrics = list(dict.fromkeys(["params", "macs", "ops", *extras, by]))
    columns = {metric: metric_columns(metric, list(modules.columns))[pick] for metric in metrics}
    target = columns[by]
    if not column_spec(target, modules[target].dtype).numeric:
        raise ValueError(f"top(by={by!r}): {target!r} is not a numeric column")
    rows = modules if depth is None else modules[modules["depth"] == depth]
    frame = group_by_type(rows.reset_index(drop=True), list(dict.fromkeys(columns.values())),
                          profile.modules)
    if target not in frame:
        raise ValueError(f"top(by={by!r}): {target!r} has no value per module type "
                         f"(its aggregation is {column_spec(target).aggregation!r})")
    pct = f"{target}_pct"
    known = {**{c: t for c in extras if (t := column_total(modules, c, {})) is not None},
             **profile_totals(profile)}
    frame = add_percentages(frame, [pct], known)
    frame = frame.sort_values(target, ascending=False, kind="stable", na_position="last")
    if k is not None:
        frame = frame.head(k)
    shown = ("type", "modules", "calls",
             *(c for c in dict.fromkeys(columns.values()) if c in frame), pct)
    # a bare name holds the module's children (docs/glossary.md): without a self_ partner the
    # rows at every depth hold one another's work
    overlapping = depth is None and column_spec(target).aggregation == "inclusive"
    where = (f"depth {depth}, including children" if depth is not None
             else "all depths, including children" if overlapping else "all depths, own work")
    frame, shares = unknown_shares(frame, lower_bound_totals(profile), shown)
    notes = (*profile_notes(profile, uncalled_note=False), *shares,
             *_tied_across_types_note(rows, shown))
    if overlapping:
        notes = (*notes, f"{by} has no own share: each type's row includes the children of its "
                         "modules, so a module inside another counts in both rows and the "
                         f"shares overlap; top(by={by!r}, depth=d) ranks the modules at one "
                         "depth")
    return View(frame=frame.reset_index(drop=True), columns=shown, kind="top",
                title=f"Top {k} module types by {by} ({where})", totals=_totals(profile),
                lower_bounds=_bounded_totals(profile), notes=notes,
                hints=profile_hints(profile), optional=("modules", "calls"), keep=(target, pct))


UNHOOKED_RUN_CLAUSE = ("; one run without its hooks (module.forward(x), a class replacing "
                       "__call__) is listed too: its work is in its caller's own count")
"""What the note on modules not called says of every one of them: a forward run without the
module's hooks is not seen as a call of it (telling it from a module that never ran would cost
work on every call), while the operators it ran count in its caller's own work."""

MULTIHEAD_ATTENTION = "MultiheadAttention"
"""``nn.MultiheadAttention``'s type name: it computes with its ``out_proj``'s weights and never
calls it, the common case of a module whose work is in its parent's count."""


def _ran_without_clause(profile: Profile, uncalled: Sequence[str], limit: int = 3) -> str:
    """What the note on modules not called adds for one whose descendants ran all the same
    (called through another of its methods, from outside it, or from its forward run without
    its hooks): that they ran without a call of it (``; submod.fc ran without a call of
    it``), for the first ``limit`` such modules."""
    called = [record.path for record in profile.records]
    clauses = []
    for path in uncalled:
        ran = ran_without(path, called)
        if ran:
            clauses.append((path, ran))
    if not clauses:
        return ""
    if len(uncalled) == 1:
        return f"; {listing(clauses[0][1])} ran without a call of it"
    said = "".join(f"; {listing(ran)} ran without a call of {module_name(path)}"
                   for path, ran in clauses[:limit])
    more = len(clauses) - limit
    return said + (f"; and {more} more module(s) like these" if more > 0 else "")


def _uncalled_clause(profile: Profile, uncalled: Sequence[str]) -> str:
    """What the note on modules not called adds: where one with parameters has a parent that
    ran, that the parent may have done its work with their weights; naming MultiheadAttention's
    ``out_proj`` only when a module of ``uncalled`` is, or is inside, a MultiheadAttention (a
    GPT-2's never-called dropouts have no weights, and no MultiheadAttention: nothing to add)."""
    called = {record.path for record in profile.records}
    modules = {module.path: module for module in profile.modules}
    weighted = [path for path in uncalled if path and path.rpartition(".")[0] in called
                and path in modules and modules[path].params and not ran_without(path, called)]
    if not weighted:
        return ""
    in_attention = any(modules[each].type_name == MULTIHEAD_ATTENTION for path in uncalled
                       for each in (*ancestor_paths(path), path) if each in modules)
    example = f" ({MULTIHEAD_ATTENTION}'s out_proj)" if in_attention else ""
    return f"; the work a parent does with their weights{example} is in the parent's own count"
