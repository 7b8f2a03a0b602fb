"""Bytes moved: what each aten operator reads and writes, booked to module calls.

A lower bound on memory traffic, operator by operator: an operator reads each distinct input
tensor once (``numel * element_size`` of the view it is given, not of the whole storage; an
expanded dimension, of stride 0, once) and writes each output once (a gather, such as an
embedding's lookup, reads from its table only the rows it returns). Views (``t``, ``view``,
``expand``, ``detach``...) and other outputs that merely alias an input move nothing; an
in-place operator reads and writes its target (an overwrite, ``copy_``, ``fill_``, ``zero_``
or a random fill, only writes it; a scatter, ``index_copy_``, ``index_put_``, ``scatter_``...,
only the elements it touches: those its indices name, or its boolean mask selects); ``empty``
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
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import _disable_current_modes

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


_OVERWRITES = frozenset({"copy_", "fill_", "zero_", "normal_", "uniform_", "random_",
                         "exponential_", "geometric_", "cauchy_", "log_normal_", "bernoulli_"})
"""In-place operators that overwrite their target without reading its values: the target is
written, not read (``torch.zeros`` and ``torch.full`` dispatch ``empty`` then ``zero_`` or
``fill_``; ``x[...] = y`` dispatches ``copy_``)."""


def _nbytes(tensor: torch.Tensor) -> int:
    """Bytes of the distinct elements ``tensor`` covers: an expanded dim (stride 0) repeats
    one element, so ``x.expand(1000, 4)`` of a ``(1, 4)`` tensor covers 4 elements, not 4000."""
    numel = int(tensor.numel())
    if numel and tensor.layout == torch.strided and not tensor.is_nested \
            and 0 in tensor.stride():
        numel = math.prod(size for size, step in zip(tensor.shape, tensor.stride()) if step)
    return numel * tensor.element_size()


_SCATTERS = {"index_copy_": 3, "index_add_": 3, "index_reduce_": 3, "scatter_": 2,
             "scatter_add_": 2, "scatter_reduce_": 2, "index_put_": 1, "_index_put_impl_": 1,
             "put_": 1}
"""In-place operators that touch only the elements of their target their source (position 3)
or index (position 2; ``put_``: its index, position 1; ``index_put_``: its indices, position
1) names, not the whole target: a cache update ``cache.index_copy_(2, position, new)`` writes
``new``'s elements."""
_INDEX_PUTS = frozenset({"index_put_", "_index_put_impl_"})
"""Scatters whose indices are a list, one per leading dimension (``cache[rows] = values``)."""
_ACCUMULATES = frozenset({"index_add_", "scatter_add_", "index_reduce_", "scatter_reduce_"})
"""Scatters that read the elements they touch (``index_put_`` and ``put_`` too with
``accumulate``)."""


def _touched(name: str, args: tuple[Any, ...]) -> int | None:
    """Elements of the target (``args[0]``) a scatter touches; ``None`` when its arguments do
    not say (a boolean mask of ``index_put_`` without data: on the meta device)."""
    target, named = args[0], args[_SCATTERS[name]] if len(args) > _SCATTERS[name] else None
    if name not in _INDEX_PUTS:
        return int(named.numel()) if isinstance(named, torch.Tensor) else None
    taken: list[Any] = []  # the index that takes each leading dimension (None: left whole)
    shapes: list[tuple[int, ...]] = []
    for index in named or ():
        if index is None:
            taken.append(None)
            continue
        if not isinstance(index, torch.Tensor) or index.is_floating_point():
            return None
        if index.dtype in (torch.bool, torch.uint8):  # a mask takes as many dims as it has
            selected = _selected(index)
            if selected is None:
                return None
            shapes.append((selected,))  # the positions it selects, as torch takes them
            taken += [index] * index.dim()
        else:
            shapes.append(tuple(index.shape))
            taken.append(index)
    if not shapes:
        return None
    picked = math.prod(torch.broadcast_shapes(*shapes))
    # ``cache[:, at] = 0.0`` writes the whole first dimension, and every dim after the indices
    whole = [size for size, index in zip(target.shape, [*taken, *[None] * target.dim()])
             if index is None]
    return picked * math.prod(whole)


def _selected(mask: torch.Tensor) -> int | None:
    """The positions a boolean mask selects (its data: the count is nowhere in its shape);
    ``None`` for a mask without data (meta, fake)."""
    if mask.device.type == "meta" or isinstance(mask, FakeTensor):
        return None
    with _disable_current_modes():  # counting is no operator of the model's
        return int(torch.count_nonzero(mask))


def _scatter_bytes(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> int | None:
    """Bytes of a scatter that touches part of its target: its other inputs read, the touched
    elements written (and read, where it accumulates); ``None`` when it cannot say which."""
    touched = _touched(name, args)
    if touched is None:
        return None
    target = args[0]
    read: dict[tuple[Any, ...], int] = {}
    for tensor in iter_tensors((args[1:], kwargs)):
        read.setdefault(_region(tensor), _nbytes(tensor))
    read.pop(_region(target), None)
    written = min(touched * target.element_size(), _nbytes(target))
    accumulates = name in _ACCUMULATES or (name in (*_INDEX_PUTS, "put_") and bool(
        kwargs.get("accumulate", args[3] if len(args) > 3 else False)))
    return sum(read.values()) + written * (2 if accumulates else 1)


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
    if mutable and args and isinstance(args[0], torch.Tensor) \
            and func.overloadpacket.__name__ in _SCATTERS:
        moved = _scatter_bytes(func.overloadpacket.__name__, args, kwargs)
        if moved is not None:
            return moved
    read: dict[tuple[Any, ...], int] = {}
    storages: set[int] = set()
    # an ``out=`` tensor is written, not read; so is the target of an overwrite (``copy_``)
    if mutable and args and func.overloadpacket.__name__ in _OVERWRITES:
        args = args[1:]
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
    return sum(read.values()) + written


class _Tally:
    __slots__ = ("known", "launches", "macs", "moved", "ops")

    def __init__(self) -> None:
        self.moved = 0
        self.launches = 0
        self.ops: int | float = 0
        self.macs: int | float = 0
        self.known = True
        """False once an operator without a formula ran: ``ops`` and ``macs`` are unknown."""


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
        """Recomputed operators without an operator formula, with their call counts: the
        ``self_recompute_ops`` and ``self_recompute_macs`` of a call that reran one are
        unknown (``None``), and :func:`~moduleprofiler.efficiency.utilization` is then not
        ``complete``."""
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
        if counts is MISSING:
            tally.known = False
        elif counts is not None:
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
                # a rerun operator without a formula: the call's recomputed work is unknown,
                # never a 0 that HFU would add as exact (unsupported_recompute names it)
                values["self_recompute_ops"] = recompute.ops if recompute.known else None
                values["self_recompute_macs"] = recompute.macs if recompute.known else None


def _tally(tallies: dict[int, _Tally], index: int) -> _Tally:
    tally = tallies.get(index)
    if tally is None:
        tally = tallies[index] = _Tally()
    return tally
