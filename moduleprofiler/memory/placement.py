"""Running a model on another device: parameters and buffers temporarily replaced by copies
there (empty ones on the meta device), the originals put back in ``finally``; inputs moved."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence

from moduleprofiler.storage import is_lazy


def _moved(tensor: Tensor, device: torch.device) -> Tensor:
    if device.type == "meta":
        moved = torch.empty_like(tensor, device=device)
    else:
        moved = tensor.detach().to(device, copy=True)
    if isinstance(tensor, nn.Parameter):
        return nn.Parameter(moved, requires_grad=tensor.requires_grad)
    return moved


def _on_other_device(tensor: Tensor, device: torch.device) -> bool:
    if is_lazy(tensor):
        return False
    here = tensor.device
    if here.type == "meta" and device.type != "meta":
        # no values to copy: an offloading hook puts the weights there for each call (a
        # meta tensor without one fails in the model's own forward, which says so)
        return False
    return here.type != device.type or (
        device.index is not None and here.index is not None and here.index != device.index
    )


@contextmanager
def placed_on(module: nn.Module, device: torch.device) -> Iterator[None]:
    """Every parameter and buffer not on ``device`` swapped for a copy there (tied tensors stay
    tied: one copy per original tensor) for the duration of the block."""
    copies: dict[int, Tensor] = {}
    swapped: list[tuple[dict[str, Any], str, Tensor]] = []
    try:
        for submodule in module.modules():
            tables: tuple[dict[str, Any], ...] = (submodule._parameters, submodule._buffers)
            for table in tables:
                for name, tensor in list(table.items()):
                    if tensor is None or not _on_other_device(tensor, device):
                        continue
                    copy = copies.get(id(tensor))
                    if copy is None:
                        copy = copies[id(tensor)] = _moved(tensor, device)
                    swapped.append((table, name, tensor))
                    table[name] = copy
        yield
    finally:
        for table, name, tensor in reversed(swapped):
            table[name] = tensor


def to_device(value: Any, device: torch.device) -> Any:
    """``value`` with every tensor (in tuples, lists and dicts) moved to ``device``; a tensor
    found twice (``labels`` that are the ``input_ids``) is moved once, so it stays one tensor
    (and one storage in the peak) there. A tensor that requires grad becomes a leaf there that
    requires grad: the backward ends at it, and the original's ``.grad`` is never written."""
    moved: dict[int, Tensor] = {}

    def move(item: Any) -> Any:
        if isinstance(item, Tensor):
            if not _on_other_device(item, device):
                return item
            if id(item) not in moved:
                # a leaf there, as an input made on ``device`` is: a copy's backward would
                # write into the original's ``.grad`` (and out of the meta device there is no
                # data to copy back)
                copy = item.detach().to(device)
                moved[id(item)] = copy.requires_grad_() if item.requires_grad else copy
            return moved[id(item)]
        if isinstance(item, Mapping):
            return {key: move(inner) for key, inner in item.items()}
        if isinstance(item, PackedSequence):  # its batch sizes stay on the CPU (it says so)
            return PackedSequence(move(item.data), item.batch_sizes,
                                  move(item.sorted_indices), move(item.unsorted_indices))
        if isinstance(item, tuple):
            inner_moved = [move(inner) for inner in item]
            if not hasattr(item, "_fields"):
                return tuple(inner_moved)
            # a namedtuple keeps its class; ``_make`` skips a ``__new__`` of its own
            return type(item)._make(inner_moved) if hasattr(item, "_make") else item
        if isinstance(item, list):
            return [move(inner) for inner in item]
        if dataclasses.is_dataclass(item) and not isinstance(item, type):
            # a batch object: a copy with its fields moved (``replace`` runs its own
            # ``__init__``), the same object where none holds a tensor to move
            fields = {field.name: getattr(item, field.name) for field in dataclasses.fields(item)
                      if field.init}
            changed = {name: move(value) for name, value in fields.items()}
            if any(changed[name] is not value for name, value in fields.items()):
                return dataclasses.replace(item, **changed)
        return item

    return move(value)
