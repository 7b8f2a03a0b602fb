"""A view as a GitHub-flavoured Markdown pipe table (no extra dependency)."""

from __future__ import annotations

import re

from moduleprofiler.export.cells import UNICODE, formatter
from moduleprofiler.export.view_data import ViewData

_SPECIAL = re.compile(r"([\\`*_\[\]|~$])")
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def escape_markdown(text: str) -> str:
    """Text that renders literally inside a table cell: Markdown punctuation backslashed,
    ``& < >`` as HTML entities, line breaks as spaces."""
    text = "".join(_HTML.get(char, char) for char in text)
    text = _SPECIAL.sub(r"\\\1", text)
    return text.replace("\r", " ").replace("\n", " ")


def render_markdown(view: ViewData) -> str:
    """One header row, an alignment row (numbers right-aligned), one row per module, then the
    view's notes as a list (a table pasted on its own must still say which of its numbers are
    lower bounds; the 0.0.4 writers' raw tables stay bare)."""
    specs = view.specs(view.data_columns)
    headers = [escape_markdown(spec.label) for spec in specs.values()]
    align = ["---:" if spec.numeric else ":---" for spec in specs.values()]
    columns = []
    for name, spec in specs.items():
        format_cell = formatter(spec, UNICODE, raw=view.raw)
        columns.append([escape_markdown(format_cell(value)) for value in view.frame[name]])
    lines = ["| " + " | ".join(headers) + " |", "| " + " | ".join(align) + " |"]
    lines.extend("| " + " | ".join(row) + " |" for row in zip(*columns))
    if view.notes and not view.raw:
        lines.append("")
        lines.extend(f"- note: {escape_markdown(note)}" for note in view.notes)
    return "\n".join(lines) + "\n"
