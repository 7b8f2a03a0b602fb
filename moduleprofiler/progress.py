"""Progress with an estimated time left for runs longer than a couple of seconds (timing and
memory passes): a ``tqdm`` bar when ``tqdm`` is installed (``pip install
".[progress]"`` in a checkout; it also draws in Jupyter), else one ``\\r``-rewritten line on
stderr."""

from __future__ import annotations

import importlib.util
import sys
import time
from typing import Any

REFRESH_S = 0.25
"""The plain line is rewritten at most this often."""


def _in_notebook() -> bool:
    """Whether this runs in a Jupyter (IPython) kernel, whose stderr is no terminal."""
    return "ipykernel" in sys.modules


def _tqdm_bar(label: str, total: int | None, unit: str, delay: float) -> Any:
    """A ``tqdm.auto`` bar, or ``None`` when ``tqdm`` is not installed."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    # tqdm writes its unit after a rate, glued to it ("3.61s/iteration", "12.50iteration/s"):
    # one step, no space; the plain line writes it after a count ("5/10 iterations")
    return tqdm(total=total, desc=label, unit=unit.removesuffix("s"), delay=delay, leave=False,
                file=sys.stderr, dynamic_ncols=True)


def eta_text(seconds: float) -> str:
    """``75.2`` -> ``"1:15"``; ``3725`` -> ``"1:02:05"``."""
    whole = max(0, round(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class Progress:
    """Progress of ``done`` out of ``total`` steps, with the time left estimated from the rate
    so far.

    ``enabled=None`` (auto) shows it only on a terminal (or in a Jupyter kernel, with
    ``tqdm``) and only once the run has lasted ``after_s`` seconds; ``True`` shows it from the
    start; ``False`` never.
    """

    def __init__(self, label: str, enabled: bool | None = None, after_s: float = 2.0,
                 unit: str = "iterations") -> None:
        self.label = label
        self.unit = unit
        self.after_s = 0.0 if enabled else after_s
        if enabled is None:
            isatty = getattr(sys.stderr, "isatty", None)
            enabled = bool(isatty and isatty()) or (
                _in_notebook() and importlib.util.find_spec("tqdm") is not None)
        self.enabled = enabled
        self._start = time.perf_counter()
        self._last = 0.0
        self._shown = False
        self._first: tuple[float, int] | None = None
        self._bar: Any = None
        self._tqdm_tried = False

    def _eta(self, now: float, done: int, total: int | None) -> float | None:
        """Seconds left at the rate since the first update with steps done (``None``
        before any rate): updates at 0 (warm-up, calibration) do not count as progress."""
        if self._first is None:
            if done > 0:
                self._first = (now, done)
            return None
        since, done_then = self._first
        if total is None or done <= done_then:
            return None
        return (now - since) / (done - done_then) * max(0, total - done)

    def update(self, done: int, total: int | None = None, text: str = "") -> None:
        """``done`` steps out of ``total`` (``None``: unknown); ``text`` is shown after."""
        if not self.enabled:
            return
        now = time.perf_counter()
        eta = self._eta(now, done, total)
        if not self._tqdm_tried:
            self._tqdm_tried = True
            self._bar = _tqdm_bar(self.label, total, self.unit,
                                  max(0.0, self.after_s - (now - self._start)))
        if self._bar is not None:
            if total != self._bar.total:  # a total learnt on the way (the memory passes)
                self._bar.total = total
            self._bar.update(done - self._bar.n)
            if text:
                self._bar.set_postfix_str(text, refresh=False)
            return
        if now - self._start < self.after_s or now - self._last < REFRESH_S:
            return
        self._last = now
        self._shown = True
        count = f"{done}/{total} {self.unit}" if total is not None else f"{done} {self.unit}"
        timing = f"{now - self._start:.1f} s" + (f", ETA {eta_text(eta)}" if eta is not None
                                                  else "")
        extra = f", {text}" if text else ""
        sys.stderr.write(f"\r{self.label}: {count}{extra} [{timing}]\033[K")
        sys.stderr.flush()

    def close(self) -> None:
        """Remove the bar or erase the line if it was shown."""
        if self._bar is not None:
            self._bar.close()
        elif self._shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
