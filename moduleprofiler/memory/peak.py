"""Peak memory: operator-level accounting of live storages, and the CUDA allocator's counters.

:class:`LiveBytes` adds a storage's bytes the first time an operator returns it and subtracts
them when the storage dies (a weak reference on the storage; its Python object lives exactly as
long as the ``StorageImpl``, so this works on CPU, CUDA and the meta device alike, where
``data_ptr()`` is 0). :class:`AllocationMode` is the ``TorchDispatchMode`` that feeds it every
operator's outputs. :class:`CudaPeak` reads ``torch.cuda.max_memory_allocated`` after every
operator and at every hook event, so it knows which call was running when the peak was set.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode

from moduleprofiler.memory._storage import (
    distinct_storages,
    own_nbytes,
    storage_key,
    storage_nbytes,
    storage_of,
)
from moduleprofiler.shapes import iter_tensors

Location = tuple[int | None, str, str | None]
"""``(call index or None, phase "forward"/"backward", owner path of an AccumulateGrad)``."""
Locate = Callable[[], Location]


class _Ref(weakref.ref):  # type: ignore[type-arg]
    __slots__ = ("key", "nbytes")
    key: int
    nbytes: int


class LiveBytes:
    """Bytes of live storages: the ``baseline`` ones (alive throughout: parameters, buffers,
    inputs) plus every storage an operator returned that has not died yet."""

    def __init__(self, baseline: Iterable[Tensor] = ()) -> None:
        self._baseline = distinct_storages(baseline)  # strong refs: keys stay unique
        self.baseline_bytes = sum(storage_nbytes(s) for s in self._baseline.values())
        self.current = self.baseline_bytes
        self.peak = self.current
        self._storages: dict[int, _Ref] = {}
        self._tensors: dict[int, _Ref] = {}
        self.on_grow: Callable[[int], None] | None = None
        """Called with ``current`` whenever it grew."""
        self.allocations = 0

    def release(self) -> None:
        """Stop accounting and drop every reference (the numbers stay)."""
        self._baseline.clear()
        self._storages.clear()
        self._tensors.clear()
        self.on_grow = None

    def add(self, value: Any) -> None:
        """Account for the tensors in an operator's output."""
        grew = False
        for tensor in iter_tensors(value):
            grew = self._add(tensor) or grew
        if grew:
            if self.current > self.peak:
                self.peak = self.current
            if self.on_grow is not None:
                self.on_grow(self.current)

    def _add(self, tensor: Tensor) -> bool:
        storage = storage_of(tensor)
        if storage is None:  # sparse, nested, ...: the tensor's own bytes, while it lives
            if id(tensor) in self._tensors:
                return False
            return self._track(self._tensors, id(tensor), tensor, own_nbytes(tensor))
        key = storage_key(storage)
        if key in self._baseline:
            return False
        ref = self._storages.get(key)
        if ref is None:
            return self._track(self._storages, key, storage, storage_nbytes(storage))
        nbytes = storage_nbytes(storage)  # resized in place (``resize_``, ``out=``)
        if nbytes == ref.nbytes:
            return False
        grew = nbytes > ref.nbytes
        self.current += nbytes - ref.nbytes
        ref.nbytes = nbytes
        return grew

    def _track(self, table: dict[int, _Ref], key: int, target: Any, nbytes: int) -> bool:
        ref = _Ref(target, self._release(table))
        ref.key, ref.nbytes = key, nbytes
        table[key] = ref
        self.current += nbytes
        self.allocations += 1
        return nbytes > 0

    def _release(self, table: dict[int, _Ref]) -> Callable[[_Ref], None]:
        owner = weakref.ref(self)

        def release(ref: _Ref) -> None:
            live = owner()
            if live is not None and table.get(ref.key) is ref:
                del table[ref.key]
                live.current -= ref.nbytes

        return release


class AllocationMode(TorchDispatchMode):
    """Runs each operator, then hands its outputs to :class:`LiveBytes` (and samples the CUDA
    allocator when a :class:`CudaPeak` is given)."""

    def __init__(self, live: LiveBytes, cuda: CudaPeak | None = None) -> None:
        super().__init__()
        self._live = live
        self._cuda = cuda

    def __torch_dispatch__(self, func: torch._ops.OpOverload, types: Any,
                           args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
                           ) -> Any:
        out = func(*args, **(kwargs or {}))
        self._live.add(out)
        if self._cuda is not None:
            self._cuda.sample()
        return out


class PeakMeter:
    """Live-bytes maximum overall and per (phase, call), with where the overall one was set."""

    def __init__(self, live: LiveBytes, locate: Locate) -> None:
        self.live = live
        self._locate = locate
        self.peak_at: Location | None = None
        self.max_by_call: dict[tuple[str, int | None], int] = {}
        self._best = live.current
        live.on_grow = self._grow

    def enter(self, call: int, phase: str = "forward") -> None:
        """A call started: its maximum is at least what is live now."""
        key = (phase, call)
        self.max_by_call[key] = max(self.max_by_call.get(key, 0), self.live.current)

    def _grow(self, current: int) -> None:
        where = self._locate()
        key = (where[1], where[0])
        if current > self.max_by_call.get(key, -1):
            self.max_by_call[key] = current
        if current > self._best or self.peak_at is None:
            self._best = current
            self.peak_at = where

    def inclusive(self, parents: dict[int, int | None], phase: str) -> dict[int, int]:
        """Per call, the maximum over the call and everything run inside it."""
        result = {call: value for (p, call), value in self.max_by_call.items()
                  if p == phase and call is not None}
        for call in sorted(parents, reverse=True):  # children start after their parents
            parent = parents[call]
            if parent is not None and call in result:
                result[parent] = max(result.get(parent, 0), result[call])
        return result


class CudaPeak:
    """The CUDA caching allocator's peak over a pass, and the call running when it was set.

    ``torch.cuda.max_memory_allocated`` is a host-side counter: reading it needs no
    synchronisation. It is read after every operator and at every hook event."""

    def __init__(self, device: torch.device, locate: Locate) -> None:
        self.device = device
        self._locate = locate
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        self.baseline_bytes = int(torch.cuda.memory_allocated(device))
        self.peak = self.baseline_bytes
        self.peak_at: Location | None = None

    def sample(self) -> None:
        """Read the allocator's peak; if it rose, the running call set it."""
        peak = int(torch.cuda.max_memory_allocated(self.device))
        if peak > self.peak:
            self.peak = peak
            self.peak_at = self._locate()

    def finish(self) -> int:
        """The pass's peak (after synchronising)."""
        torch.cuda.synchronize(self.device)
        self.sample()
        return self.peak
