"""The size of ``torch.save(module.state_dict())`` without writing it anywhere."""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import Tensor, nn

from moduleprofiler.storage import storage_key, storage_nbytes, storage_of


class CountingWriter:
    """A seekable, write-only file object that keeps no bytes: only its size.

    ``size`` is the furthest position written or seeked to, i.e. the length a file would have.
    """

    def __init__(self) -> None:
        self.position = 0
        self.size = 0

    def write(self, data: Any) -> int:
        """Count ``data`` and discard it."""
        count = memoryview(data).nbytes
        self.position += count
        self.size = max(self.size, self.position)
        return count

    def seek(self, offset: int, whence: int = 0) -> int:
        """Move like a file would (0: from the start, 1: from here, 2: from the end)."""
        base = {0: 0, 1: self.position, 2: self.size}[whence]
        self.position = base + offset
        self.size = max(self.size, self.position)
        return self.position

    def tell(self) -> int:
        """The current position."""
        return self.position

    def flush(self) -> None:
        """Nothing to flush."""

    def writable(self) -> bool:
        """Always writable."""
        return True

    def seekable(self) -> bool:
        """Always seekable."""
        return True


def _stand_ins(state: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """Meta tensors replaced by one-element CPU stand-ins with the same shape (stride 0), one
    stand-in storage per distinct meta storage; returns the bytes the stand-ins leave out."""
    bases: dict[int, Tensor] = {}
    missing = 0
    replaced: dict[str, Any] = {}
    for name, value in state.items():
        if not isinstance(value, Tensor) or value.device.type != "meta":
            replaced[name] = value
            continue
        storage = storage_of(value)
        key = id(value) if storage is None else storage_key(storage)
        base = bases.get(key)
        if base is None:
            base = bases[key] = torch.zeros(1, dtype=value.dtype)
            full = value.numel() * value.element_size() if storage is None \
                else storage_nbytes(storage)
            missing += max(full - value.element_size(), 0)
        replaced[name] = base.as_strided(tuple(value.shape), (0,) * value.dim())
    return replaced, missing


def state_dict_bytes(module: nn.Module) -> int:
    """Bytes ``torch.save(module.state_dict(), buffer)`` writes, counted through a writer that
    discards them (nothing is kept in memory or written to disk).

    Saving to a *path* instead of a buffer differs by a few bytes per record: the archive's
    record names start with the file's stem instead of ``archive``. On the meta device (no data
    to serialise) the size is an estimate: the serialised header of the state dict plus every
    distinct storage's bytes, within about 64 bytes (the record alignment) per storage.
    CUDA tensors are copied to the host one storage at a time while being serialised.
    """
    state = module.state_dict()
    has_meta = any(isinstance(v, Tensor) and v.device.type == "meta" for v in state.values())
    writer = CountingWriter()
    if not has_meta:
        torch.save(state, writer)  # type: ignore[arg-type]
        return writer.size
    stand_ins, missing = _stand_ins(dict(state))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.save(stand_ins, writer)  # type: ignore[arg-type]
    return writer.size + missing
