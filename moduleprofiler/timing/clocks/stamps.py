"""Stamp sources: clocks that hooks can stamp cheaply and that are read once per iteration.

A *stamp source* hands out integer stamps (``stamp()``), each marking "now" on its clock, and
turns a batch of stamps into nanoseconds afterwards (``resolve()``):

Every timed pass stamps through one of these, the hooked iterations, the hook-free ones and
``benchmark``'s alike:

* :class:`CpuStamps`: the stamp *is* ``time.perf_counter_ns()`` (wall time, monotonic; not
  ``process_time``, which counts CPU time of every thread, nor ``time.time``).
* :class:`CudaStamps`: the stamp is the index of a ``torch.cuda.Event`` from a pre-allocated
  pool, recorded on the *current* stream; ``resolve()`` synchronises once and reads every event
  against the first. Nothing synchronises inside the timed region.

An event's time is when the GPU reaches it in its stream. On a busy GPU that is when the work
queued before it ends, so two events enclose exactly the module's kernels; on an *idle* GPU it
is when the CPU recorded it. Every timed iteration starts on an idle GPU (the previous one was
read after a synchronisation), so the first module's start stamp was taken at CPU time, and
its interval held the CPU's path to its first kernel (hooks, dispatch, the launch) as idle GPU
time; a module called when the backward starts likewise. :meth:`CudaStamps.prime` closes that
gap where it opens: on an idle stream it first queues a short GPU spin (``torch.cuda._sleep``),
so the stamp is taken when the spin ends, by which time the CPU has queued what follows. The
spin itself lies before the stamp and is never timed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
import torch
from numpy.typing import NDArray

from moduleprofiler import devices


class StampSource(Protocol):
    """What the hooks and the iteration loops need from a clock."""

    kind: str
    """``"cpu-wall"`` or ``"cuda-events"``."""

    stamp: Callable[[], int]
    """Mark now; return an opaque integer stamp (a plain attribute so hooks call it directly)."""

    def resolve(self, stamps: Sequence[int]) -> NDArray[np.float64]:
        """Nanoseconds of ``stamps`` on a common origin (synchronises if needed)."""
        ...

    def reset(self, prime: bool = True) -> None:
        """Forget the stamps handed out so far (start of an iteration); ``prime`` (see
        :meth:`prime`) where the first stamp should time the device's progress."""
        ...

    def prime(self, busy: bool = False) -> None:
        """Make the next stamp time the device's progress, not the CPU's (see the module
        docstring); called where a timed stretch starts. ``busy``: also when the device is
        still working (it may finish before the CPU queues what follows)."""
        ...


class CpuStamps:
    """``perf_counter_ns`` stamps."""

    kind = "cpu-wall"

    def __init__(self) -> None:
        self.stamp: Callable[[], int] = time.perf_counter_ns

    def resolve(self, stamps: Sequence[int]) -> NDArray[np.float64]:
        """Stamps relative to the first, as float nanoseconds."""
        array = np.asarray(stamps, dtype=np.int64)
        if array.size == 0:
            return np.zeros(0)
        out: NDArray[np.float64] = (array - array.min()).astype(np.float64)
        return out

    def reset(self, prime: bool = True) -> None:
        """Nothing to forget."""

    def prime(self, busy: bool = False) -> None:
        """Nothing to do: the CPU clock is the CPU's progress."""


class CudaStamps:
    """CUDA events from a pool that grows on demand; reuse needs one sync per iteration."""

    kind = "cuda-events"

    prime_us: float = 300.0
    """Length of the spin :meth:`prime` queues on an idle stream (0: never): long enough to
    cover the CPU's path from the prime to the first kernel launch (the rest of the
    iteration's setup, the call, the hooks of the outer modules: 150-170 µs before a bf16
    MLP's first matmul on a 16-core H100 host, whose GPU idled 50-70 µs after a 100 µs spin,
    time its first module read as its own), short enough that a launch-bound model's first
    modules are not read as if the GPU had been ahead of the CPU for long."""

    def __init__(self, device: torch.device, reserve: int = 256) -> None:
        self.device = device
        self._index = devices.device_index(device)
        # ``torch.cuda._sleep`` spins for a number of GPU clock cycles; ``clock_rate`` is kHz
        rate = getattr(devices.properties(device), "clock_rate", 0)
        self._cycles_per_us = (rate or 1_500_000) / 1000
        self._sleep = devices.spin()
        self._events: list[Any] = []
        self._next = 0
        # Recording through the C base class on a cached stream object skips the wrapper's
        # ``torch.cuda.current_stream()`` (a new Python Stream per record, several us); the
        # current stream's id is still checked on every record, so a stream switch inside
        # the model is followed.
        base = getattr(torch._C, "_CudaEventBase", None)
        self._record_on = getattr(base, "record", None)
        self._stream_id = getattr(torch._C, "_cuda_getCurrentStream", None)
        self._stream_key: Any = None
        self._stream: Any = None
        self.stamp: Callable[[], int] = self._record
        self.reserve(reserve)

    def reserve(self, count: int) -> None:
        """Pre-allocate events so that hooks never create one inside a timed region."""
        with devices.device_context(self.device):
            while len(self._events) < count:
                self._events.append(devices.new_event())

    @property
    def used(self) -> int:
        """Stamps handed out since the last :meth:`reset`."""
        return self._next

    def _record(self) -> int:
        """Record the next event of the pool on the current stream."""
        index = self._next
        if index == len(self._events):
            self._events.append(devices.new_event())
        event = self._events[index]
        if self._record_on is not None and self._stream_id is not None:
            key = self._stream_id(self._index)
            if key != self._stream_key:
                self._stream_key = key
                self._stream = devices.current_stream(self.device)
            self._record_on(event, self._stream)
        else:
            event.record()
        self._next = index + 1
        return index

    def resolve(self, stamps: Sequence[int]) -> NDArray[np.float64]:
        """Synchronise the device once, then read each stamp's event against stamp 0 of the
        iteration (``elapsed_time`` gives milliseconds with about 0.5 µs resolution)."""
        devices.synchronize(self.device)
        if self._next == 0:
            return np.zeros(len(stamps))
        reference = self._events[0]
        cache: dict[int, float] = {}
        out = np.empty(len(stamps), dtype=np.float64)
        for position, index in enumerate(stamps):
            value = cache.get(index)
            if value is None:
                value = 0.0 if index == 0 else reference.elapsed_time(self._events[index]) * 1e6
                cache[index] = value
            out[position] = value
        return out

    def reset(self, prime: bool = True) -> None:
        """Start handing out the pool from its first event again (start of an iteration),
        and (``prime``) :meth:`prime` the stream."""
        self._next = 0
        if prime:
            self.prime()

    def prime(self, busy: bool = False) -> None:
        """On an idle current stream (on any, with ``busy``), queue a ``prime_us`` spin
        before the next stamp.

        ``busy`` is for the start of the backward: the GPU is often still running the end of
        the forward when the backward starts, and finishes it while the CPU is on its way to
        the first backward kernel (the loss's backward, the autograd engine's start, the
        hooks). Unprimed, that idle gap fell inside the first backward module's interval: +4
        to +9 % for a 0.7 ms bf16 Linear on an H100. A spin queued behind the forward ends
        after the CPU has caught up; it delays the step by ``prime_us`` but lies before the
        stamp, outside every module's time."""
        if self._sleep is None or self.prime_us <= 0:
            return
        if busy or devices.current_stream(self.device).query():  # query(): nothing queued
            self._sleep(int(self.prime_us * self._cycles_per_us))


def make_stamps(device: torch.device) -> StampSource:
    """The stamp source for ``device`` (checked by ``device.type``, never by equality with
    ``torch.device("cuda")``: ``cuda:0 != cuda``, the bug that made nnprofiler time GPUs with
    a CPU clock)."""
    if device.type == "cuda":
        return CudaStamps(device)
    return CpuStamps()


