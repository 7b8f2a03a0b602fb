"""Collectives and point-to-point transfers between ranks: 0 ops of compute.

They move data (``torch.distributed``'s ``c10d`` operators, the functional collectives of
``_c10d_functional`` that DTensor and tensor parallelism use, and DTensor's own
``_dtensor`` transfers). NB: the reduction inside ``all_reduce`` / ``reduce_scatter`` (``N - 1``
adds per element over ``N`` ranks) runs inside the communication library and is not counted as
compute; :mod:`moduleprofiler.distributed` measures the communication itself (bytes, group
size, time).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from moduleprofiler.operators.registry import register_family_loader, register_free

_NAMESPACES = ("c10d", "_c10d_functional", "_c10d_functional_autograd", "_dtensor")
_PYTHON_DEFINED: dict[str, tuple[str, ...]] = {
    # defined in Python when torch.distributed's functional collectives, DTensor or FSDP2 are
    # imported; FSDP2's are the copies into and out of its all-gather and reduce-scatter buffers
    "_c10d_functional": ("_wrap_tensor_autograd",),
    "_dtensor": ("mesh_get_process_group",),
    "fsdp": ("all_gather_copy_in", "chunk_cat", "copy_", "split_with_sizes_copy"),
}


def _operators(namespace: str) -> list[torch._ops.OpOverloadPacket]:
    prefix = f"{namespace}::"
    names = sorted({name[len(prefix):].partition(".")[0]
                    for name in torch._C._dispatch_get_all_op_names() if name.startswith(prefix)})
    later = _PYTHON_DEFINED.get(namespace, ())
    table = getattr(torch.ops, namespace)
    return [getattr(table, name) for name in names if name not in later]


register_free(*(packet for namespace in _NAMESPACES for packet in _operators(namespace)))


def _loader(namespace: str, names: tuple[str, ...]) -> Callable[[], bool]:
    def register() -> bool:
        table = getattr(torch.ops, namespace)
        if not all(hasattr(table, name) for name in names):
            return False
        register_free(*(getattr(table, name) for name in names))
        return True

    return register


for _namespace, _names in _PYTHON_DEFINED.items():
    register_family_loader(_loader(_namespace, _names))
