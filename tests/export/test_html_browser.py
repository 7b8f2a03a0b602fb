"""The HTML report in a real browser (headless Chromium through chromedriver): it renders,
its script runs without error, it loads nothing from the network, sorting / filtering /
collapsing work, and hostile names stay text. Skipped when Chromium or chromedriver is
missing (Debian packages ``chromium``, ``chromium-driver``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from moduleprofiler import ModuleProfiler
from tests.export import browser
from tests.export.profiles import IMG, LATEX_SOUP, SCRIPT, hostile, hostile_model

pytestmark = pytest.mark.skipif(
    not browser.available(),
    reason="chromium/chromedriver not installed (apt-get install chromium chromium-driver)")

DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img" / "report.png"


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Iterator[browser.Browser]:
    directory = tmp_path_factory.mktemp("report")
    model, x = hostile_model()
    report = directory / "report.html"
    ModuleProfiler().profile(model, x).save(report)
    with browser.browser() as session:
        session.resize(1280, 1000)
        session.open(report)
        yield session


def test_script_ran_without_errors(page: browser.Browser) -> None:
    assert page.run("return document.documentElement.getAttribute('data-ready')") == "1"
    errors = [entry for entry in page.console() if entry.get("level") == "SEVERE"]
    assert errors == []


def test_no_network_requests(page: browser.Browser) -> None:
    assert page.run("return performance.getEntriesByType('resource').length") == 0
    assert page.run("return document.querySelectorAll('link, img, iframe, [src]').length") == 0


def test_expected_elements(page: browser.Browser) -> None:
    counts: dict[str, Any] = page.run("""return {
        cards: document.querySelectorAll('#summary .card').length,
        charts: document.querySelectorAll('#charts figure').length,
        bars: document.querySelectorAll('#charts .bar').length,
        details: document.querySelectorAll('#tree details').length,
        leaves: document.querySelectorAll('#tree .leaf').length,
        rows: document.querySelectorAll('#modules tbody tr').length,
        headers: document.querySelectorAll('#modules thead th').length,
        title: document.title};""")
    assert counts["cards"] >= 6 and counts["charts"] >= 2 and counts["bars"] >= 3
    assert counts["details"] == 2  # the root and the inner Sequential
    assert counts["leaves"] == 3
    assert counts["rows"] == 5 and counts["headers"] == 11
    assert counts["title"] == "Evil<b>&Type</b> profile"


def test_hostile_names_are_text(page: browser.Browser) -> None:
    found: dict[str, Any] = page.run("""return {
        scripts: document.scripts.length,
        imgs: document.getElementsByTagName('img').length,
        bold: document.querySelectorAll('body b').length,
        text: document.body.innerText};""")
    assert found["scripts"] == 1 and found["imgs"] == 0 and found["bold"] == 0
    for name in (SCRIPT, IMG, LATEX_SOUP, "Evil<b>&Type</b>"):
        assert name in found["text"]


def _column(page: browser.Browser, index: int) -> list[Any]:
    return list(page.run(
        "var i = arguments[0];"
        "return Array.from(document.querySelectorAll('#modules tbody tr')).map(function (r) {"
        " var s = r.cells[i].querySelector('[data-v]');"
        " return s ? (s.dataset.v === '' ? null : parseFloat(s.dataset.v))"
        " : r.cells[i].textContent; });", index))


def test_sorting(page: browser.Browser) -> None:
    headers = page.run("return Array.from(document.querySelectorAll('#modules thead th'))"
                       ".map(function (h) { return h.textContent; });")
    ops = headers.index("ops")
    click = "document.querySelectorAll('#modules thead th')[arguments[0]].click();"
    page.run(click, ops)
    values = [v for v in _column(page, ops) if v is not None]
    assert values == sorted(values, reverse=True) and len(values) >= 4
    page.run(click, ops)
    values = [v for v in _column(page, ops) if v is not None]
    assert values == sorted(values)
    page.run(click, headers.index("module"))
    names = _column(page, headers.index("module"))
    assert names == sorted(names, key=str.lower)


def test_filter_and_collapse(page: browser.Browser) -> None:
    visible = page.run("""var box = document.getElementById('filter');
        box.value = 'linear'; box.dispatchEvent(new Event('input'));
        return Array.from(document.querySelectorAll('#modules tbody tr'))
          .filter(function (r) { return r.style.display !== 'none'; }).length;""")
    assert visible == 2
    page.run("document.querySelector('button[data-open=\"0\"]').click();")
    assert page.run("return document.querySelectorAll('#tree details[open]').length") == 0
    page.run("document.querySelector('button[data-open=\"1\"]').click();")
    assert page.run("return document.querySelectorAll('#tree details[open]').length") == 2
    errors = [entry for entry in page.console() if entry.get("level") == "SEVERE"]
    assert errors == []


def test_screenshot(page: browser.Browser, tmp_path: Path) -> None:
    shot = tmp_path / "report.png"
    page.screenshot(shot)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.skipif(not os.environ.get("UPDATE_SCREENSHOT"),
                    reason="set UPDATE_SCREENSHOT=1 to refresh docs/img/report.png")
def test_docs_screenshot(tmp_path: Path) -> None:
    import torch
    from torchvision.models import resnet18

    report = tmp_path / "resnet18.html"
    ModuleProfiler().profile(resnet18(weights=None), torch.randn(1, 3, 224, 224)).save(report)
    with browser.browser() as session:
        session.resize(1280, 1400)
        session.open(report)
        DOCS_IMG.parent.mkdir(parents=True, exist_ok=True)
        session.screenshot(DOCS_IMG)


def test_hand_built_hostile_report_also_renders(page: browser.Browser, tmp_path: Path) -> None:
    report = tmp_path / "hostile.html"
    hostile().save(report)
    page.open(report)
    assert page.run("return document.documentElement.getAttribute('data-ready')") == "1"
    assert page.run("return document.scripts.length") == 1
    assert page.run("return document.getElementsByTagName('img').length") == 0
    assert [e for e in page.console() if e.get("level") == "SEVERE"] == []
    page.back()  # leave the shared page as the other tests expect it
