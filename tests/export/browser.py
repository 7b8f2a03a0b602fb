"""A headless Chromium driven through chromedriver's W3C WebDriver HTTP API (stdlib only):
load a page, run JavaScript, read the browser console, take a screenshot.

``available()`` is False when ``chromium`` or ``chromedriver`` is missing (tests then skip).
Debian packages: ``chromium``, ``chromium-driver``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--hide-scrollbars",
]


def _binary() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def available() -> bool:
    """Both a Chromium binary and chromedriver are on PATH."""
    return _binary() is not None and shutil.which("chromedriver") is not None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Browser:
    """One WebDriver session."""

    def __init__(self, port: int, session: str) -> None:
        self._base = f"http://127.0.0.1:{port}/session/{session}"

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        return _request(method, self._base + path, body)

    def open(self, path: Path) -> None:
        """Navigate to a local file and wait for it to load."""
        self._call("POST", "/url", {"url": path.resolve().as_uri()})

    def back(self) -> None:
        """Go back to the previous page."""
        self._call("POST", "/back", {})

    def run(self, script: str, *args: Any) -> Any:
        """The value of a JavaScript function body (``return ...``)."""
        return self._call("POST", "/execute/sync", {"script": script, "args": list(args)})

    def console(self) -> list[dict[str, Any]]:
        """Console messages and uncaught script errors since the last call."""
        return list(self._call("POST", "/se/log", {"type": "browser"}))

    def resize(self, width: int, height: int) -> None:
        self._call("POST", "/window/rect", {"width": width, "height": height})

    def screenshot(self, path: Path) -> None:
        """Save the visible viewport as PNG."""
        path.write_bytes(base64.b64decode(self._call("GET", "/screenshot")))


def _request(method: str, url: str, body: dict[str, Any] | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())["value"]
    except urllib.error.HTTPError as exc:
        detail = json.loads(exc.read() or b"{}").get("value", {})
        raise RuntimeError(f"WebDriver {method} {url}: {detail.get('error')}: "
                           f"{str(detail.get('message', ''))[:500]}") from None


@contextlib.contextmanager
def browser() -> Iterator[Browser]:
    """Start chromedriver and a headless Chromium session; stop both on exit."""
    port = _free_port()
    driver = subprocess.Popen(["chromedriver", f"--port={port}"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    profile_dir = tempfile.mkdtemp(prefix="mp-chromium-")
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                _request("GET", f"http://127.0.0.1:{port}/status")
                break
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        options = {"binary": _binary(), "args": [*CHROMIUM_ARGS, f"--user-data-dir={profile_dir}"]}
        capabilities = {"capabilities": {"alwaysMatch": {
            "browserName": "chrome", "goog:chromeOptions": options,
            "goog:loggingPrefs": {"browser": "ALL"},
        }}}
        session = _request("POST", f"http://127.0.0.1:{port}/session", capabilities)
        try:
            yield Browser(port, session["sessionId"])
        finally:
            with contextlib.suppress(OSError, urllib.error.URLError):
                _request("DELETE", f"http://127.0.0.1:{port}/session/{session['sessionId']}")
    finally:
        driver.terminate()
        try:
            driver.wait(timeout=10)
        except subprocess.TimeoutExpired:
            driver.kill()
        shutil.rmtree(profile_dir, ignore_errors=True)
