"""What one communication operator moves: its kind, bytes and process group.

Every way PyTorch communicates reaches the dispatcher as one of these operators: the
``torch.distributed`` calls (``all_reduce``, ``all_gather_into_tensor``, ...) and DDP's bucket
all-reduce and FSDP2's all-gather / reduce-scatter as ``c10d`` operators; functional
collectives, DTensor redistributions and tensor parallelism as ``_c10d_functional`` ones.

Bytes follow the convention of NCCL's ``nccl-tests``: ``bytes`` is the collective's size (the
buffer reduced by ``all_reduce``; the gathered output of ``all_gather``; the input of
``reduce_scatter`` and ``all_to_all``; the tensor of ``broadcast``, ``send``, ``recv``), and
``bus_bytes`` is what each rank must send and receive over its links in a bandwidth-optimal
algorithm: ``bytes`` times ``2 (N - 1) / N`` for ``all_reduce``, ``(N - 1) / N`` for
``all_gather``, ``reduce_scatter``, ``all_to_all``, ``gather`` and ``scatter`` (for
``all_gather``, exactly the bytes of the shards the rank does not hold), 1 otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from moduleprofiler.shapes import iter_tensors
from moduleprofiler.storage import own_nbytes

_KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    # operator name without namespace -> (kind, the arguments whose bytes are its size: the
    # largest of them; "out" is the result). The functional and c10d forms share the table.
    "allreduce_": ("all_reduce", ("tensors",)),
    "allreduce_coalesced_": ("all_reduce", ("tensors",)),
    "allgather_": ("all_gather", ("output_tensors",)),
    "_allgather_base_": ("all_gather", ("output_tensor",)),
    "allgather_coalesced_": ("all_gather", ("output_lists",)),
    "allgather_into_tensor_coalesced_": ("all_gather", ("outputs",)),
    "reduce_scatter_": ("reduce_scatter", ("input_tensors",)),
    "_reduce_scatter_base_": ("reduce_scatter", ("input_tensor",)),
    "reduce_scatter_tensor_coalesced_": ("reduce_scatter", ("inputs",)),
    "broadcast_": ("broadcast", ("tensors", "input")),
    "reduce_": ("reduce", ("tensors",)),
    "gather_": ("gather", ("output_tensors", "input_tensors")),
    "gather_into_tensor_": ("gather", ("output_tensor", "input_tensor")),
    "scatter_": ("scatter", ("output_tensors", "input_tensors")),
    "alltoall_": ("all_to_all", ("input_tensors",)),
    "alltoall_base_": ("all_to_all", ("input",)),
    "send": ("send", ("tensors",)),
    "recv_": ("recv", ("tensors",)),
    "recv_any_source_": ("recv", ("tensors",)),
    "barrier": ("barrier", ()),
    "monitored_barrier_": ("barrier", ()),
    "all_reduce": ("all_reduce", ("input",)),
    "all_reduce_": ("all_reduce", ("input",)),
    "all_reduce_coalesced": ("all_reduce", ("inputs",)),
    "all_reduce_coalesced_": ("all_reduce", ("inputs",)),
    "all_gather_into_tensor": ("all_gather", ("out",)),
    "all_gather_into_tensor_out": ("all_gather", ("out",)),
    "all_gather_into_tensor_coalesced": ("all_gather", ("out",)),
    "reduce_scatter_tensor": ("reduce_scatter", ("input",)),
    "reduce_scatter_tensor_out": ("reduce_scatter", ("input",)),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter", ("inputs",)),
    "all_to_all_single": ("all_to_all", ("input",)),
    "broadcast": ("broadcast", ("input",)),
    "shard_dim_alltoall": ("all_to_all", ("input",)),
}
_NAMESPACES = frozenset({"c10d", "_c10d_functional", "_c10d_functional_autograd", "_dtensor"})

KINDS: tuple[str, ...] = tuple(dict.fromkeys(kind for kind, _ in _KINDS.values()))
"""Every kind of communication recorded."""

_BUS_FACTOR: dict[str, int] = {
    # kind -> a: bus bytes = bytes * a * (N - 1) / N; nccl-tests' busBw factors
    "all_reduce": 2, "all_gather": 1, "reduce_scatter": 1, "all_to_all": 1, "gather": 1,
    "scatter": 1,
}


@dataclass(frozen=True, slots=True)
class Collective:
    """One communication operator that ran on this rank."""

    call: int | None
    """Index of the module call it ran in (``None``: outside every call)."""
    path: str | None
    """That call's module path."""
    phase: str
    """``"forward"`` or ``"backward"`` (booked to the forward call whose work it serves)."""
    kind: str
    """``all_reduce``, ``all_gather``, ``reduce_scatter``, ``broadcast``, ``all_to_all``, ..."""
    operator: str
    """The dispatcher operator (``c10d::allreduce_``,
    ``_c10d_functional::all_gather_into_tensor``)."""
    bytes: int
    """The collective's size on this rank (module docstring)."""
    bus_bytes: int
    """Bytes each rank sends and receives in a bandwidth-optimal algorithm (module docstring)."""
    group_size: int | None
    """Ranks in its process group (``None``: the group could not be resolved)."""
    ms: float | None = None
    """Milliseconds from its start to its completion on this rank (with timing)."""


def is_communication(func: Any) -> bool:
    """Whether the dispatcher operator ``func`` is a collective or a point-to-point transfer."""
    return func.namespace in _NAMESPACES and _name(func) in _KINDS


def describe(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
             ) -> tuple[str, int, int, int | None]:
    """``(kind, bytes, bus_bytes, group_size)`` of one call of a communication operator."""
    kind, where = _KINDS[_name(func)]
    bound = {**_bind(func, args, kwargs), "out": out}
    size = max((sum(map(own_nbytes, iter_tensors(bound.get(name)))) for name in where),
               default=0)
    group = _group_size(bound)
    factor = _BUS_FACTOR.get(kind)
    bus = size if factor is None or not group else size * factor * (group - 1) // group
    return kind, size, bus, group


def _name(func: Any) -> str:
    return func._schema.name.partition("::")[2]


def _bind(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    names = [argument.name for argument in func._schema.arguments]
    return {**dict(zip(names, args, strict=False)), **kwargs}


def _group_size(bound: dict[str, Any]) -> int | None:
    if isinstance(bound.get("group_size"), int):
        return int(bound["group_size"])
    group = bound.get("process_group")
    if isinstance(group, torch.ScriptObject):
        return int(torch.distributed.ProcessGroup.unbox(group).size())
    name = bound.get("group_name")
    if isinstance(name, torch.distributed.ProcessGroup):
        return int(name.size())
    # a functional collective names its group; torch resolves names with a private helper
    resolve = getattr(torch.distributed.distributed_c10d, "_resolve_process_group", None)
    if isinstance(name, str) and resolve is not None:
        try:
            return int(resolve(name).size())
        except (KeyError, RuntimeError, ValueError):
            return None
    return None
