"""Pausing Python's cyclic garbage collector while a pass runs (and is recorded)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with the cyclic garbage collector paused, and resume it afterwards (only
    if it was running), even when the block raises.

    A pass keeps a record of every module call until it ends: a long one (a recurrent cell
    stepped in a loop, a generation's decode steps) adds tens of thousands of live objects,
    and each quarter more of the process's heap starts a full collection over all of it (a
    second each on a loaded machine). Garbage made meanwhile waits for the next collection
    after the block; reference counting still frees everything that is not in a cycle."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
