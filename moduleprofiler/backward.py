"""Backward operator counts attributed to the module call whose forward created the work.

During the forward, each module call claims the autograd nodes its own operators created: the
nodes reachable from its outputs' ``grad_fn`` that belong neither to its inputs nor to a child
call (children finish first and claim theirs). During the backward, an
:class:`~moduleprofiler.dispatch.OperatorObserver` asks autograd which node is running
(``torch._C._current_autograd_node``) and books each operator to that node's owner. No backward
module hooks are used, so in-place operations, first layers and reused modules all work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from moduleprofiler.dispatch import OperatorObserver
from moduleprofiler.operators.registry import MISSING, lookup
from moduleprofiler.shapes import iter_tensors

LossFn = Callable[[Any], torch.Tensor]


def _grad_fns(value: Any) -> list[Any]:
    return [t.grad_fn for t in iter_tensors(value) if t.grad_fn is not None]


def cudnn_rnns_in_eval(root: nn.Module) -> list[nn.Module]:
    """RNN modules on CUDA in eval mode: cuDNN refuses their backward outside training mode.

    Their math is the same in training mode unless they have inter-layer dropout, so the
    profiler runs them in training mode for ``backward=True`` (flags are restored afterwards)."""
    return [module for module in root.modules()
            if isinstance(module, nn.RNNBase) and not module.training
            and any(p.is_cuda for p in module.parameters(recurse=False))]


def default_loss(output: Any) -> torch.Tensor | None:
    """The sum of every floating-point output tensor that requires grad (``None`` if none)."""
    terms = [t.sum() for t in iter_tensors(output) if t.requires_grad and t.is_floating_point()]
    if not terms:
        return None
    return torch.stack(terms).sum() if len(terms) > 1 else terms[0]


class BackwardAttributor:
    """Maps autograd nodes to call indices, then counts a backward pass per call."""

    def __init__(self) -> None:
        self._owner: dict[Any, int] = {}
        self.ops: dict[int, int | float] = {}
        self.macs: dict[int, int | float] = {}
        self.outside_ops: int | float = 0
        self.outside_macs: int | float = 0
        self.unsupported: dict[str, int] = {}

    @staticmethod
    def boundary(args: Any, kwargs: Any) -> set[Any]:
        """Nodes that already existed when a call started (its inputs' ``grad_fn``)."""
        return set(_grad_fns((args, kwargs)))

    def claim(self, index: int, output: Any, boundary: set[Any]) -> None:
        """Give call ``index`` every unowned node between its outputs and its inputs."""
        pending = _grad_fns(output)
        while pending:
            node = pending.pop()
            if node in self._owner or node in boundary:
                continue
            self._owner[node] = index
            pending.extend(child for child, _ in node.next_functions if child is not None)

    def run(self, output: Any, loss_fn: LossFn | None, inputs: list[torch.Tensor]) -> bool:
        """Differentiate the loss with respect to ``inputs`` (the model's trainable parameters)
        while counting operators. Gradients are returned by ``torch.autograd.grad``, never
        accumulated into ``.grad``, so the model's grads are untouched. False when there is
        nothing to differentiate."""
        loss = loss_fn(output) if loss_fn is not None else default_loss(output)
        targets = [t for t in inputs if t.requires_grad]
        if loss is None or not targets or not loss.requires_grad:
            return False
        observer = OperatorObserver(self._on_operator)
        observer.start()
        try:
            torch.autograd.grad(loss, targets, allow_unused=True)
        finally:
            observer.stop()
        return True

    def _on_operator(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                     out: Any) -> None:
        formula = lookup(func)
        if formula is None:
            return
        if formula is MISSING:
            name = str(func.overloadpacket)
            self.unsupported[name] = self.unsupported.get(name, 0) + 1
            return
        ops, macs = formula(args, kwargs, out)  # type: ignore[operator]
        index = self._owner.get(torch._C._current_autograd_node())
        if index is None:
            self.outside_ops += ops
            self.outside_macs += macs
        else:
            self.ops[index] = self.ops.get(index, 0) + ops
            self.macs[index] = self.macs.get(index, 0) + macs
