"""Which of the command line's rendering options each output takes: the table the command
line refuses an option by, before anything runs, so that no option is dropped in silence
(``--title`` in a CSV file, ``--width`` in a LaTeX table, ``--color`` in a file).

Standard library only, as :mod:`moduleprofiler.cli_options` (the built-in formats' names and
suffixes are repeated from ``moduleprofiler.export.format_table.FORMATS``; tests/test_cli.py
holds the two equal).
"""

from __future__ import annotations

FORMAT_SUFFIXES: dict[str, tuple[str, ...]] = {
    "csv": (".csv",), "json": (".json",), "markdown": (".md", ".markdown"),
    "html": (".html", ".htm"), "latex": (".tex", ".latex"), "text": (".txt", ".text")}
"""The built-in formats and their file suffixes (``FORMATS``' names and suffixes)."""

WHOLE_PROFILE = ("json", "html")
"""Formats that write the whole profile (the reloadable JSON, the HTML report), not a view:
the options that shape a view have no place in them."""

RENDER_FLAGS: dict[str, str] = {
    "--title": "the HTML report and figures",
    "--caption": "LaTeX tables",
    "--label": "LaTeX tables",
    "--width": "tables in text",
    "--unicode": "module and sweep tables in text",
    "--no-fold": "the module tree in text or LaTeX",
    "--color": "module and sweep tables printed to the terminal (no -o)",
}
"""The rendering options, and what each is for (said when refused)."""

_TAKES: dict[tuple[str, str], frozenset[str]] = {
    # (what is written, format) -> the rendering options it takes; "text" on stdout adds --color
    ("view", "text"): frozenset({"--width", "--unicode", "--no-fold"}),
    ("view", "latex"): frozenset({"--caption", "--label", "--no-fold"}),
    ("view", "html"): frozenset({"--title"}),  # the report
    ("view", "figure"): frozenset({"--title"}),
    ("operators", "text"): frozenset({"--width", "--unicode"}),  # a flat table: no folding
    ("operators", "latex"): frozenset({"--caption", "--label"}),
    ("sweep", "text"): frozenset({"--width", "--unicode"}),
    ("sweep", "latex"): frozenset({"--caption", "--label"}),
    ("sweep", "figure"): frozenset({"--title"}),
    ("generate", "text"): frozenset({"--width"}),
}
"""Every (output, format) pair not listed takes none (CSV, JSON and Markdown take none)."""


def builtin_format(name: str) -> str | None:
    """The built-in format a ``--format`` value or a suffix names (``"md"``, ``".tex"``), or
    ``None`` (not built in: the format table answers it when the command runs)."""
    key = name.lower().lstrip(".")
    if key in FORMAT_SUFFIXES:
        return key
    return next((fmt for fmt, suffixes in FORMAT_SUFFIXES.items()
                 if "." + key in suffixes), None)


def render_flags_taken(output: str, fmt: str, stdout: bool) -> frozenset[str]:
    """The rendering options ``output`` (``"view"``, ``"operators"``, ``"sweep"``,
    ``"generate"``, ``"kv-cache"`` or ``"per"``) takes in ``fmt`` (a built-in format or
    ``"figure"``); ``stdout``: written to the terminal, where text takes ``--color``."""
    taken = _TAKES.get((output, fmt), frozenset())
    if fmt == "text" and stdout and output in ("view", "operators", "sweep"):
        taken |= {"--color"}
    return taken


def refusal(flags: list[str], target: str) -> str:
    """The one line that refuses ``flags`` for ``target`` (``"--format csv"``), each with
    what it is for."""
    verb = "does" if len(flags) == 1 else "do"
    uses = "; ".join(f"{flag} is for {RENDER_FLAGS[flag]}" for flag in flags)
    return f"{', '.join(flags)} {verb} not apply to {target} ({uses})"
