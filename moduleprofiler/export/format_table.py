"""The format table: every output format's name, file suffixes and renderer, in one mapping.

``Profile.save``/``to_*``, ``View.save``/``to_*``, the command line and the 0.0.4 writers
all look formats up here, so a new format is one renderer plus one :func:`register_format`
entry. A renderer is a function of a view's data (:class:`ViewData`); its keyword-only
parameters are its options, every other option goes to the view. The built-in entries are
written out below: the table is whole as soon as this module is imported.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from moduleprofiler.export.csv_table import render_csv
from moduleprofiler.export.html_table import render_html
from moduleprofiler.export.io import Buffer, emit
from moduleprofiler.export.latex import render_latex
from moduleprofiler.export.markdown import render_markdown
from moduleprofiler.export.text import render_text
from moduleprofiler.export.view_data import ViewData
from moduleprofiler.validate import check_str

ProfileView = Literal["tree", "table", "frame", "report", "json"]
"""What a profile is written as in a format: one of its views (the module tree, the module
table, or the tidy frame with every column, ``aggregate=`` picking calls, modules or types),
or a whole-profile document (the HTML report, the reloadable JSON document), written by
:func:`moduleprofiler.export.formats.export_profile`."""
DOCUMENTS: tuple[ProfileView, ...] = ("report", "json")
"""The :data:`ProfileView` values that are whole-profile documents rather than views."""


@dataclass(frozen=True)
class Format:
    """One output format."""

    name: str
    suffixes: tuple[str, ...]
    """File suffixes that ask for it, the first one the default (``(".md", ".markdown")``)."""
    render: Callable[..., str] | None
    """``render(view, **options) -> str``; ``None`` when the format only holds a whole
    profile (JSON)."""
    view: ProfileView = "table"
    """What ``Profile.to_<name>`` and ``Profile.save`` write: a view of the profile, or a
    whole-profile document."""
    render_profile: Callable[..., str] | None = None
    """``render_profile(profile, **options) -> str``: a format of your own that writes the
    whole profile itself rather than a view of it."""


FORMATS: dict[str, Format] = {entry.name: entry for entry in (
    Format("csv", (".csv",), render_csv, view="frame"),
    Format("json", (".json",), None, view="json"),
    Format("markdown", (".md", ".markdown"), render_markdown),
    Format("html", (".html", ".htm"), render_html, view="report"),
    Format("latex", (".tex", ".latex"), render_latex),
    Format("text", (".txt", ".text"), render_text, view="tree"),
)}
"""Format name -> :class:`Format`: the built-in formats, then those registered."""


def register_format(name: str, suffixes: tuple[str, ...], render: Callable[..., str] | None,
                    *, view: ProfileView = "table",
                    render_profile: Callable[..., str] | None = None,
                    replace: bool = False) -> Format:
    """Add a format (or, with ``replace=True``, change one). ``render`` turns a view into
    text; ``render_profile`` a whole profile."""
    if not name.isidentifier():
        raise ValueError(f"format name must be an identifier, got {name!r}")
    if view not in get_args(ProfileView):
        raise ValueError(f"view must be one of {get_args(ProfileView)}, got {view!r}")
    if render is None and render_profile is None and view not in DOCUMENTS:
        raise ValueError(f"format {name!r} needs render or render_profile")
    if name in FORMATS and not replace:
        raise ValueError(f"format {name!r} is already registered; pass replace=True")
    taken = {suffix: other.name for other in FORMATS.values() if other.name != name
             for suffix in other.suffixes}
    clash = [suffix for suffix in suffixes if suffix.lower() in taken]
    if clash:
        raise ValueError(f"suffix {clash[0]!r} already means {taken[clash[0]]!r}")
    entry = Format(name, tuple(s.lower() for s in suffixes), render, view, render_profile)
    FORMATS[name] = entry
    return entry


def format_name(name: str) -> str:
    """The format a name or suffix asks for: ``"md"``/``".md"`` -> ``"markdown"``,
    ``"tex"`` -> ``"latex"``; ``ValueError`` if unknown."""
    check_str(name, "format")
    key = name.lower().lstrip(".")
    if key in FORMATS:
        return key
    for entry in FORMATS.values():
        if "." + key in entry.suffixes:
            return entry.name
    raise ValueError(f"unknown format {name!r} (known: {', '.join(known_formats())})")


def known_formats() -> list[str]:
    """Every name and suffix (without its dot) of the formats in :data:`FORMATS`, sorted:
    what an error about an unknown format lists."""
    return sorted({*FORMATS, *(s.lstrip(".") for f in FORMATS.values() for s in f.suffixes)})


def infer_format(path: str | os.PathLike[str]) -> str:
    """The format a file name asks for, from its suffix (``report.html`` -> ``"html"``)."""
    suffix = os.path.splitext(os.fspath(path))[1]
    if not suffix:
        suffixes = ", ".join(f.suffixes[0] for f in FORMATS.values())
        raise ValueError(f"cannot infer a format from {os.fspath(path)!r}: it has no suffix "
                         f"(use {suffixes}, or pass format=)")
    return format_name(suffix)


def get_format(name: str) -> Format:
    """The :class:`Format` of a name or suffix."""
    return FORMATS[format_name(name)]


def split_options(options: Mapping[str, Any],
                  render: Callable[..., Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(renderer options, view options)`` of ``options``: the renderer's options are its
    keyword-only parameters."""
    parameters = inspect.signature(render).parameters.values() if render is not None else ()
    names = {p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY}
    ours = {key: value for key, value in options.items() if key in names}
    return ours, {key: value for key, value in options.items() if key not in names}


def render_view(view: ViewData, name: str, buf: Buffer = None, **options: Any) -> str | None:
    """``view`` in format ``name``, returned (``buf=None``) or written to ``buf``."""
    entry = get_format(name)
    if entry.render is None:
        raise ValueError(f"a view cannot be written as {entry.name}; "
                         f"use Profile.save or Profile.to_{entry.name}")
    return emit(entry.render(view, **options), buf)
