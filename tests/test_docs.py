"""Every Python code block in the documentation pages runs as written.

Blocks of one page run in order in one namespace, as a reader would run them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.documented import matches, run_page

DOCS = Path(__file__).resolve().parent.parent / "docs"
# Pages whose examples are executed here; exports.md and cli.md run in tests/export/test_docs.py.
PAGES = [
    "index.md", "architecture.md", "conventions.md", "extending.md", "migration.md",
    "operators.md", "memory.md", "timing.md", "language_models.md", "efficiency.md",
    "prediction.md", "compiled.md",
    *sorted(str(p.relative_to(DOCS)) for p in (DOCS / "formulas").glob("*.md")),
    *sorted(str(p.relative_to(DOCS)) for p in (DOCS / "integrations").glob("*.md")),
]


def blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(encoding="utf-8"), re.S)


@pytest.mark.parametrize("page", PAGES)
def test_docs_page_examples_run(page: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The examples run in order; an output shown after one is what it prints now."""
    monkeypatch.setenv("COLUMNS", "80")
    namespace: dict[str, object] = {"__name__": "__docs__"}
    run_page(DOCS / page, f"docs/{page}", namespace)


def test_a_drifted_number_fails() -> None:
    printed = "module  ops\nfc      312\nrelu     24\ntotal: ops 336\n"
    assert matches("module  ops\nfc      312\nrelu     24\ntotal: ops 336\n", printed)
    assert matches("module  ops\n...\ntotal: ops 336", printed)  # an elided middle
    assert not matches("module  ops\nfc      311\n...\ntotal: ops 336\n", printed)
    assert not matches("module  ops\nfc      312\n", printed)  # a missing end


def test_every_page_with_examples_is_executed_somewhere() -> None:
    executed = set(PAGES) | {"exports.md", "cli.md", "distributed.md"}
    pages = (str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md"))
    with_examples = {page for page in pages if blocks(page)}
    assert with_examples <= executed


def test_terminal_screenshots_are_as_wide_as_the_terminal(tmp_path: Path) -> None:
    """docs/img/make_images.py draws text in a window of exactly its columns, and refuses a
    line that would not fit."""
    pytest.importorskip("matplotlib")
    pytest.importorskip("transformers")
    import runpy

    from matplotlib.image import imread

    script = runpy.run_path(str(DOCS / "img" / "make_images.py"), run_name="__images__")
    draw = script["terminal_png"]
    draw("x" * 40 + "\nsecond line", 40, tmp_path / "narrow.png", "40 columns")
    draw("x" * 40 + "\nsecond line", 80, tmp_path / "wide.png", "80 columns")
    narrow, wide = imread(tmp_path / "narrow.png"), imread(tmp_path / "wide.png")
    assert narrow.shape[0] == wide.shape[0]  # the same two lines
    # the text area doubles (2 x 40 columns), the 8 pt margins (2 x 8 / 72 x 150 px) do not
    margins = round(2 * 8 / 72 * 150)
    assert abs((wide.shape[1] - margins) - 2 * (narrow.shape[1] - margins)) <= 2
    with pytest.raises(ValueError, match="a line of 41 characters does not fit 40 columns"):
        draw("x" * 41, 40, tmp_path / "too_wide.png", "40 columns")


def test_the_gpt2_tree_sizes_in_the_prose() -> None:
    """The sizes exports.md gives for GPT-2's tree are measured: it fits 80 and 120 columns
    folded, and is as wide and as long as stated without fitting or folding."""
    pytest.importorskip("transformers")
    import runpy

    text = runpy.run_path(str(DOCS / "img" / "make_images.py"),
                          run_name="__images__")["gpt2_tree_text"]
    stated = re.search(r"the same tree is (\d+) columns wide and (\d+) lines long",
                       " ".join((DOCS / "exports.md").read_text(encoding="utf-8").split()))
    assert stated is not None
    lines = text(0, fold=False).splitlines()
    assert (max(map(len, lines)), len(lines)) == (int(stated[1]), int(stated[2]))
    for columns in (80, 120):
        assert max(map(len, text(columns).splitlines())) <= columns
