"""The documentation site builds with ``mkdocs build --strict`` (no broken links, no warnings),
its warnings shown in full when it does not."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


HAS_MKDOCS = shutil.which("mkdocs") is not None or Path(sys.executable).with_name("mkdocs").exists()


@pytest.mark.skipif(not HAS_MKDOCS, reason="mkdocs is not installed")
def test_mkdocs_build_strict(tmp_path: Path) -> None:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=300,
    )
    log = result.stdout + result.stderr
    assert result.returncode == 0, log
    assert "WARNING" not in log, log  # strict mode aborts on them; none may hide
    assert (tmp_path / "site" / "index.html").exists()


def test_the_glossary_is_the_registry() -> None:
    """docs/glossary.md is generated from the column registry; it names every registered
    column once (``python docs/make_glossary.py`` rewrites it)."""
    result = subprocess.run([sys.executable, "docs/make_glossary.py", "--check"], cwd=ROOT,
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    # each column once (the check runs in a fresh process: columns that tests register in
    # this one are not the package's)
    page = (ROOT / "docs" / "glossary.md").read_text(encoding="utf-8")
    names = [line.split("`")[1] for line in page.splitlines() if line.startswith("| `")]
    assert len(names) == len(set(names)) and {"ops", "time_median_ms", "saved_bytes"} <= set(names)
