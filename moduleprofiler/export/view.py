"""``View``: a selection of rows and columns of a profile frame, raw numbers inside, with one
method per output format (each a lookup in the format table). ``profile.tree()``,
``profile.table()``, ``profile.top()``, ``summary()`` and ``compare()`` all return one."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import IO, Any, Literal

import pandas as pd

from moduleprofiler.export.columns import ColumnSpec, frame_specs
from moduleprofiler.export.fold import fold_tree
from moduleprofiler.export.format_table import infer_format, render_view
from moduleprofiler.export.io import Buffer, PathLike
from moduleprofiler.export.notebook import notebook_html
from moduleprofiler.export.text import supports_color

ViewKind = Literal["tree", "table", "top", "summary", "compare"]


@dataclass(frozen=True, eq=False)
class View:
    """Rows and columns chosen from a profile frame; numbers stay raw until a ``to_*`` call.

    ``str(view)`` is the plain-ASCII text table; ``view.df`` the shown columns as a DataFrame.
    """

    frame: pd.DataFrame
    """The selected rows with every column (raw numbers, ``<NA>`` for unknown)."""
    columns: tuple[str, ...]
    """The columns shown, in order. A tree view draws ``module``/``type`` as its tree."""
    kind: ViewKind = "table"
    title: str = ""
    totals: Mapping[str, int | float] = field(default_factory=dict)
    """Whole-profile totals by column name, printed under text tables."""
    notes: tuple[str, ...] = ()
    """Caveats printed under text tables (unknown ops, unsupported operators, ...)."""
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
    width: int | None = None
    """The text width when :meth:`to_text` is given none (``None``: the terminal's; ``0``: no
    limit): ``profile.tree(width=120)`` then prints 120 columns wide."""

    # -- data ------------------------------------------------------------------------------
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

    def folded(self) -> View:
        """A tree view with each run of identical numbered sibling blocks (``h.0`` ...
        ``h.11``) folded into one subtree (``h.0-11``), the blocks' numbers summed
        (:mod:`moduleprofiler.export.fold`); other views, and trees with nothing to fold, as
        they are."""
        if self.kind != "tree" or self.frame.empty:
            return self
        frame = fold_tree(self.frame, self.columns)
        return self if frame is self.frame else replace(self, frame=frame)

    # -- text ----------------------------------------------------------------------------
    def to_text(self, buf: Buffer = None, *, color: bool = False, unicode: bool = False,
                width: int | None = None, fold: bool = True) -> str | None:
        """Aligned text with human units (plain ASCII unless ``unicode``; ANSI colour if
        ``color``), no line longer than ``width`` (``None``: the terminal's; ``0``: no
        limit); ``fold=False`` shows every block of a tree instead of folding identical ones
        (:meth:`folded`)."""
        return render_view(self, "text", buf, color=color, unicode=unicode,
                           width=self.width if width is None else width, fold=fold)

    def print(self, file: IO[str] | None = None, *, color: bool | None = None,
              unicode: bool = False, width: int | None = None, fold: bool = True) -> None:
        """Print to ``file`` (default stdout), as :meth:`to_text`; ``color=None`` colours
        only a terminal that accepts it (a tty, ``NO_COLOR`` unset, ``TERM`` not ``dumb``)."""
        stream = file if file is not None else sys.stdout
        use = supports_color(stream) if color is None else color
        print(self.to_text(color=use, unicode=unicode, width=width, fold=fold), file=stream)

    def __str__(self) -> str:
        return self.to_text() or ""

    def __repr__(self) -> str:
        return self.__str__()

    def _repr_html_(self) -> str:
        """The notebook form: title, table, totals and notes, under an id of its own
        (:mod:`moduleprofiler.export.notebook`)."""
        return notebook_html(self)

    # -- files -----------------------------------------------------------------------------
    def to_csv(self, buf: Buffer = None) -> str | None:
        """The shown columns as CSV with raw numbers (unknown = empty cell)."""
        return render_view(self, "csv", buf)

    def to_markdown(self, buf: Buffer = None) -> str | None:
        """A Markdown pipe table with human units; names escaped."""
        return render_view(self, "markdown", buf)

    def to_html(self, buf: Buffer = None, *, sortable: bool = False) -> str | None:
        """An HTML ``<table>`` (pandas ``Styler``) with human units; names escaped."""
        return render_view(self, "html", buf, sortable=sortable)

    def to_latex(self, buf: Buffer = None, *, caption: str | None = None,
                 label: str | None = None, position: str = "htbp",
                 environment: str | None = None, escape_caption: bool = True,
                 wide: bool = False, fit: bool = True,
                 width: float | None = None) -> str | None:
        """A booktabs ``table`` float (pandas ``Styler``) with human units, every name
        escaped and no ``NaN``, that fits a one-column ``article`` (``wide=True``: a
        ``table*`` across two columns; ``width``: another width in points; ``fit=False``:
        as it is). Needs ``\\usepackage{booktabs}`` (and ``graphicx`` when scaled)."""
        return render_view(self, "latex", buf, caption=caption, label=label, position=position,
                           environment=environment, escape_caption=escape_caption, wide=wide,
                           fit=fit, width=width)

    def save(self, path: PathLike, format: str | None = None, **options: Any) -> None:
        """Write to ``path`` in ``format`` (default: from the suffix: .csv .md .html .tex
        .txt); ``options`` go to the renderer."""
        render_view(self, format if format is not None else infer_format(path), path,
                    **options)
