"""The one measurement loop of the host costs: tight loops of calls, interleaved over rounds."""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Mapping
from typing import Any, TypeVar

from moduleprofiler.timing.environment import timing_context

Key = TypeVar("Key", bound=Hashable)


def interleaved_call_us(benches: Mapping[Key, Callable[[], Any]], calls: int, rounds: int,
                        before: Callable[[Callable[[], Any]], Any]) -> dict[Key, list[float]]:
    """Per bench, host µs per call of ``calls`` back-to-back calls, once per round; the
    benches take turns in every round, so that a drift of the machine spreads over all of
    them. ``before(bench)`` runs untimed before each loop (a device synchronisation, a warm
    call). The garbage collector is paused throughout."""
    samples: dict[Key, list[float]] = {key: [] for key in benches}
    with timing_context():
        for _ in range(rounds):
            for key, bench in benches.items():
                before(bench)
                start = time.perf_counter()
                for _ in range(calls):
                    bench()
                samples[key].append((time.perf_counter() - start) / calls * 1e6)
    return samples

