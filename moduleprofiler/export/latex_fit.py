"""How wide a LaTeX table typesets, and which columns and name lengths make it fit a width.

Widths are those of Computer Modern at 10 pt, the ``article`` default (the wider of the OT1
and T1 encodings for each character, measured with pdflatex), plus ``\\tabcolsep`` (6 pt)
on each side of every inner column edge (the tables start and end with ``@{}``). Kerning is
covered by a small margin. A table that is still too wide once the optional columns are gone
and the names are as short as they may get is scaled down to the width (``\\resizebox``).
Names are shortened at dots only (:func:`~moduleprofiler.export.names.elide_path`).

Heights are those of a booktabs ``tabular`` in a float, measured with pdflatex: 12 pt a row,
the rules, the caption and the note line under the table (:func:`float_height`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from moduleprofiler.export.cells import Glyphs
from moduleprofiler.export.names import elide_path

LINEWIDTH_PT = 345.0
"""``\\linewidth`` of a one-column ``article`` at 10 pt (letter or A4 paper)."""
WIDE_PT = 452.0
"""``\\textwidth`` of a two-column ``article`` at 10 pt on A4 paper (469 pt on letter): the
width of a ``table*``."""
TABCOLSEP_PT = 6.0
SAFETY = 1.02
"""Estimated widths are multiplied by this (kerning, and fonts a little wider than CM)."""
NAME_LIMITS = (30, 24, 20, 16, 12)
"""Characters a name may keep: the first limit applies before any column is left out, the
others one after another once the optional columns are gone."""

TEXTHEIGHT_PT = 550.0
"""``\\textheight`` of an ``article`` at 10 pt on letter paper, one column or two (598 pt on
A4): the tallest a float may be before LaTeX says "Float too large" and drops what is below."""
ROW_PT = 12.0
"""One row of a ``tabular`` (``\\baselineskip`` at 10 pt); a header on several lines takes
one of these a line."""
RULES_PT = 11.2
"""booktabs' top, middle and bottom rules with their separations (11.14 pt measured)."""
CAPTION_SKIP_PT = 8.0
"""A caption's ``\\abovecaptionskip`` (10 pt) less what its first line takes below 12 pt
(a one-line caption adds 19.9 pt, measured)."""
NOTE_SKIP_PT = 3.0
"""The ``\\smallskip`` above the note line under a table."""
NOTE_LINE_PT = 9.5
"""One line of the note (``\\footnotesize``: 8 pt type on 9.5 pt)."""
NOTE_SCALE = 0.8
"""The note's type size relative to the table's (8 pt against 10 pt)."""

MEASURE = Glyphs(micro="µ", percent="%", missing="–", less="<")
"""The glyphs cells are measured with (each as wide as what the LaTeX glyphs typeset)."""

_GROUPS: tuple[tuple[str, float], ...] = (
    ("!',.:;[]`il", 2.78), ("fj", 3.06), (" -", 3.33), ("I", 3.61),
    ("()t", 3.89), ("r", 3.92), ("s", 3.94), ("cez", 4.44), ("?", 4.72),
    ('0123456789"*/\\{}$ago–', 5.0), ("J", 5.14), ("kqvxy", 5.28), ("bdhnpuS", 5.56),
    ("~^Z", 6.11), ("L", 6.25), ("F", 6.53), ("EP", 6.81), ("CTw", 7.22),
    ("R", 7.36), ("B", 7.08), ("AHNUVXY", 7.5), ("D", 7.64), ("&+<=>@KOQ_", 7.78), ("G", 7.85),
    ("#%m", 8.33), ("M", 9.17), ("|", 10.0), ("W", 10.28),
)
_WIDTH = {char: width for chars, width in _GROUPS for char in chars}
_WIDTH["µ"] = 5.56
_WIDTH["·"] = 2.78  # \textperiodcentered, the dot of the FLOPs (2·MACs) header
_UNKNOWN = 10.0
"""A character not in the table counts as one em: too wide rather than too narrow."""


def text_width(text: str) -> float:
    """Points that ``text`` takes when typeset in Computer Modern at 10 pt."""
    return sum(_WIDTH.get(char, _UNKNOWN) for char in text)


@dataclass(frozen=True)
class Fit:
    """What a table keeps to fit its width."""

    columns: tuple[str, ...]
    name_limit: int | None
    """Characters each name keeps (:func:`~moduleprofiler.export.names.elide_path`);
    ``None``: names whole."""
    scale: bool
    """Still too wide: scale the table down to the width."""
    width: float
    """The estimated natural width in points, as laid out (before any scaling)."""


def table_width(headers: Mapping[str, str], cells: Mapping[str, Sequence[str]],
                names: Sequence[str] = (), name_limit: int | None = None) -> float:
    """Estimated width in points of a table of these columns (``@{}`` at both ends), the
    ``names`` columns shortened to ``name_limit`` characters."""
    total = 2 * TABCOLSEP_PT * max(len(headers) - 1, 0)
    for name, header in headers.items():
        texts = cells[name]
        if name_limit is not None and name in names:
            texts = [elide_path(text, name_limit) for text in texts]
        total += max([text_width(header), *(text_width(text) for text in texts)])
    return total * SAFETY


def fit_table(headers: Mapping[str, str], cells: Mapping[str, Sequence[str]], width: float,
              *, optional: Sequence[str] = (), names: Sequence[str] = ()) -> Fit:
    """The first way a table fits ``width`` points: as it is; with names shortened to
    30 characters; then leaving out the ``optional`` columns one at a time (in order);
    then shorter names, down to 12 characters; else scaled down, names at 30 characters."""
    kept = dict(headers)
    steps: list[tuple[int | None, str | None]] = [(None, None), (NAME_LIMITS[0], None)]
    steps += [(NAME_LIMITS[0], column) for column in optional if column in kept]
    steps += [(limit, None) for limit in NAME_LIMITS[1:]]
    for limit, drop in steps:
        if drop is not None:
            kept.pop(drop)
        natural = table_width(kept, cells, names, limit)
        if natural <= width:
            return Fit(tuple(kept), limit, False, natural)
    # Scaled anyway: names keep the first limit rather than shrinking the scale a little.
    limit = NAME_LIMITS[0]
    return Fit(tuple(kept), limit, True, table_width(kept, cells, names, limit))


def text_lines(text: str, width: float, scale: float = 1.0) -> int:
    """The lines ``text`` takes when set as a paragraph ``width`` points wide, its type
    ``scale`` times 10 pt (0 for no text)."""
    if not text:
        return 0
    return max(1, math.ceil(text_width(text) * scale * SAFETY / width))


def float_height(rows: int, *, header_lines: int = 1, caption_lines: int = 0,
                 note_lines: int = 0) -> float:
    """Points a booktabs ``tabular`` of ``rows`` rows takes in a float: its header on
    ``header_lines`` lines, a caption of ``caption_lines`` lines above it and a note of
    ``note_lines`` lines below it (each 0 for none)."""
    height = ROW_PT * (rows + header_lines) + RULES_PT
    if caption_lines:
        height += CAPTION_SKIP_PT + ROW_PT * caption_lines
    if note_lines:
        height += NOTE_SKIP_PT + NOTE_LINE_PT * note_lines
    return height
