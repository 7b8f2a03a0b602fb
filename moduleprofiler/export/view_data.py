"""The data of a view: rows and columns chosen from a profile frame, raw numbers inside, and
what a renderer needs to know about them (labels, totals, notes, which columns may go to fit
a width). Renderers are functions of this data; :class:`~moduleprofiler.export.view.View`
adds one method per format on top, each a lookup in the format table."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, TypeVar

import pandas as pd

from moduleprofiler.export.columns import ColumnSpec, frame_specs
from moduleprofiler.export.fold import fold_tree

ViewKind = Literal["tree", "table", "top", "summary", "compare"]
_V = TypeVar("_V", bound="ViewData")


@dataclass(frozen=True, eq=False)
class ViewData:
    """Rows and columns chosen from a profile frame; numbers stay raw until rendered."""

    frame: pd.DataFrame
    """The selected rows with every column (raw numbers, ``<NA>`` for unknown)."""
    columns: tuple[str, ...]
    """The columns shown, in order. A tree view draws ``module``/``type`` as its tree."""
    kind: ViewKind = "table"
    title: str = ""
    totals: Mapping[str, int | float] = field(default_factory=dict)
    """Whole-profile totals by column name, printed under text tables."""
    lower_bounds: tuple[str, ...] = ()
    """The names in :attr:`totals` whose value is only a lower bound (work without a
    formula): the totals line writes ``>=`` before them, as ``repr(profile)`` does."""
    notes: tuple[str, ...] = ()
    """Caveats printed under every table (unknown ops, unsupported operators, ...): they say
    what the numbers shown are, so Markdown and LaTeX keep them too."""
    hints: tuple[str, ...] = ()
    """Advice for a reader at a terminal or in a notebook (how to see more: "merge it into a
    profile() result"), printed before the notes by the text and notebook views; a table
    pasted into a document (Markdown, LaTeX) leaves it out."""
    exact_flags: tuple[str, ...] = ("complete", "ops_complete", "backward_complete")
    """The flag columns of :attr:`frame` saying, row by row, whether its counts are exact
    (False: work without a formula, so its inclusive counts are lower bounds). :attr:`df`
    and a format with no place for :attr:`notes` (CSV) add the ones the view does not show
    where some row is False (:func:`bound_flags`)."""
    overrides: Mapping[str, ColumnSpec] = field(default_factory=dict)
    """Column specs that differ from the registry (e.g. ``compare``'s ``ops_before``)."""
    raw: bool = False
    """Show values as they are and columns by their names (the 0.0.4 writers' tables)
    instead of human units and labels."""
    optional: tuple[str, ...] = ()
    """Shown columns a renderer may leave out to fit a width, the first to go first: the
    defaults a view chose itself, never a column the caller named."""
    keep: tuple[str, ...] = ()
    """Shown columns a renderer hides last: those the caller named, sorted or ranked by (a
    column a note names is kept as well, :func:`~moduleprofiler.export.text.render_text`)."""
    module_order: bool = False
    """The rows are modules in module order (pre-order, one row each): runs of identical
    blocks can be folded (a tree, or an unsorted table of modules)."""
    all_rows: bool = False
    """The rows are every module, none left out by the caller (no ``max_depth``,
    ``min_pct``, ``include``, ``exclude``, ``limit``): a renderer that must fit a height (a
    LaTeX float on one page) may show fewer depths, and says so."""
    blocks: Mapping[str, tuple[Any, ...]] | None = None
    """Where the caller left rows out of a tree: what decides folding of each numbered block
    over its whole subtree (:func:`~moduleprofiler.export.fold.block_keys`), so that blocks
    that differ in hidden rows stay apart; ``None``: the rows are the whole tree."""
    width: int | None = None
    """The text width when :meth:`View.to_text` is given none (``None``: the terminal's;
    ``0``: no limit): ``profile.tree(width=120)`` then prints 120 columns wide."""

    @property
    def df(self) -> pd.DataFrame:
        """The shown columns (and ``module``/``type`` for a tree) as a new DataFrame, then
        the flags that say which rows hold lower bounds where some row does
        (:func:`bound_flags`: ``complete``, ``ops_complete``...), as in the view's CSV."""
        frame = self.frame.loc[:, list(self.data_columns)].reset_index(drop=True)
        for name, flags in bound_flags(self).items():
            frame[name] = flags
        return frame

    @property
    def data_columns(self) -> tuple[str, ...]:
        """``columns``, with ``module`` and ``type`` first for tree views."""
        if self.kind != "tree":
            return self.columns
        ids = tuple(name for name in ("module", "type") if name not in self.columns)
        return ids + self.columns

    def specs(self, columns: tuple[str, ...] | None = None) -> dict[str, ColumnSpec]:
        """Column specs (kind, label, inclusive) of ``columns`` (default: the shown ones)."""
        names = list(columns if columns is not None else self.columns)
        specs = frame_specs(self.frame, [n for n in names if n not in self.overrides])
        chosen = {name: self.overrides.get(name) or specs[name] for name in names}
        if self.raw:
            return {name: replace(spec, label=name) for name, spec in chosen.items()}
        return chosen

    def folded(self: _V) -> _V:
        """A tree view with each run of identical numbered sibling blocks (``h.0`` ...
        ``h.11``) folded into one subtree (``h.0-11``), the blocks' numbers summed
        (:mod:`moduleprofiler.export.fold`); other views, and trees with nothing to fold, as
        they are (of the same class)."""
        if self.kind != "tree" or self.frame.empty:
            return self
        frame = fold_tree(self.frame, self.blocks)
        return self if frame is self.frame else replace(self, frame=frame)


_COUNT_UNITS = frozenset({"ops", "MACs", "FLOPs"})
"""The units of the counts a row's exact flags are about (not parameters, times or bytes)."""


def bound_flags(view: ViewData) -> dict[str, pd.Series]:
    """The view's :attr:`~ViewData.exact_flags` it does not show, all of them where some row
    of one is False, when the view shows a count they are about (forward or ``backward_``
    ops, MACs, FLOPs): a DataFrame or a file holds no notes, and a comment line or a ``>=``
    mark in a cell would break ``pandas.read_csv`` or turn a column of numbers into text, so
    which rows hold lower bounds (the notes of the other formats) travels as the row's own
    flag columns, False there. All of them, so that a row whose MACs alone are unknown
    (``complete`` False) says its ops are exact (``ops_complete`` True). None for a view
    whose rows are all exact, nor for one of times or memory (a timing pass counts no ops:
    its flags are False without bounding anything it shows); the 0.0.4 raw tables stay
    bare."""
    if view.raw:
        return {}
    counts = [name for name, spec in view.specs().items() if spec.unit in _COUNT_UNITS]
    shown = {"backward" if "backward" in name else "forward" for name in counts}
    present = [name for name in view.exact_flags
               if name in view.frame and name not in view.data_columns
               and ("backward" if name.startswith("backward") else "forward") in shown]
    if not any(bool(view.frame[name].eq(False).any()) for name in present):
        return {}
    return {name: view.frame[name].reset_index(drop=True) for name in present}
