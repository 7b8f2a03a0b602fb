"""Leaving the user's model exactly as we found it: the one snapshot/restore every pass uses.

:func:`preserved_state` restores, even when the pass raises:

* every module's own ``training`` flag (``nn.Module.train(mode)`` would set every descendant to
  one mode and undo a deliberately frozen ``BatchNorm`` inside a training model);
* buffer values (BatchNorm running statistics and ``num_batches_tracked``, any counter), whenever
  some module runs in training mode during the pass, so a profile never updates them;
* with ``grads=True`` (passes that call ``backward()``), every parameter's ``.grad``: set aside
  before the pass (the pass starts like a step after ``zero_grad(set_to_none=True)``) and put
  back after it; gradients the pass created are dropped.

``requires_grad`` is never changed by a pass; parameters are never written.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn
from torch.nn.parameter import UninitializedBuffer, UninitializedParameter


def _buffers(root: nn.Module) -> list[Tensor]:
    unique: dict[int, Tensor] = {}
    for buffer in root.buffers():
        unique.setdefault(id(buffer), buffer)
    return list(unique.values())


def _parameters(root: nn.Module) -> list[nn.Parameter]:
    unique: dict[int, nn.Parameter] = {}
    for parameter in root.parameters():
        unique.setdefault(id(parameter), parameter)
    return list(unique.values())


@contextmanager
def preserved_state(root: nn.Module, *, eval: bool = False, train: bool = False,
                    grads: bool = False, buffers: bool | None = None) -> Iterator[None]:
    """Run the block with ``root`` in eval mode (``eval=True``), in training mode
    (``train=True``) or as it is, and restore its state afterwards (see the module docstring).

    Args:
        root: the user's model.
        eval: switch every module to eval mode for the block.
        train: switch every module to training mode for the block.
        grads: set every ``.grad`` aside for the block and put it back afterwards.
        buffers: restore buffer values afterwards; by default exactly when some module is in
            training mode inside the block (the only case in which ``torch.nn`` layers write
            their buffers).
    """
    if eval and train:
        raise ValueError("preserved_state: eval and train are exclusive")
    flags = [(module, module.training) for module in root.modules()]
    saved_grads: list[tuple[nn.Parameter, Tensor | None]] = []
    saved_buffers: list[tuple[Tensor, Tensor]] = []
    try:
        if eval:
            root.eval()
        elif train:
            root.train()
        # host copies: a snapshot must not add to the device memory a pass measures
        if buffers if buffers is not None else any(module.training for module in root.modules()):
            saved_buffers = [
                (buffer, buffer.detach().to("cpu", copy=True)) for buffer in _buffers(root)
                if buffer.device.type != "meta"
                and not isinstance(buffer, (UninitializedBuffer, UninitializedParameter))
            ]
        if grads:
            saved_grads = [(p, p.grad) for p in _parameters(root)]
            for parameter, grad in saved_grads:
                if grad is not None:
                    parameter.grad = None
        yield
    finally:
        for parameter, grad in saved_grads:
            if parameter.grad is not grad:
                parameter.grad = grad
        if saved_buffers:
            with torch.no_grad():
                for buffer, value in saved_buffers:
                    if buffer.shape == value.shape:
                        buffer.copy_(value)
        for module, training in flags:
            if module.training is not training:
                module.training = training


@contextmanager
def preserved_training_flags(root: nn.Module, eval: bool = False) -> Iterator[None]:
    """:func:`preserved_state` for passes that only switch modes: training flags and, when a
    module runs in training mode, buffer values restored."""
    with preserved_state(root, eval=eval):
        yield
