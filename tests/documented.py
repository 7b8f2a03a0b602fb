"""Documented output is the code's output: a page's example runs, and the output block shown
after it must be what it prints now, so that no number in the docs drifts from the code.

In a shown block, a line ``...`` stands for any number of lines (an elided middle); trailing
spaces do not count. ``UPDATE_DOCS=1`` rewrites the shown blocks from what the code prints
(keeping an elided block's first and last lines as many as before); review the diff.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

FENCE = re.compile(r"```(\w*)\n(.*?)```", re.S)


def fences(text: str) -> list[tuple[str, str, bool]]:
    """``(language, body, follows)`` of every fenced block of a Markdown text, in order;
    ``follows``: only blank lines separate it from the block before."""
    found = list(FENCE.finditer(text))
    return [(match.group(1), match.group(2),
             index > 0 and not text[found[index - 1].end():match.start()].strip())
            for index, match in enumerate(found)]


def matches(shown: str, actual: str) -> bool:
    """Whether ``actual`` is ``shown`` line for line, each ``...`` line standing for any
    lines."""
    parts = [re.escape(line.rstrip()) for line in shown.rstrip("\n").splitlines()]
    pattern = "\n".join("(?:.*\n)*?.*" if part == re.escape("...") else part for part in parts)
    cleaned = "\n".join(line.rstrip() for line in actual.rstrip("\n").splitlines())
    return re.fullmatch(pattern, cleaned) is not None


def regenerated(shown: str, actual: str) -> str:
    """``actual`` in the form of ``shown``: as many lines before and after a ``...`` line as
    ``shown`` has (all of ``actual`` when it has none)."""
    lines = shown.rstrip("\n").splitlines()
    printed = [line.rstrip() for line in actual.rstrip("\n").splitlines()]
    if "..." not in lines:
        return "\n".join(printed) + "\n"
    cut = lines.index("...")
    tail = len(lines) - cut - 1
    return "\n".join([*printed[:cut], "...", *printed[len(printed) - tail:]]) + "\n"


def assert_shown(shown: str, actual: str, where: str) -> None:
    """An ``AssertionError`` that shows both texts unless :func:`matches`."""
    assert matches(shown, actual), (
        f"{where}: the documented output is not what the code prints now; update the page "
        f"with the output below\n--- documented\n{shown}--- printed now\n{actual}")


def run_page(path: Path, origin: str, namespace: dict[str, object]) -> int:
    """Run every ``python`` block of ``text`` in order in ``namespace``; a ``text`` block
    right after a python block that prints (only blank lines between them) is checked
    against what it printed. Returns the number of outputs checked."""
    text = path.read_text(encoding="utf-8")
    update = os.environ.get("UPDATE_DOCS", "") not in ("", "0")
    checked = 0
    printed: str | None = None
    for index, (language, body, follows) in enumerate(fences(text)):
        if language == "python":
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(compile(body, f"{origin} block {index}", "exec"), namespace)
            printed = out.getvalue() or None
            continue
        if language == "text" and follows and printed is not None:
            if update and not matches(body, printed):
                fresh = regenerated(body, printed)
                path.write_text(path.read_text(encoding="utf-8").replace(
                    f"```text\n{body}```", f"```text\n{fresh}```", 1), encoding="utf-8")
                body = fresh
            assert_shown(body, printed, f"{origin} block {index}")
            checked += 1
        printed = None
    return checked
