"""Where text goes: ``buf=None`` returns it, a path or a file object receives it; and which
format a file name asks for."""

from __future__ import annotations

import os
from typing import IO, Literal, cast, get_args

PathLike = str | os.PathLike[str]
Buffer = PathLike | IO[str] | None
"""``None`` (return the text), a path (write the file, UTF-8) or a text file object."""

Format = Literal["csv", "json", "markdown", "html", "latex", "text"]
FORMATS: tuple[str, ...] = get_args(Format)

_ALIASES = {
    "csv": "csv", "json": "json", "md": "markdown", "markdown": "markdown", "html": "html",
    "htm": "html", "tex": "latex", "latex": "latex", "txt": "text", "text": "text",
}


def format_name(name: str) -> Format:
    """``"md"`` -> ``"markdown"``, ``"tex"`` -> ``"latex"``, ...; ``ValueError`` if unknown."""
    key = name.lower().lstrip(".")
    if key not in _ALIASES:
        known = ", ".join(sorted(_ALIASES))
        raise ValueError(f"unknown format {name!r} (known: {known})")
    return cast(Format, _ALIASES[key])


def infer_format(path: PathLike) -> Format:
    """The format a file name asks for, from its suffix (``report.html`` -> ``"html"``)."""
    suffix = os.path.splitext(os.fspath(path))[1]
    if not suffix:
        raise ValueError(f"cannot infer a format from {os.fspath(path)!r}: it has no suffix "
                         "(use .csv, .json, .md, .html, .tex or .txt, or pass format=)")
    return format_name(suffix)


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
