"""Bytes of the tensors autograd saves for backward, per module call.

``torch.autograd.graph.saved_tensors_hooks`` sees every tensor an operation saves; the pack
hook returns the tensor itself (nothing is copied or kept) and charges its storage, once, to
the innermost module call running. Saved storages that belong to parameters or buffers are not
activation memory (they exist anyway) and are counted apart, as are the model's inputs.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from moduleprofiler.memory._storage import own_nbytes, storage_key, storage_nbytes, storage_of

SavedKind = Literal["activation", "parameter", "input"]


@dataclass
class SavedTotals:
    """Saved bytes of one call, by kind (each storage charged once, to its first saver)."""

    activation: int = 0
    parameter: int = 0
    input: int = 0


class SavedTensorMeter:
    """Charges saved storages to ``locate()`` (a call index or ``None`` outside every call).

    Args:
        locate: returns the index of the running call.
        parameters: tensors whose storages count as ``parameter`` (parameters and buffers).
        inputs: tensors whose storages count as ``input``.
    """

    def __init__(self, locate: Callable[[], int | None], parameters: Iterable[Tensor],
                 inputs: Iterable[Tensor]) -> None:
        self._locate = locate
        self._kinds: dict[int, SavedKind] = {}
        self._keep: list[torch.UntypedStorage] = []
        for kind, tensors in (("parameter", parameters), ("input", inputs)):
            for tensor in tensors:
                storage = storage_of(tensor)
                if storage is not None:
                    self._kinds.setdefault(storage_key(storage), kind)  # type: ignore[arg-type]
                    self._keep.append(storage)  # alive, so the key is never reused
        self._seen: dict[int, weakref.ref[torch.UntypedStorage]] = {}
        self.by_call: dict[int | None, SavedTotals] = {}
        self.tensors = 0
        """Tensors packed (before deduplication)."""

    @contextmanager
    def active(self) -> Iterator[SavedTensorMeter]:
        """Meter the saved tensors of everything run in the ``with`` block."""
        with torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack):
            yield self

    def release(self) -> None:
        """Drop every reference to storages (the totals stay)."""
        self._keep.clear()
        self._seen.clear()

    def total(self, kind: SavedKind = "activation") -> int:
        """Bytes of every distinct saved storage of ``kind``."""
        return sum(getattr(totals, kind) for totals in self.by_call.values())

    def _pack(self, tensor: Tensor) -> Tensor:
        self.tensors += 1
        storage = storage_of(tensor)
        if storage is None:
            self._charge("activation", own_nbytes(tensor))
            return tensor
        key = storage_key(storage)
        kind = self._kinds.get(key)
        if kind is None:
            ref = self._seen.get(key)
            if ref is not None and ref() is not None:
                return tensor
            self._seen[key] = weakref.ref(storage)
            kind = "activation"
        else:
            if key in self._seen:
                return tensor
            self._seen[key] = weakref.ref(storage)
        self._charge(kind, storage_nbytes(storage))
        return tensor

    def _charge(self, kind: SavedKind, nbytes: int) -> None:
        call = self._locate()
        totals = self.by_call.get(call)
        if totals is None:
            totals = self.by_call[call] = SavedTotals()
        setattr(totals, kind, getattr(totals, kind) + nbytes)


def _unpack(tensor: Tensor) -> Tensor:
    return tensor
