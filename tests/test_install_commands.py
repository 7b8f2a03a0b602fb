"""No install command points at the package index's ``moduleprofiler``: that name holds the
older 0.0.4, so ``pip install "moduleprofiler[plot]"`` in a fresh environment
installs another package. Until a release exists, extras install from a checkout
(``pip install ".[plot]"``) or from the repository (``"moduleprofiler[plot] @ git+..."``)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

FROM_THE_INDEX = re.compile(r"""pip install[\s'"]*moduleprofiler\[[^\]]*\]['"]?(?!\s*@)""")
"""``pip install "moduleprofiler[...]"`` (any quotes, split over lines or string literals),
except the direct reference ``"moduleprofiler[...] @ git+https://..."``."""


def _texts() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")),
            *sorted((ROOT / "moduleprofiler").rglob("*.py")),
            *sorted((ROOT / "examples").rglob("*.py"))]


def test_the_pattern_finds_the_forms_it_is_for() -> None:
    assert FROM_THE_INDEX.search('pip install "moduleprofiler[plot]"')
    assert FROM_THE_INDEX.search("pip install moduleprofiler[progress]")
    assert FROM_THE_INDEX.search("pip install\n'moduleprofiler[lightning]' (or lightning)")
    assert FROM_THE_INDEX.search("""'needs it: pip install '\n    '"moduleprofiler[x]" (or'""")
    assert not FROM_THE_INDEX.search('pip install "moduleprofiler[plot] @ git+https://x/y"')
    assert not FROM_THE_INDEX.search('pip install ".[plot]"')


def test_no_install_command_installs_the_index_package() -> None:
    hits = [f"{path.relative_to(ROOT)}:{text[:match.start()].count(chr(10)) + 1}: "
            f"{match.group(0)!r}"
            for path in _texts()
            for text in [path.read_text(encoding="utf-8")]
            for match in FROM_THE_INDEX.finditer(text)]
    assert hits == []
