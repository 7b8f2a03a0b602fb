"""Every Python code block in the documentation pages runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
# Pages whose examples are executed here; pages of other features run theirs in their own tests.
PAGES = ["index.md", "conventions.md", "extending.md", "migration.md", "operators.md", "memory.md",
         *sorted(str(p.relative_to(DOCS)) for p in (DOCS / "formulas").glob("*.md"))]
BLOCKS = [
    (page, index, block)
    for page in PAGES
    for index, block in enumerate(
        re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(encoding="utf-8"), re.S)
    )
]


@pytest.mark.parametrize(("page", "index", "block"), BLOCKS,
                         ids=[f"{page}:{index}" for page, index, _ in BLOCKS])
def test_docs_block_runs(page: str, index: int, block: str) -> None:
    exec(compile(block, f"docs/{page} block {index}", "exec"), {"__name__": "__docs__"})
