"""``View``: the data of a view (:class:`~moduleprofiler.export.view_data.ViewData`) with one
method per output format, each a lookup in the format table
(:mod:`moduleprofiler.export.format_table`). ``profile.tree()``, ``profile.table()``,
``profile.top()``, ``summary()`` and ``compare()`` all return one."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import IO, Any

from moduleprofiler.export.format_table import infer_format, render_view
from moduleprofiler.export.io import Buffer, PathLike, check_path
from moduleprofiler.export.notebook import notebook_html
from moduleprofiler.export.text import supports_color
from moduleprofiler.export.view_data import ViewData, ViewKind

__all__ = ["View", "ViewKind"]


@dataclass(frozen=True, eq=False)
class View(ViewData):
    """Rows and columns chosen from a profile frame; numbers stay raw until a ``to_*`` call.

    ``str(view)`` is the plain-ASCII text table; ``view.df`` the shown columns as a DataFrame.
    """

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

    def to_csv(self, buf: Buffer = None) -> str | None:
        """The shown columns as CSV with raw numbers (unknown = empty cell)."""
        return render_view(self, "csv", buf)

    def to_markdown(self, buf: Buffer = None) -> str | None:
        """A Markdown pipe table with human units; names escaped."""
        return render_view(self, "markdown", buf)

    def to_html(self, buf: Buffer = None, *, sortable: bool = False) -> str | None:
        """An HTML ``<table>`` (pandas ``Styler``) with human units, then the view's notes
        (which numbers are lower bounds, ...); names escaped."""
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
        check_path(path)
        render_view(self, format if format is not None else infer_format(path), path,
                    **options)
