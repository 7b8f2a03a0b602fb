"""Every format of the same two hand-built profiles, against golden files."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from moduleprofiler.export import summary
from tests.export.golden import assert_golden
from tests.export.profiles import hostile, tiny

CASES: dict[str, Callable[[], str | None]] = {
    "tiny.txt": lambda: str(tiny()),
    "tiny_unicode.txt": lambda: tiny().tree().to_text(unicode=True),
    "tiny_table.txt": lambda: str(tiny().table(["calls", "self_ops", "self_ops_pct", "params"],
                                               sort_by="self_ops", limit=4)),
    "tiny_top.txt": lambda: f"{tiny().top(3)}\n\n{tiny().top(3, by='macs', depth=1)}",
    "tiny.csv": lambda: tiny().to_csv(),
    "tiny_modules.csv": lambda: tiny().to_csv(aggregate="module"),
    "tiny.md": lambda: tiny().to_markdown(),
    "tiny.json": lambda: tiny().to_json(),
    "tiny.tex": lambda: tiny().to_latex(caption="Ops of the tiny_net", label="tab:tiny",
                                        max_depth=1),
    "tiny.html": lambda: tiny().to_html(),
    "summary.tex": lambda: summary({"tiny": tiny(), "hostile_net": hostile()}).to_latex(
        caption="Two models", label="tab:models"),
    "hostile.txt": lambda: str(hostile()),
    "hostile.md": lambda: hostile().to_markdown(),
    "hostile.tex": lambda: hostile().to_latex(caption="Hostile {names} & 100% _escaped_"),
    "hostile.html": lambda: hostile().to_html(),
}


@pytest.mark.parametrize("name", list(CASES))
def test_golden(name: str) -> None:
    text = CASES[name]()
    assert text is not None
    assert_golden(name, text)
