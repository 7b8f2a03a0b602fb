"""Where text goes: ``buf=None`` returns it, a path or a file object receives it."""

from __future__ import annotations

import os
from typing import IO

PathLike = str | os.PathLike[str]
Buffer = PathLike | IO[str] | None
"""``None`` (return the text), a path (write the file, UTF-8) or a text file object."""


def emit(text: str, buf: Buffer) -> str | None:
    """Return ``text`` when ``buf`` is ``None``, else write it to the path or file object."""
    if buf is None:
        return text
    if isinstance(buf, (str, os.PathLike)):
        with open(buf, "w", encoding="utf-8", newline="") as handle:
            handle.write(text)
    else:
        buf.write(text)
    return None


def check_path(value: object, name: str = "path") -> PathLike:
    """``value`` when it is a file path (a ``str`` or ``os.PathLike``), else a ``TypeError``
    naming the argument: before any work, not from ``open`` after the pass."""
    if isinstance(value, (str, os.PathLike)):
        return value
    shown = "None" if value is None else f"{type(value).__name__} {value!r:.40}"
    raise TypeError(f"{name} must be a file path (a str or os.PathLike), got {shown}")


def with_suffix(file: PathLike, suffix: str) -> str:
    """``file`` with ``suffix`` appended unless it already ends with it.

    0.0.4 produced ``name..csv``; here ``"ops"`` -> ``"ops.csv"`` and ``"ops.csv"`` stays.
    """
    name = os.fspath(file)
    return name if name.lower().endswith(suffix) else name + suffix
