"""Clocks that hooks can stamp cheaply and that are read once per iteration.

A *stamp source* hands out integer stamps (``stamp()``), each marking "now" on its clock, and
turns a batch of stamps into nanoseconds afterwards (``resolve()``):

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
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

from moduleprofiler.shapes import iter_tensors
from moduleprofiler.warn import warn


class StampSource(Protocol):
    """What the hooks and the iteration loops need from a clock."""

    kind: str
    """``"cpu-wall"`` or ``"cuda-events"``."""

    stamp: Callable[[], int]
    """Mark now; return an opaque integer stamp (a plain attribute so hooks call it directly)."""

    def resolve(self, stamps: Sequence[int]) -> NDArray[np.float64]:
        """Nanoseconds of ``stamps`` on a common origin (synchronises if needed)."""
        ...

    def reset(self) -> None:
        """Forget the stamps handed out so far (start of an iteration)."""
        ...

    def prime(self, busy: bool = False) -> None:
        """Make the next stamp time the device's progress, not the CPU's (see the module
        docstring); called where a timed stretch starts. ``busy``: also when the device is
        still working (it may finish before the CPU queues what follows)."""
        ...


def new_event() -> Any:
    """A ``torch.cuda.Event`` that records timing."""
    return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]


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

    def reset(self) -> None:
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
        self._index = device.index if device.index is not None else torch.cuda.current_device()
        # ``torch.cuda._sleep`` spins for a number of GPU clock cycles; ``clock_rate`` is kHz
        rate = getattr(torch.cuda.get_device_properties(self._index), "clock_rate", 0)
        self._cycles_per_us = (rate or 1_500_000) / 1000
        self._sleep = getattr(torch.cuda, "_sleep", None)
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
        with torch.cuda.device(self.device):
            while len(self._events) < count:
                self._events.append(new_event())

    @property
    def used(self) -> int:
        """Stamps handed out since the last :meth:`reset`."""
        return self._next

    def _record(self) -> int:
        """Record the next event of the pool on the current stream."""
        index = self._next
        if index == len(self._events):
            self._events.append(new_event())
        event = self._events[index]
        if self._record_on is not None and self._stream_id is not None:
            key = self._stream_id(self._index)
            if key != self._stream_key:
                self._stream_key = key
                self._stream = torch.cuda.current_stream(self._index)
            self._record_on(event, self._stream)
        else:
            event.record()
        self._next = index + 1
        return index

    def resolve(self, stamps: Sequence[int]) -> NDArray[np.float64]:
        """Synchronise the device once, then read each stamp's event against stamp 0 of the
        iteration (``elapsed_time`` gives milliseconds with about 0.5 µs resolution)."""
        torch.cuda.synchronize(self.device)
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

    def reset(self) -> None:
        """Start handing out the pool from its first event again (start of an iteration),
        and :meth:`prime` the stream."""
        self._next = 0
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
        if busy or torch.cuda.current_stream(self._index).query():  # query(): nothing queued
            self._sleep(int(self.prime_us * self._cycles_per_us))


def make_stamps(device: torch.device) -> StampSource:
    """The stamp source for ``device`` (checked by ``device.type``, never by equality with
    ``torch.device("cuda")``: ``cuda:0 != cuda``, the bug that made nnprofiler time GPUs with
    a CPU clock)."""
    if device.type == "cuda":
        return CudaStamps(device)
    return CpuStamps()


def resolve_device(module: nn.Module, input: Any = None,
                   device: str | torch.device | None = None) -> torch.device:
    """The device whose clock times ``module``: ``device`` if given, else the device of the
    first parameter or buffer, else that of the first tensor in ``input``, else the CPU.
    A bare ``"cuda"`` becomes the current CUDA device."""
    if device is None:
        for param in module.parameters():
            device = param.device
            break
        else:
            for buffer in module.buffers():
                device = buffer.device
                break
            else:
                for tensor in iter_tensors(input):
                    device = tensor.device
                    break
    resolved = torch.device(device) if device is not None else torch.device("cpu")
    if resolved.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("CUDA timing requested but torch.cuda.is_available() is False")
        if resolved.index is None:
            resolved = torch.device("cuda", torch.cuda.current_device())
    return resolved


def synchronize(device: torch.device) -> None:
    """Wait for queued work on ``device`` (a no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def first_batch_size(input: Any) -> int | None:
    """The leading dimension of the first tensor in ``input`` (``None`` if there is none or it
    is 0-dimensional): the default batch size for throughput."""
    for tensor in iter_tensors(input):
        return int(tensor.shape[0]) if tensor.dim() > 0 else None
    return None


class TimingWarning(UserWarning):
    """A timing result needs a caveat (a clock fell back, the run was noisy...): issued
    through :mod:`warnings` as well as kept in the result's ``warnings``."""


def issue_warnings(messages: Iterable[str]) -> None:
    """Issue each of ``messages`` once, in order, as a :class:`TimingWarning` (a result keeps
    them in its ``warnings`` as well), attributed to the line the user wrote
    (:func:`moduleprofiler.warn.warn`), however deep in the package this is called."""
    for message in dict.fromkeys(messages):
        warn(message, TimingWarning)
