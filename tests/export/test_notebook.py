"""``_repr_html_`` of a profile and of every kind of view: one ``<div>`` per rendering with an
id of its own, every style rule scoped by that id, every name escaped."""

from __future__ import annotations

import re

import pytest

from moduleprofiler.export import compare, summary
from tests.export import real_profiles
from tests.export.profiles import SCRIPT, hostile, tiny

RENDERINGS = {
    "profile": lambda: tiny()._repr_html_(),
    "tree": lambda: tiny().tree()._repr_html_(),
    "table": lambda: tiny().table(aggregate="call")._repr_html_(),
    "top": lambda: tiny().top(3)._repr_html_(),
    "summary": lambda: summary({"a": tiny(), "b": hostile()})._repr_html_(),
    "compare": lambda: compare(tiny(), tiny())._repr_html_(),
    "hostile": lambda: hostile()._repr_html_(),
}


def _selectors(page: str) -> list[str]:
    """Every selector of every style sheet of ``page``."""
    sheets = re.findall(r"<style[^>]*>(.*?)</style>", page, re.S)
    return [s.strip() for sheet in sheets for rule in re.findall(r"([^{}]+)\{", sheet)
            for s in rule.split(",")]


@pytest.mark.parametrize("name", list(RENDERINGS))
def test_each_rendering_has_its_own_scoped_id(name: str) -> None:
    first, second = RENDERINGS[name](), RENDERINGS[name]()
    element = re.match(r'<div id="(mp[0-9a-f]{12})" class="moduleprofiler">', first)
    assert element is not None, first[:200]
    other = re.match(r'<div id="(mp[0-9a-f]{12})"', second)
    assert other is not None and other.group(1) != element.group(1)
    ids = re.findall(r'\sid="([^"]+)"', first)
    assert len(ids) == len(set(ids))
    assert all(i == element.group(1) or i.startswith(f"T_{element.group(1)}") for i in ids)
    selectors = _selectors(first)
    assert selectors and all(s.startswith((f"#{element.group(1)}", f"#T_{element.group(1)}"))
                             for s in selectors)


def test_names_and_notes_are_escaped() -> None:
    page = hostile()._repr_html_()
    assert SCRIPT not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    tiny_page = tiny()._repr_html_()
    # tiny's totals and its caveats (one module without a formula, one never called)
    assert "total: params 1.58K" in tiny_page
    assert "note: ops unknown or partial in 1 module(s): custom" in tiny_page


def test_a_tree_folds_identical_blocks_as_its_text_does() -> None:
    page = real_profiles.gpt2()._repr_html_()
    # GPT-2's 12 identical blocks show once, as h.0-11 with their numbers summed
    assert ">h.0-11<" in page and ">h.1<" not in page
    assert page.count("<tr>") == len(real_profiles.gpt2().tree().folded().df) + 1
