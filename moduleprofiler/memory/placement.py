"""Running a model on another device: parameters and buffers temporarily replaced by copies
there (empty ones on the meta device), the originals put back in ``finally``; inputs moved."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from moduleprofiler.errors import MixedDeviceError
from moduleprofiler.records import display_path
from moduleprofiler.shapes import map_tensors
from moduleprofiler.storage import is_lazy


def _moved(tensor: Tensor, device: torch.device) -> Tensor:
    if device.type == "meta":
        moved = torch.empty_like(tensor, device=device)
    else:
        moved = tensor.detach().to(device, copy=True)
    if isinstance(tensor, nn.Parameter):
        return nn.Parameter(moved, requires_grad=tensor.requires_grad)
    return moved


def _differ(here: torch.device, device: torch.device) -> bool:
    return here.type != device.type or (
        device.index is not None and here.index is not None and here.index != device.index
    )


def _on_other_device(tensor: Tensor, device: torch.device) -> bool:
    if is_lazy(tensor):
        return False
    here = tensor.device
    if here.type == "meta" and device.type != "meta":
        # no values to copy: an offloading hook puts the weights there for each call (a
        # meta tensor without one fails in the model's own forward, which says so)
        return False
    return _differ(here, device)


@contextmanager
def placed_on(module: nn.Module, device: torch.device) -> Iterator[None]:
    """Every parameter and buffer not on ``device`` swapped for a copy there (tied tensors stay
    tied: one copy per original tensor) for the duration of the block.

    Raises:
        MixedDeviceError: a lazy parameter would materialise on another device than
            ``device`` (its own) in the pass's forward, and the forward would mix the two.
    """
    copies: dict[int, Tensor] = {}
    swapped: list[tuple[dict[str, Any], str, Tensor]] = []
    try:
        for path, submodule in module.named_modules():
            tables: tuple[dict[str, Any], ...] = (submodule._parameters, submodule._buffers)
            for table in tables:
                for name, tensor in list(table.items()):
                    if tensor is not None and is_lazy(tensor) and _differ(tensor.device, device):
                        raise MixedDeviceError(
                            f"the lazy module {display_path(path)!r} "
                            f"({type(submodule).__name__}) would materialise {name!r} on "
                            f"{tensor.device} in the first forward, beside tensors on "
                            f"{device}: build it there ({type(submodule).__name__}"
                            f"(..., device={str(device)!r})), or run one forward on "
                            f"{tensor.device} first")
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
    """``value`` with every tensor (in tuples, lists, dicts, namedtuples, dataclass batches and
    packed sequences: :func:`~moduleprofiler.shapes.map_tensors`) moved to ``device``; a tensor
    found twice (``labels`` that are the ``input_ids``) is moved once, so it stays one tensor
    (and one storage in the peak) there. A tensor that requires grad becomes a leaf there that
    requires grad: the backward ends at it, and the original's ``.grad`` is never written."""
    moved: dict[int, Tensor] = {}

    def move(item: Tensor) -> Tensor:
        if not _on_other_device(item, device):
            return item
        if id(item) not in moved:
            # a leaf there, as an input made on ``device`` is: a copy's backward would write
            # into the original's ``.grad`` (and out of the meta device there is no data to
            # copy back)
            copy = item.detach().to(device)
            moved[id(item)] = copy.requires_grad_() if item.requires_grad else copy
        return moved[id(item)]

    return map_tensors(value, move)
