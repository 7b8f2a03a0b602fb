"""How many terminal columns a text takes: CJK characters and most emoji take two, combining
marks and zero-width format characters none, so that a table aligns by what is seen, not by
how many code points a name has."""

from __future__ import annotations

import unicodedata

__all__ = ["display_width", "pad"]

_WIDE = ("W", "F")
"""East Asian widths a terminal draws two columns wide (wide, fullwidth)."""
_ZERO = ("Mn", "Me", "Cf")
"""Categories drawn in no column of their own: combining marks, zero-width format characters
(joiners, direction marks)."""


def display_width(text: str) -> int:
    """The columns ``text`` takes in a terminal (``"中文"`` is 4, ``"é"`` written as ``e`` and a
    combining accent is 1)."""
    if text.isascii():
        return len(text)
    return sum(0 if unicodedata.category(ch) in _ZERO
               else 2 if unicodedata.east_asian_width(ch) in _WIDE else 1 for ch in text)


def pad(text: str, size: int, right: bool = False) -> str:
    """``text`` padded with spaces to ``size`` columns, on its left when ``right``."""
    spaces = " " * max(size - display_width(text), 0)
    return spaces + text if right else text + spaces
