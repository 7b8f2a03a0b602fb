"""Identifying the memory behind tensors: one storage, counted once (used by every package).

A storage is identified by the address of its C++ ``StorageImpl`` (``untyped_storage()._cdata``),
which exists on every device, the meta device included (where ``data_ptr()`` is 0). Two tensors
share memory exactly when they share a storage: views, ``t()``, in-place results and tied
parameters all do.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor
from torch._C import _functorch
from torch.nn.parameter import Parameter, UninitializedBuffer, UninitializedParameter

from moduleprofiler.shapes import iter_tensors
from moduleprofiler.shards import dtensor_class


def is_lazy(tensor: Tensor) -> bool:
    """Whether ``tensor`` is a lazy module's parameter or buffer not materialised yet."""
    return isinstance(tensor, (UninitializedParameter, UninitializedBuffer))


def _local_shard(tensor: Tensor) -> Tensor:
    """``tensor``, or for a ``DTensor`` the shard this rank holds: its own storage and
    ``numel`` have the global size, while the memory is the shard's."""
    cls = type(tensor)
    if cls is not Tensor and cls is not Parameter:
        dtensor = dtensor_class()
        if dtensor is not None and isinstance(tensor, dtensor):
            return tensor._local_tensor  # type: ignore[attr-defined, no-any-return]
    return tensor


def _physical(tensor: Tensor) -> Tensor:
    """The tensor under ``torch.func``'s wrappers (``vmap``'s batched tensors, ``grad``'s),
    which have no storage of their own: under ``vmap`` the one holding the whole batch."""
    while _functorch.is_functorch_wrapped_tensor(tensor):
        tensor = _functorch.get_unwrapped(tensor)
    return tensor


def storage_of(tensor: Tensor) -> torch.UntypedStorage | None:
    """The storage behind ``tensor`` (under ``torch.func``'s wrappers, the physical tensor's),
    or ``None`` where there is none to inspect (sparse, nested and some wrapper-subclass
    tensors, lazy parameters not yet materialised)."""
    if is_lazy(tensor):
        return None
    tensor = _physical(_local_shard(tensor))
    try:
        return tensor.untyped_storage()
    except (RuntimeError, NotImplementedError, TypeError):
        return None


def storage_key(storage: torch.UntypedStorage) -> int:
    """Identity of a storage while it is alive (the address of its ``StorageImpl``)."""
    return int(storage._cdata)


def tensor_key(tensor: Tensor) -> int | None:
    """:func:`storage_key` of ``tensor``'s storage, ``None`` when it has none."""
    storage = storage_of(tensor)
    return None if storage is None else storage_key(storage)


def storage_nbytes(storage: torch.UntypedStorage) -> int:
    """Bytes the storage occupies (what an allocator handed out, before rounding)."""
    return int(storage.nbytes())


def own_nbytes(tensor: Tensor) -> int:
    """``numel * element_size``: the bytes of the tensor's own elements (0 for lazy ones); for
    a ``DTensor``, of the shard this rank holds (its ``numel`` is the global tensor's); for a
    sparse tensor, of its indices and stored values (its ``numel`` is its dense shape's)."""
    if is_lazy(tensor):
        return 0
    tensor = _local_shard(tensor)
    parts = sparse_parts(tensor)
    if parts is not None:
        return sum(int(part.numel()) * part.element_size() for part in parts)
    return int(tensor.numel()) * tensor.element_size()


def sparse_parts(tensor: Tensor) -> tuple[Tensor, ...] | None:
    """The tensors a tensor of a sparse layout holds its data in, its stored values last
    (``None`` for any other layout)."""
    parts = _SPARSE_PARTS.get(tensor.layout)
    return None if parts is None else parts(tensor)


_SPARSE_PARTS: dict[torch.layout, Any] = {
    torch.sparse_coo: lambda t: (t._indices(), t._values()),
    torch.sparse_csr: lambda t: (t.crow_indices(), t.col_indices(), t.values()),
    torch.sparse_bsr: lambda t: (t.crow_indices(), t.col_indices(), t.values()),
    torch.sparse_csc: lambda t: (t.ccol_indices(), t.row_indices(), t.values()),
    torch.sparse_bsc: lambda t: (t.ccol_indices(), t.row_indices(), t.values()),
}
"""The tensors a sparse tensor of each layout holds its data in (it has no storage of its
own), its stored values last."""


def distinct_bytes(tensors: Iterable[Tensor], exclude: Iterable[int] = ()) -> int:
    """Bytes of the distinct storages of ``tensors`` (tensors without one count their own),
    leaving out the storages whose keys are in ``exclude``."""
    total = 0
    seen: set[int] = set(exclude)
    for tensor in tensors:
        storage = storage_of(tensor)
        if storage is None:
            total += own_nbytes(tensor)
            continue
        key = storage_key(storage)
        if key not in seen:
            seen.add(key)
            total += storage_nbytes(storage)
    return total


def new_storage_bytes(output: Any, *existing: Any) -> int:
    """Bytes of the distinct storages of ``output``'s tensors that no tensor in ``existing``
    (inputs, parameters, buffers) uses: what a call allocated for its results. Storages are
    told apart on the meta device too.

    Called on every module call of a profile, so the common case (one tensor out; flat tuples,
    lists and dict views of plain tensors to compare with, such as ``args`` and a module's
    ``_parameters.values()``) reads one storage per tensor and walks nothing.
    """
    if isinstance(output, Tensor):  # the common case: compare one storage, build no set
        if type(output) is Tensor:  # plain: not lazy, so no subclass check
            try:
                storage: torch.UntypedStorage | None = output.untyped_storage()
            except (RuntimeError, NotImplementedError, TypeError):
                storage = storage_of(output)  # a torch.func wrapper: its physical tensor's
        else:
            storage = storage_of(output)
        if storage is None:
            return own_nbytes(output)
        target = storage._cdata
        parameter = torch.nn.Parameter
        values_view: type = type({}.values())
        for value in existing:
            kind = type(value)
            if kind is tuple or kind is list or kind is values_view:
                items = value
                depth = 1
            elif kind is dict and not value:
                continue
            else:
                items = (value,)
                depth = 0
            for item in items:
                if type(item) is Tensor or type(item) is parameter:  # neither can be lazy
                    try:
                        if item.untyped_storage()._cdata == target:
                            return 0
                    except (RuntimeError, NotImplementedError, TypeError):
                        if tensor_key(item) == target:  # a torch.func wrapper
                            return 0
                elif item is not None:
                    for tensor in iter_tensors(item, depth):
                        if tensor_key(tensor) == target:
                            return 0
        return storage_nbytes(storage)
    existing_keys = {key for value in existing
                     for tensor in iter_tensors(list(value) if type(value) is type({}.values())
                                                else value)
                     if (key := tensor_key(tensor)) is not None}
    return distinct_bytes(iter_tensors(output), exclude=existing_keys)
