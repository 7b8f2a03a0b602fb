"""The clocks that read their stamps and nothing else: the CPU's wall clock and CUDA events at
the hooks (:class:`~.protocol.Clock`'s own answers)."""

from __future__ import annotations

from moduleprofiler.timing.clocks.protocol import Clock


class CpuClock(Clock):
    """Wall time on the host (``perf_counter_ns`` at the hooks)."""


class EventClock(Clock):
    """CUDA events at the hooks: the GPU's timeline, right only while it has queued work."""

    name = "cuda-events"
    overhead_caveat = ("launch-bound with hooks, so GPU-timeline times include launch gaps; "
                       "a larger batch helps")
