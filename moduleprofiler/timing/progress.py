"""A one-line progress display on stderr for runs longer than a couple of seconds."""

from __future__ import annotations

import sys
import time


class Progress:
    """Throttled ``\\r``-rewritten status line.

    ``enabled=None`` (auto) shows it only on a terminal and only once the run has lasted
    ``after_s`` seconds; ``True`` shows it from the start; ``False`` never.
    """

    def __init__(self, label: str, enabled: bool | None = None, after_s: float = 2.0) -> None:
        self.label = label
        self.enabled = enabled
        self.after_s = 0.0 if enabled else after_s
        self._start = time.perf_counter()
        self._last = 0.0
        self._shown = False
        if enabled is None:
            isatty = getattr(sys.stderr, "isatty", None)
            self.enabled = bool(isatty and isatty())

    def update(self, text: str) -> None:
        """Show ``label: text`` if enabled, past the delay and not updated in the last 0.25 s."""
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self._start < self.after_s or now - self._last < 0.25:
            return
        self._last = now
        self._shown = True
        sys.stderr.write(f"\r{self.label}: {text} [{now - self._start:.1f} s]\033[K")
        sys.stderr.flush()

    def close(self) -> None:
        """Erase the line if it was shown."""
        if self._shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
