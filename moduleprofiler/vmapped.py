"""How many times ``torch.vmap`` runs a module call's work.

Inside ``torch.vmap`` (``torch.func``'s batching transform) a module sees one example: its
tensors are ``BatchedTensor`` wrappers whose shape leaves out the mapped dimension, so a formula
read from those shapes prices one example. The kernels run once for the whole batch, on the
physical tensors underneath (the aten operators a dispatch mode sees are those). The call's
formula count times :func:`vmap_factor` is the work that really ran.
"""

from __future__ import annotations

from typing import Any

from torch._C import _functorch

from moduleprofiler.shapes import iter_tensors

_transform_stack = _functorch.peek_interpreter_stack
_is_batched = _functorch.is_batchedtensor
_is_wrapped = _functorch.is_functorch_wrapped_tensor


def vmap_factor(output: Any) -> int:
    """The product of the sizes ``torch.vmap`` maps over the first tensor of ``output``, at
    every level it is batched at (nested ``vmap``\\ s multiply; a ``torch.func.grad`` level
    batches nothing); 1 outside every functorch transform (one C call), for an output that is
    not batched, and with no tensor output.

    The output is batched at every level any of the call's inputs or parameters is (an
    ensemble's stacked weights too), and the work of the call is repeated once per mapped
    index at exactly those levels.
    """
    if _transform_stack() is None:
        return 1
    tensor = next(iter_tensors(output), None)
    factor = 1
    # through every functorch wrapper (a torch.func.grad level wraps without batching)
    while tensor is not None and _is_wrapped(tensor):
        batched = _is_batched(tensor)
        dim = _functorch.maybe_get_bdim(tensor) if batched else -1
        tensor = _functorch.get_unwrapped(tensor)  # one level down: its logical shape has dim
        if batched:
            factor *= int(tensor.shape[dim])
    return factor
