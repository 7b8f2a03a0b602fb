"""Golden files: ``assert_golden(name, text)`` compares ``text`` with ``tests/golden/<name>``.

Run with ``UPDATE_GOLDEN=1`` to (re)write the files instead, then review the diff.
The package version is replaced by ``<version>`` so a release does not touch the files.
"""

from __future__ import annotations

import difflib
import os
from pathlib import Path

from moduleprofiler import __version__

GOLDEN = Path(__file__).resolve().parent.parent / "golden"


def updating() -> bool:
    """Whether this run rewrites golden files (``UPDATE_GOLDEN=1``)."""
    return os.environ.get("UPDATE_GOLDEN", "") not in ("", "0")


def normalise(text: str) -> str:
    return text.replace(__version__, "<version>")


def assert_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    actual = normalise(text)
    if updating():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(actual, encoding="utf-8", newline="")
        return
    assert path.exists(), f"{path} is missing; run the tests with UPDATE_GOLDEN=1 to create it"
    expected = path.read_text(encoding="utf-8")
    if actual != expected:
        diff = "".join(list(difflib.unified_diff(
            expected.splitlines(keepends=True), actual.splitlines(keepends=True),
            fromfile=f"golden/{name}", tofile="actual"))[:80])
        raise AssertionError(f"{name} differs from its golden file "
                             f"(UPDATE_GOLDEN=1 rewrites it):\n{diff}")
