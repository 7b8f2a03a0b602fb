"""Which parameter and buffer tensors each module holds, with its descendants."""

from __future__ import annotations

from torch import Tensor, nn

TensorSets = dict[int, dict[int, Tensor]]
"""``id(module)`` -> ``{id(tensor): tensor}`` of the module and all its descendants."""


def module_tensors(root: nn.Module) -> tuple[TensorSets, TensorSets]:
    """Parameters and buffers of every module of ``root``, each tensor once per module.

    One traversal, children before parents: a module's set is its own tensors joined with its
    children's sets, so a tensor shared between submodules (tied weights, a module registered
    twice) appears once at every level. Iterative on purpose: a recursive closure would be a
    reference cycle keeping these dicts, and so the tensors, alive until the garbage collector
    runs.
    """
    params: TensorSets = {}
    buffers: TensorSets = {}
    for _, module in reversed(list(root.named_modules(remove_duplicate=False))):
        key = id(module)
        if key in params:
            continue
        own_params: dict[int, Tensor] = {
            id(p): p for p in module._parameters.values() if p is not None}
        own_buffers: dict[int, Tensor] = {
            id(b): b for b in module._buffers.values() if b is not None}
        for child in module._modules.values():
            if child is not None:
                own_params.update(params[id(child)])
                own_buffers.update(buffers[id(child)])
        params[key], buffers[key] = own_params, own_buffers
    return params, buffers
