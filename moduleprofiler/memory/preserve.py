"""Leaving the model as we found it across a training pass, and running it on another device.

* :func:`grads_set_aside`: every parameter's ``.grad`` is taken off for the pass (so the pass
  starts like a step after ``zero_grad(set_to_none=True)``) and put back afterwards, even if the
  pass raised; gradients the pass created are dropped.
* :func:`buffers_restored`: buffer values (BatchNorm running statistics, counters) are
  snapshotted to host memory and copied back afterwards.
* :func:`placed_on`: parameters and buffers temporarily replaced by copies on another device
  (empty ones on the meta device); the original tensors are put back in ``finally``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from moduleprofiler.memory._storage import is_lazy, model_tensors


@contextmanager
def grads_set_aside(module: nn.Module) -> Iterator[None]:
    """``p.grad = None`` for every parameter during the block; the old grads restored after."""
    saved = [(p, p.grad) for p in model_tensors(module) if isinstance(p, nn.Parameter)]
    try:
        for parameter, grad in saved:
            if grad is not None:
                parameter.grad = None
        yield
    finally:
        for parameter, grad in saved:
            if parameter.grad is not grad:
                parameter.grad = grad


@contextmanager
def buffers_restored(module: nn.Module) -> Iterator[None]:
    """Buffer values copied to host memory before the block and written back after it (meta
    buffers hold no values and are skipped)."""
    saved = [
        (buffer, buffer.detach().to("cpu", copy=True))
        for buffer in model_tensors(module)
        if not isinstance(buffer, nn.Parameter) and buffer.device.type != "meta"
        and not is_lazy(buffer)
    ]
    try:
        yield
    finally:
        with torch.no_grad():
            for buffer, value in saved:
                if buffer.shape == value.shape:
                    buffer.copy_(value)


def _moved(tensor: Tensor, device: torch.device) -> Tensor:
    if device.type == "meta":
        moved = torch.empty_like(tensor, device=device)
    else:
        moved = tensor.detach().to(device, copy=True)
    if isinstance(tensor, nn.Parameter):
        return nn.Parameter(moved, requires_grad=tensor.requires_grad)
    return moved


def needs_placing(module: nn.Module, device: torch.device) -> bool:
    """Whether some parameter or buffer is not on ``device``."""
    return any(_on_other_device(t, device) for t in model_tensors(module))


def _on_other_device(tensor: Tensor, device: torch.device) -> bool:
    if is_lazy(tensor):
        return False
    here = tensor.device
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
    """``value`` with every tensor (in tuples, lists and dicts) moved to ``device``."""
    if isinstance(value, Tensor):
        return value if not _on_other_device(value, device) else value.to(device)
    if isinstance(value, Mapping):
        return {key: to_device(item, device) for key, item in value.items()}
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(to_device(item, device) for item in value)
    if isinstance(value, list):
        return [to_device(item, device) for item in value]
    return value
