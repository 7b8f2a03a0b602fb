"""Bytes moved: what each aten operator reads and writes, booked to module calls.

A lower bound on memory traffic, operator by operator: an operator reads each distinct input
tensor once (``numel * element_size`` of the view it is given, not of the whole storage) and
writes each output once (a gather, such as an embedding's lookup, reads from its table only
the rows it returns). Views (``t``, ``view``, ``expand``, ``detach``...) and other outputs that
merely alias an input move nothing; an in-place operator reads and writes its target (a
scatter into it, :data:`ROW_SCATTERS`, only the elements it writes); ``empty``
and friends allocate without writing. Real kernels move at least this much (caches may serve a
repeated read, but each operator's inputs must arrive and its outputs leave), and more where a
kernel reads a tile several times (a large matmul) or spills; a fused kernel moves less than the
operators it replaces, which is why the figure is per aten operator, the unit this profiler sees.

:class:`TrafficListener` is opt-in (pass it to ``profile(listeners=...)``): it observes every
operator of the forward, and with ``backward=True`` every backward operator, so it costs a dispatch
per operator. It writes per call:

* ``self_moved_bytes``: bytes read and written by the call's own operators (children excluded);
* ``self_launches``: its own operators that touch memory (about one kernel launch each on a
  GPU: an estimate from the operators, where the kernel clock's ``device_launches`` counts the
  kernels the device ran);
* with a backward: ``self_backward_moved_bytes`` / ``self_backward_launches``, the backward work
  autograd did for the call's operators, and ``self_recompute_moved_bytes`` /
  ``self_recompute_ops`` / ``self_recompute_macs``, forward work re-run during the backward by
  activation checkpointing (already inside the backward figures, and booked to the forward
  call it repeats: :mod:`moduleprofiler.reruns`).

Each has its inclusive column beside it (``moved_bytes``, ``launches``, ``recompute_ops``...):
the call's value plus that of every call inside it.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from moduleprofiler.call import Call
from moduleprofiler.export.columns import (
    Kind,
    register_column,
    register_own_and_inclusive,
    scaled,
)
from moduleprofiler.operators.registry import (
    MISSING,
    OperatorMap,
    PassFormulas,
    get_default_operator_map,
    pass_formulas,
)
from moduleprofiler.runner import Listener, PassRunner
from moduleprofiler.shapes import iter_tensors
from moduleprofiler.shards import sharded_by
from moduleprofiler.storage import storage_key, storage_of
from moduleprofiler.validate import check_operator_map

_OWN: tuple[tuple[str, Kind, str, str, str], ...] = (
    # name (own: self_<name>; inclusive: <name>), kind, label, unit, description of the own share
    ("moved_bytes", "bytes", "moved", "bytes",
     "bytes the call's own forward operators read and wrote (each distinct input once, each "
     "output once; views move nothing): a lower bound on its memory traffic"),
    ("launches", "count", "op launches", "operators",
     "the call's own forward operators that touch memory: about one kernel launch each on a "
     "GPU, estimated from the operators (device_launches counts the kernels the device ran)"),
    ("backward_moved_bytes", "bytes", "backward moved", "bytes",
     "bytes read and written by the backward operators autograd ran for the call's own "
     "forward operators (recomputation included)"),
    ("backward_launches", "count", "backward op launches", "operators",
     "backward operators that touch memory, run for the call's own forward operators"),
    ("recompute_moved_bytes", "bytes", "recompute moved", "bytes",
     "bytes moved by forward work re-run in the backward by activation checkpointing, booked "
     "to the forward call it repeats (already in self_backward_moved_bytes)"),
    ("recompute_ops", "count", "recompute ops", "ops",
     "ops of the forward work re-run in the backward by activation checkpointing (one multiply "
     "= 1 op, one add = 1 op), booked to the forward call it repeats"),
    ("recompute_macs", "count", "recompute macs", "MACs",
     "multiply-accumulates of the forward work re-run in the backward by activation "
     "checkpointing, booked to the forward call it repeats"))
"""The traffic listener's quantities: it writes each call's own share (``self_<name>``); the
bare name is derived, the call with every call inside it."""
for _name, _kind, _label, _unit, _description in _OWN:
    register_own_and_inclusive(_name, _kind, _label, _unit, _description)
register_column("self_recompute_flops", "count", "self recompute flops", aggregation="sum",
                unit="FLOPs", derive=scaled("self_recompute_macs", 2),
                description="2 x self_recompute_macs: the FLOPs of the call's recomputed "
                            "forward work that hardware FLOP utilisation (HFU) adds")
register_column("recompute_flops", "count", "recompute flops", aggregation="inclusive",
                unit="FLOPs", derive=scaled("recompute_macs", 2),
                description="2 x recompute_macs: recomputed forward FLOPs of the call and "
                            "every call inside it")

_ALLOCATIONS = frozenset({"empty", "empty_like", "empty_strided", "new_empty",
                          "new_empty_strided", "empty_permuted"})
"""Operators that hand out memory without writing it."""


ROW_GATHERS = frozenset({"embedding", "index_select", "gather", "index", "take"})
"""Operators that read from their first argument only the rows (elements) they return: the
table is read as much as the output holds (at most whole), not whole (an embedding of 8 tokens
reads 8 rows of its 50,257)."""


ROW_SCATTERS = frozenset({"index_copy_", "index_put_", "_index_put_impl_", "scatter_",
                          "scatter_add_", "scatter_reduce_", "index_add_", "index_reduce_",
                          "put_"})
"""In-place operators that write into their first argument only the elements their other
inputs give (``cache[positions] = rows``, ``index_copy_`` of a KV cache): the target is
written as much as the largest of them holds (at most whole), not whole, and read only where
the operator accumulates into it (:data:`_ACCUMULATING`)."""

_ACCUMULATING = frozenset({"scatter_add_", "scatter_reduce_", "index_add_", "index_reduce_"})
"""Of :data:`ROW_SCATTERS`, those that read the target elements they write (``index_put_``
and ``put_`` do with ``accumulate=True``)."""


def _scatter_target_bytes(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]
                          ) -> tuple[int, int]:
    """Bytes a :data:`ROW_SCATTERS` operator reads from and writes into its target
    (``args[0]``): the elements of its largest other tensor input, at most the target's."""
    target = args[0]
    others = [tensor for tensor in iter_tensors((args[1:], kwargs)) if tensor is not target]
    elements = max((int(t.numel()) for t in others), default=0)
    if name in ("index_put_", "_index_put_impl_") and len(args) > 1:
        elements = max(elements, _indexed_elements(target, args[1]))
    into = min(_nbytes(target), elements * target.element_size())
    accumulate = name in _ACCUMULATING
    if name in ("index_put_", "_index_put_impl_", "put_"):  # (self, index, values, accumulate)
        accumulate = kwargs.get("accumulate", args[3] if len(args) > 3 else False) is True
    return (into if accumulate else 0), into


def _indexed_elements(target: torch.Tensor, indices: Any) -> int:
    """The elements ``target[indices] = values`` writes (``index_put_``): the broadcast
    integer indices' count times the sizes of the dimensions they leave whole (``cache[rows]
    = 0.0`` writes whole rows); 0 for a boolean mask, whose count of true elements only the
    device knows (the mask's own size then bounds what is written)."""
    if not isinstance(indices, (tuple, list)) or any(
            isinstance(index, torch.Tensor) and index.dtype == torch.bool for index in indices):
        return 0
    given = [index for index in indices if isinstance(index, torch.Tensor)]
    picked = torch.broadcast_shapes(*(index.shape for index in given)).numel() if given else 1
    whole = [size for size, index in zip(target.shape, [*indices, *[None] * target.dim()])
             if not isinstance(index, torch.Tensor)]
    return int(picked * math.prod(whole))


def _region(tensor: torch.Tensor) -> tuple[Any, ...]:
    """What identifies the elements a tensor covers: its storage, offset, shape and strides."""
    storage = storage_of(tensor)
    if storage is None:
        return (id(tensor),)
    if tensor.is_nested and tensor.layout == torch.strided:
        # a nested tensor (``torch.nested.nested_tensor``) has no one shape or strides (asking
        # raises): each component's offset, sizes and strides in its buffer
        return (storage_key(storage), *(tuple(map(tuple, part.tolist())) if part.dim() > 1
                                        else tuple(part.tolist()) for part in (
            tensor._nested_tensor_storage_offsets(), tensor._nested_tensor_size(),
            tensor._nested_tensor_strides())))
    return (storage_key(storage), tensor.storage_offset(), tuple(tensor.shape), tensor.stride())


def _nbytes(tensor: torch.Tensor) -> int:
    return int(tensor.numel()) * tensor.element_size()


def operator_bytes(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                   out: Any) -> int | None:
    """Bytes one aten operator call reads plus writes (``None``: it moves nothing, as a view
    or an allocation).

    Each distinct input region is read once and each output written once; an output that shares
    its storage with an input is a view (nothing moved) unless the operator mutates its
    arguments (``add_``, ``copy_``: the target is read and written).
    """
    schema = getattr(func, "_schema", None)  # a higher-order operator has none
    if schema is not None and (func.is_view or func.overloadpacket.__name__ in _ALLOCATIONS):
        return None
    mutable = schema is not None and schema.is_mutable
    read: dict[tuple[Any, ...], int] = {}
    storages: set[int] = set()
    # an ``out=`` tensor is written, not read
    inputs = (args, {k: v for k, v in kwargs.items() if k != "out"}) if kwargs else args
    for tensor in iter_tensors(inputs):
        key = _region(tensor)
        if key not in read:
            read[key] = _nbytes(tensor)
            storages.add(key[0])
    written = 0
    aliased = True
    for tensor in iter_tensors(out):
        if not mutable and _region(tensor)[0] in storages:
            continue  # an alias of an input (``_unsafe_view``, ``lift_fresh``): no traffic
        aliased = False
        written += _nbytes(tensor)
    if aliased and not mutable and read:
        return None
    name = func.overloadpacket.__name__ if schema is not None else ""
    if name in ROW_GATHERS and args \
            and isinstance(args[0], torch.Tensor) and _region(args[0]) in read:
        table = _region(args[0])
        read[table] = min(read[table], written)
    if name in ROW_SCATTERS and args and isinstance(args[0], torch.Tensor) \
            and _region(args[0]) in read:
        # the target came in as an input (read whole) and out as the output (written whole)
        read[_region(args[0])], into = _scatter_target_bytes(name, args, kwargs)
        written += into - _nbytes(args[0])
    return sum(read.values()) + written


class _Tally:
    __slots__ = ("launches", "macs", "moved", "ops")

    def __init__(self) -> None:
        self.moved = 0
        self.launches = 0
        self.ops: int | float = 0
        self.macs: int | float = 0


class TrafficListener(Listener):
    """Bytes each module call's operators read and write, forward and backward (see the
    module docstring); pass it in ``ModuleProfiler().profile(..., listeners=[...])``.

    Args:
        operators: the operator formulas used to count recomputed forward work (default: those
            the pass counts with, the profiler's ``operator_fn_map``; outside a counted pass
            :func:`~moduleprofiler.operators.get_default_operator_map`). They are applied
            and checked exactly as the counting applies them.
    """

    wants_nodes = True
    observes_all = True

    def __init__(self, operators: OperatorMap | None = None) -> None:
        if operators is not None:
            check_operator_map(operators, "operators")
        self._operators = operators
        self.unsupported_recompute: dict[str, int] = {}
        """Recomputed operators without an operator formula (their ops are a lower bound)."""
        self._formulas = PassFormulas(operators, missing=self.unsupported_recompute)
        self._forward: dict[int, _Tally] = {}
        self._backward: dict[int, _Tally] = {}
        self._recompute: dict[int, _Tally] = {}
        self._backward_ran = False
        self.outside = _Tally()
        """Forward operators that ran outside every module call."""
        self.backward_outside = _Tally()
        """Backward operators of no module call (the loss, gradient accumulation)."""

    def start(self, runner: PassRunner) -> None:
        table = self._operators
        if table is None:  # the pass's own table, else the registered formulas
            table = runner.context.operators
        self._formulas = pass_formulas(
            get_default_operator_map() if table is None else table,
            sharded_by(runner.modules), self.unsupported_recompute)

    def operator(self, call: Call | None, func: Any, args: tuple[Any, ...],
                 kwargs: dict[str, Any], out: Any) -> None:
        moved = operator_bytes(func, args, kwargs, out)
        if moved is not None:
            tally = self.outside if call is None else _tally(self._forward, call.index)
            tally.moved += moved
            tally.launches += 1

    def backward_operator(self, owner: Call | None, func: Any, args: tuple[Any, ...],
                          kwargs: dict[str, Any], out: Any) -> None:
        self._backward_ran = True
        moved = operator_bytes(func, args, kwargs, out)
        if moved is None:
            return
        if owner is None:
            tally = self.backward_outside
        else:
            tally = _tally(self._backward, owner.index)
            # a backward runs with grad mode off; forward operators re-run inside it by an
            # activation checkpoint (to rebuild what was not saved) run with it on
            if torch.is_grad_enabled() and torch._C._current_autograd_node() is not None:
                self._count_recompute(_tally(self._recompute, owner.index), owner, func,
                                      args, kwargs, out, moved)
        tally.moved += moved
        tally.launches += 1

    def _count_recompute(self, tally: _Tally, owner: Call, func: Any, args: tuple[Any, ...],
                         kwargs: dict[str, Any], out: Any, moved: int) -> None:
        tally.moved += moved
        tally.launches += 1
        counts = self._formulas.count(func, args, kwargs, out, owner)
        if counts is not None and counts is not MISSING:
            tally.ops += counts[0]
            tally.macs += counts[1]

    def finish(self, runner: PassRunner) -> None:
        empty = _Tally()
        for call in runner.calls:
            values = call.values
            forward = self._forward.get(call.index, empty)
            values["self_moved_bytes"] = forward.moved
            values["self_launches"] = forward.launches
            if self._backward_ran:
                backward = self._backward.get(call.index, empty)
                recompute = self._recompute.get(call.index, empty)
                values["self_backward_moved_bytes"] = backward.moved
                values["self_backward_launches"] = backward.launches
                values["self_recompute_moved_bytes"] = recompute.moved
                values["self_recompute_ops"] = recompute.ops
                values["self_recompute_macs"] = recompute.macs


def _tally(tallies: dict[int, _Tally], index: int) -> _Tally:
    tally = tallies.get(index)
    if tally is None:
        tally = tallies[index] = _Tally()
    return tally
