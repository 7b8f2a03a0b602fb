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
    notes: tuple[str, ...] = ()
    """Caveats printed under every table (unknown ops, unsupported operators, ...): they say
    what the numbers shown are, so Markdown and LaTeX keep them too."""
    hints: tuple[str, ...] = ()
    """Advice for a reader at a terminal or in a notebook (how to see more: "merge it into a
    profile() result"), printed before the notes by the text and notebook views; a table
    pasted into a document (Markdown, LaTeX) leaves it out."""
    exact_flags: tuple[str, ...] = ("complete", "backward_complete")
    """The flag columns of :attr:`frame` saying, row by row, whether its counts are exact
    (False: work without a formula, so its inclusive counts are lower bounds). A format with
    no place for :attr:`notes` (CSV) writes the ones the view does not show, where a row it
    writes is False."""
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
        """The shown columns (and ``module``/``type`` for a tree) as a new DataFrame."""
        return self.frame.loc[:, list(self.data_columns)].reset_index(drop=True)

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
