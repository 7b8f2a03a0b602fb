"""Fitting an aligned text table into a width: shapes shortened, columns chosen, names elided
in the middle, so that no line is longer than the width and no row wraps.

The steps, each taken only while the table is still too wide:

1. shape cells longer than :data:`SHAPE_CELL` are cut;
2. text columns are hidden: first those among the view's optional columns (defaults it chose
   itself, :attr:`View.optional`), then the input shapes and dtypes, then the others (the
   rightmost first);
3. the names (a tree's labels, a table's module paths and types) are elided in the middle
   (:func:`~moduleprofiler.export.names.elide_name`) down to :data:`NAME_FLOOR` characters,
   and never past a tree's prefix and :data:`LABEL_FLOOR` characters of its label (the
   tree's shape stays drawn while numbers can still go);
4. numeric columns are hidden: the optional ones in their order; then, of each quantity
   (the forward counts, the parameters, the backward counts, memory, time), every column but
   its first, the rightmost first (device times after every other: the kernel clock's
   ``device_ms`` outlasts the host times left of it, and a device time is the time's first
   column); then the first column of each quantity: backward counts, memory, time, forward
   counts, parameters (so a tree with counts, times and memory keeps one column of each);
   percentages last;
5. the names are elided further, down to what is left.

Widths are terminal columns (:func:`~moduleprofiler.export.width.display_width`: a CJK
character takes two). A tree prefix that leaves its label fewer than :data:`LABEL_FLOOR`
columns of the line has its outer levels replaced by their count
(:func:`~moduleprofiler.export.tree.squeeze_prefixes`).

The columns a caller asked for (:attr:`View.keep`: named, sorted or ranked by, or named by a
note under the table) go through the same steps only after every other column is gone. A flag
on other columns (:attr:`ColumnSpec.qualifies`: a time's low confidence) is shown while one
of them is, and goes with the last of them, never before it (after every other column where
none of them is shown).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from moduleprofiler.export.names import ELLIPSIS, distinct_names, elide_label, elide_name
from moduleprofiler.export.tree import squeeze_prefixes
from moduleprofiler.export.width import display_width, pad

MIN_WIDTH = 40
"""The narrowest width a table is fitted to."""
SHAPE_CELL = 20
"""Shape cells are cut to this many characters when the table is too wide."""
NAME_FLOOR = 24
"""Step 3 elides names to no fewer characters than this (step 5 goes further)."""
LABEL_FLOOR = 16
"""Step 3 leaves each tree label at least this many characters after its prefix: a deep
row elided into its prefix (``|   |...attn (Conv1D)``) reads as a row of another depth."""
GAP = 2
"""Spaces between two columns."""


@dataclass
class TextColumn:
    """One column of a text table, as cells already formatted."""

    name: str
    header: str
    cells: list[str]
    right: bool
    kind: str
    codes: list[str | None]
    identity: bool = False
    """A name column (elided, never hidden)."""
    prefixes: list[str] = field(default_factory=list)
    """A tree column's drawing in front of each label (kept when the label is elided)."""

    @property
    def width(self) -> int:
        """The columns its widest cell takes in a terminal (a CJK character takes two)."""
        return max([display_width(self.header), *(display_width(cell) for cell in self.cells)])

    def aligned(self, text: str, size: int) -> str:
        """``text`` (its header or a cell) padded to ``size`` columns on the column's open
        side."""
        return pad(text, size, self.right)


def terminal_width(width: int | None) -> int | None:
    """The width to fit: ``None`` -> the terminal's (``COLUMNS`` first, then the terminal, 80
    when there is neither), ``0`` -> no limit (``None``), else ``width`` itself; a width below
    :data:`MIN_WIDTH` is a ``ValueError`` when given, raised to it when it is the terminal's."""
    if width is None:
        return max(MIN_WIDTH, shutil.get_terminal_size((80, 24)).columns)
    if isinstance(width, bool) or not isinstance(width, int):
        raise TypeError(f"width must be an int (0 for no limit) or None, got {width!r}")
    if width == 0:
        return None
    if width < MIN_WIDTH:
        raise ValueError(f"width must be 0 (no limit) or at least {MIN_WIDTH}, got {width}")
    return width


def table_width(columns: list[TextColumn]) -> int:
    """The width of the widest line of ``columns`` set side by side."""
    return sum(c.width for c in columns) + GAP * max(0, len(columns) - 1)


def _elide(column: TextColumn, target: int) -> None:
    """Elide ``column``'s cells (after their tree prefix) to ``target`` characters; tree
    prefixes that leave a label fewer than :data:`LABEL_FLOOR` characters are squeezed
    (:func:`~moduleprofiler.export.tree.squeeze_prefixes`: their outer levels counted, never
    cut into a drawing that reads as another depth)."""
    labels = [cell[len(prefix):] for prefix, cell in
              zip(column.prefixes or [""] * len(column.cells), column.cells)]
    if column.prefixes:
        column.prefixes = squeeze_prefixes(column.prefixes, target - LABEL_FLOOR)
    prefixes = column.prefixes or [""] * len(column.cells)
    cells = []
    for prefix, label in zip(prefixes, labels):
        room = target - len(prefix)
        if room < len(ELLIPSIS) + 2:  # a column narrower than a label's floor: cut the cell
            cells.append(_narrowed(elide_name, prefix + label, target))
        else:
            cells.append(prefix + _narrowed(elide_label, label, room))
    # two different names elided to one text would read as one module (two siblings'
    # labels too, their branches aside): show where they differ
    rows_of: dict[tuple[int, str], list[int]] = {}
    for row, (prefix, cell) in enumerate(zip(prefixes, cells)):
        rows_of.setdefault((len(prefix), cell[len(prefix):]), []).append(row)
    for rows in rows_of.values():
        if len({labels[row] for row in rows}) > 1:
            room = target - len(prefixes[rows[0]])
            for row, text in zip(rows, distinct_names([labels[row] for row in rows], room)):
                cells[row] = prefixes[row] + text
    column.cells = cells
    column.header = column.header[:target]


def _narrowed(elide: Callable[[str, int], str], text: str, columns: int) -> str:
    """``text`` elided until it takes at most ``columns`` terminal columns (a wide character
    takes two, so ``columns`` characters of CJK would take twice the room)."""
    limit = columns
    out = elide(text, limit)
    while display_width(out) > columns and limit > 1:
        limit -= 1
        out = elide(text, limit)
    return out


def _hide(kept: list[TextColumn], hidden: list[str], columns: list[TextColumn]) -> None:
    """Move ``columns`` from ``kept`` to ``hidden`` (their headers)."""
    for column in columns:
        kept.remove(column)
        hidden.append(column.header.strip() or column.name)


def _shrink_names(columns: list[TextColumn], width: int, floor: int,
                  label_floor: int = 0) -> None:
    """Elide the name columns, widest first, until the table fits or each is at ``floor``
    (and at its deepest tree prefix with ``label_floor`` characters of label)."""
    for column in sorted((c for c in columns if c.identity), key=lambda c: -c.width):
        excess = table_width(columns) - width
        if excess <= 0:
            return
        deepest = max(map(len, column.prefixes), default=0) if column.prefixes else 0
        # a prefix with no room for its label even alone on the line is squeezed (deeper
        # than the width: a 180-level chain drew 720 characters of guides)
        deepest = min(deepest, width - LABEL_FLOOR)
        target = max(floor, deepest + label_floor, column.width - excess, 1)
        if target < column.width:
            _elide(column, target)


_LEAD_ORDER = ("backward", "bytes", "time", "count", "params")
"""The quantities whose first column is hidden after every other column of every quantity,
in the order they go: the backward counts first, then memory, time, the forward counts; the
parameters (the leftmost number of every default view) stay longest."""


def _quantity(column: TextColumn) -> str | None:
    """The quantity of a numeric column (one of :data:`_LEAD_ORDER`), ``None`` for any
    other (flags, ratios, indices): those are hidden with the second columns."""
    if column.kind in ("time", "bytes"):
        return column.kind
    if column.kind != "count":
        return None
    if "backward" in column.name:
        return "backward"
    return "params" if column.name.endswith("params") else "count"


def _device_time(column: TextColumn) -> bool:
    """A time the device took (the kernel clock's ``device_ms``, ``self_device_ms``...)."""
    return column.kind == "time" and "device" in column.name


def _numbers_order(numbers: list[TextColumn]) -> list[TextColumn]:
    """Numeric columns (left to right) in the order step 4 hides them."""
    leads: dict[str, TextColumn] = {}
    # the device's times lead the time quantity and are its last seconds to go: on a GPU
    # they are what the profile is read for, and the host times beside them come first
    # in the tree (the kernel clock's summary showed host times and hid "device" at 80)
    for column in [*filter(_device_time, numbers), *numbers]:
        quantity = _quantity(column)
        if quantity is not None and column.kind not in ("percent", "fraction"):
            leads.setdefault(quantity, column)
    firsts = list(leads.values())
    shares = [c for c in reversed(numbers) if c.kind in ("percent", "fraction")]
    seconds = sorted((c for c in reversed(numbers) if c not in firsts and c not in shares),
                     key=_device_time)
    ranked = sorted(firsts, key=lambda c: _LEAD_ORDER.index(_quantity(c) or "count"))
    return [*seconds, *ranked, *shares]


def _drop_order(columns: list[TextColumn], optional: Sequence[str],
                keep: Sequence[str] = ()) -> list[TextColumn | None]:
    """The columns that may be hidden, in the order they are (steps 2 and 4); ``None``
    marks where the names are elided to their floor (step 3). The ``keep`` columns follow
    every other, through the same steps."""
    hideable = [c for c in columns if not c.identity]
    kept = [c for c in hideable if c.name in keep]
    others = [c for c in hideable if c not in kept]
    return [*_steps(others, optional), *_steps(kept, ())]


def _steps(hideable: list[TextColumn], optional: Sequence[str]) -> list[TextColumn | None]:
    """Steps 2 to 4 for ``hideable`` (nothing when it is empty)."""
    if not hideable:
        return []
    chosen = [c for name in optional for c in hideable if c.name == name]
    texts = [c for c in hideable if not c.right and c not in chosen]
    inputs = [c for c in texts if c.name.startswith("input")]
    others = [c for c in reversed(texts) if c not in inputs]
    numbers = [c for c in hideable if c.right and c not in chosen]
    return [*(c for c in chosen if not c.right), *inputs, *others, None,
            *(c for c in chosen if c.right), *_numbers_order(numbers)]


def fit_columns(columns: list[TextColumn], width: int | None,
                optional: Sequence[str] = (),
                keep: Sequence[str] = (),
                flags: Mapping[str, Sequence[str]] | None = None
                ) -> tuple[list[TextColumn], list[str]]:
    """``columns`` fitted into ``width`` (``None``: as they are); ``optional`` names the
    columns to hide first, ``keep`` those to hide last (the ones the caller asked for).
    ``flags`` maps a flag column to the columns it qualifies: it is shown while one of them
    is (hidden with the last of them, in the same step: a flag without its time says
    nothing; where the last of them is the last column left, the flag goes first), and
    after every other column where none of them is shown. Returns the columns kept (cells
    shortened in place) and the headers of the hidden ones."""
    if width is None or table_width(columns) <= width:
        return columns, []
    for shape in (c for c in columns if c.kind == "shape"):
        shape.cells = [cell if len(cell) <= SHAPE_CELL else
                       cell[:SHAPE_CELL - len(ELLIPSIS)] + ELLIPSIS for cell in shape.cells]
    flags = flags or {}
    flagged = [c for c in columns if c.name in flags]

    def qualified(flag: TextColumn, among: list[TextColumn]) -> list[TextColumn]:
        return [c for c in among if c.name.removesuffix("_pct") in flags[flag.name]]

    alone = [c for c in flagged if not qualified(c, columns)]
    order = [*(c for c in _drop_order(columns, optional, keep) if c not in flagged), *alone]
    kept = list(columns)
    hidden: list[str] = []
    for column in order:
        if table_width(kept) <= width:
            break
        if column is None:
            _shrink_names(kept, width, NAME_FLOOR, LABEL_FLOOR)
            continue
        rest = [c for c in kept if c is not column]
        orphans = [f for f in flagged if f in kept and f is not column
                   and qualified(f, [column]) and not qualified(f, rest)]
        if orphans and all(c.identity or c in orphans for c in rest):
            # the last column left keeps its value, without its flag, where that fits
            _hide(kept, hidden, orphans)
            if table_width(kept) <= width:
                break
        _hide(kept, hidden, [column, *(c for c in orphans if c in kept)])
    _shrink_names(kept, width, 1)
    return kept, hidden
