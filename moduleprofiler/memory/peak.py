"""Live bytes and their peak: operator-level accounting of live storages, and the CUDA
allocator's counters, as a listener of the pass runner.

:class:`LiveBytes` adds a storage's bytes the first time an operator returns it and subtracts
them when the storage dies (a weak reference on the storage; its Python object lives exactly as
long as the ``StorageImpl``, so this works on CPU, CUDA and the meta device alike, where
``data_ptr()`` is 0). :class:`LiveBytesListener` feeds it every operator of the forward (the
runner's observer, on everywhere) and of the backward, keeps the maximum per call and where the
pass's peak was set; on CUDA the allocator's peak (:class:`~moduleprofiler.devices.AllocatorPeak`)
is read after every operator and at every call's start, so it knows which call was running
when the allocator's peak rose.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor
from torch.nn.modules.lazy import LazyModuleMixin

from moduleprofiler.autograd_nodes import is_accumulation
from moduleprofiler.call import Call
from moduleprofiler.devices import AllocatorPeak, synchronize
from moduleprofiler.export.columns import register_column
from moduleprofiler.memory.report import Phase
from moduleprofiler.memory.saved import MEMORY_NEEDS
from moduleprofiler.packed import any_packed, packed_weights
from moduleprofiler.records import subtree_totals
from moduleprofiler.runner import Listener, PassRunner
from moduleprofiler.shapes import iter_tensors
from moduleprofiler.storage import own_nbytes, storage_key, storage_nbytes, storage_of, tensor_key

Location = tuple[Call | None, Phase, bool]
"""``(running call or None, phase "forward"/"backward", accumulating a parameter's grad)``."""


class _Ref(weakref.ref):  # type: ignore[type-arg]
    __slots__ = ("key", "nbytes")
    key: int
    nbytes: int


class LiveBytes:
    """Bytes of live storages: the ``baseline`` ones (alive throughout: parameters, buffers,
    inputs) plus every storage an operator returned that has not died yet.

    A storage an operator returns that is one of its own inputs' and was never counted (a
    view or an in-place write of a tensor the model kept in a plain attribute, a closure or a
    global before the pass) was not allocated by the pass: it is left out, as every other
    tensor the process held before the pass is."""

    def __init__(self) -> None:
        self._baseline: dict[int, torch.UntypedStorage] = {}  # strong refs: keys stay unique
        self.baseline_bytes = 0
        self.current = 0
        self._storages: dict[int, _Ref] = {}
        self._tensors: dict[int, _Ref] = {}
        self._before: dict[int, _Ref] = {}  # alive before the pass, not counted (weak refs)
        self.allocations = 0

    def add_baseline(self, tensors: Iterable[Tensor]) -> None:
        """Count the storages of ``tensors`` as alive throughout (those an operator returned
        already are allocations of the pass and stay so)."""
        for tensor in tensors:
            storage = storage_of(tensor)
            if storage is None:
                continue
            key = storage_key(storage)
            if key not in self._baseline and key not in self._storages:
                self._baseline[key] = storage
                self.baseline_bytes += storage_nbytes(storage)
                self.current += storage_nbytes(storage)

    def to_baseline(self, tensors: Iterable[Tensor]) -> None:
        """Count the storages of ``tensors`` that an operator of the pass returned with the
        baseline instead (a lazy module's parameters, materialised in its first call: model
        state, not the pass's memory); ``current`` and the peak stay as they were."""
        for tensor in tensors:
            storage = storage_of(tensor)
            ref = None if storage is None else self._storages.pop(storage_key(storage), None)
            if storage is not None and ref is not None:
                self._baseline[ref.key] = storage
                self.baseline_bytes += ref.nbytes
                self.allocations -= 1

    def release(self) -> None:
        """Stop accounting and drop every reference (the numbers stay)."""
        self._baseline.clear()
        self._storages.clear()
        self._tensors.clear()
        self._before.clear()

    def add(self, value: Any, inputs: Any = ()) -> bool:
        """Account for the tensors in an operator's output (``inputs``: the operator's
        arguments, which tell a storage that existed before it); whether ``current`` grew."""
        if isinstance(value, Tensor):  # the common case, without a walk
            return self._add(value, inputs)
        grew = False
        for tensor in iter_tensors(value):
            grew = self._add(tensor, inputs) or grew
        return grew

    def _add(self, tensor: Tensor, inputs: Any = ()) -> bool:
        storage = storage_of(tensor)
        if storage is None:  # sparse, nested, ...: the tensor's own bytes, while it lives
            if id(tensor) in self._tensors:
                return False
            return self._track(self._tensors, id(tensor), tensor, own_nbytes(tensor))
        key = storage_key(storage)
        if key in self._baseline or key in self._before:
            return False
        ref = self._storages.get(key)
        if ref is None:
            if any(tensor_key(t) == key for t in iter_tensors(inputs)):
                # a storage of one of its inputs: a view or an in-place result, not allocated
                ref = self._before[key] = _Ref(storage, self._release(self._before))
                ref.key, ref.nbytes = key, 0
                return False
            return self._track(self._storages, key, storage, storage_nbytes(storage))
        nbytes = storage_nbytes(storage)  # resized in place (``resize_``, ``out=``)
        if nbytes == ref.nbytes:
            return False
        grew = nbytes > ref.nbytes
        self.current += nbytes - ref.nbytes
        ref.nbytes = nbytes
        return grew

    def _track(self, table: dict[int, _Ref], key: int, target: Any, nbytes: int) -> bool:
        ref = _Ref(target, self._release(table))
        ref.key, ref.nbytes = key, nbytes
        table[key] = ref
        self.current += nbytes
        self.allocations += 1
        return nbytes > 0

    def _release(self, table: dict[int, _Ref]) -> Callable[[_Ref], None]:
        owner = weakref.ref(self)

        def release(ref: _Ref) -> None:
            live = owner()
            if live is not None and table.get(ref.key) is ref:
                del table[ref.key]
                live.current -= ref.nbytes

        return release


class LiveBytesListener(Listener):
    """Live bytes per call and the pass's peak (on CUDA also the allocator's).

    Writes ``max_live_bytes`` (the highest live memory, baseline included, while the call or
    anything inside it ran in the forward) into every call's values and, when a backward ran,
    ``backward_max_live_bytes`` (while the backward of the call's own operators ran).

    Args:
        inputs: the model's inputs, alive throughout the pass (default: the arguments of the
            first outermost module call).
        device: a CUDA device to sample the caching allocator on (others: ignored).
    """

    observes_all = True
    # each live-memory column names its pass in its header: "max live" alone was read as the
    # training step's memory, which it is not (``train_max_live_bytes`` is this column of the
    # training pass, renamed by measure_memory). Declared training pass first, the order a
    # memory report shows them in: a view that must hide one to fit hides the inference
    # pass's first.
    columns = tuple(
        register_column(name, "bytes", label, aggregation="max", unit="bytes",
                        needs=MEMORY_NEEDS, description=description)
        for name, label, description in (
            ("train_max_live_bytes", "train fwd max live", "as max_live_bytes, in the "
             "forward of the training pass (grad enabled)"),
            ("backward_max_live_bytes", "train bwd max live", "the highest live memory, "
             "baseline included, while the backward of the call's own operators ran"),
            ("max_live_bytes", "fwd max live", "the highest live memory, baseline included, "
             "while the call or anything inside it ran in the no-grad forward")))

    def __init__(self, inputs: Any = None, device: torch.device | None = None) -> None:
        self.live = LiveBytes()
        self._inputs = inputs
        self._inputs_pending = inputs is None
        self._device = device if device is not None and device.type == "cuda" else None
        self.cuda: AllocatorPeak | None = None
        self.peak = 0
        self.peak_at: Location | None = None
        self.cuda_peak_at: Location | None = None
        self.requested_peak_bytes: int | None = None
        """On CUDA, the allocator's peak of requested bytes, read when the pass finishes."""
        self._forward: dict[Call | None, int] = {}
        self._backward: dict[Call | None, int] = {}
        self.backward_ran = False
        self._lazy: set[int] = set()  # ids of lazy modules not materialised at the start

    def start(self, runner: PassRunner) -> None:
        self.live.add_baseline([*runner.root.parameters(), *runner.root.buffers()])
        if any_packed(runner.modules):  # a quantized layer's weights: model state too
            self.live.add_baseline(tensor for module in runner.modules
                                   for tensor in (packed_weights(module) or ((), False))[0])
        self.live.add_baseline(iter_tensors(self._inputs))
        self._inputs = None
        self._lazy = {id(module) for module in runner.root.modules()
                      if isinstance(module, LazyModuleMixin)
                      and module.has_uninitialized_params()}
        self.peak = self.live.current
        if self._device is not None:
            self.cuda = AllocatorPeak(self._device)

    def enter(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self._inputs_pending and call.parent is None:
            self._inputs_pending = False
            self.live.add_baseline(iter_tensors((args, kwargs)))
            self.peak = max(self.peak, self.live.current)
        self._forward[call] = self.live.current
        if self.cuda is not None and self.cuda.sample():
            self.cuda_peak_at = (call, "forward", False)

    def exit(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any],
             output: Any) -> None:
        module = call.module
        if self._lazy and id(module) in self._lazy:  # materialised by its first call
            self._lazy.discard(id(module))
            self.live.to_baseline([*module.parameters(recurse=False),
                                   *module.buffers(recurse=False)])

    def operator(self, call: Call | None, func: Any, args: tuple[Any, ...],
                 kwargs: dict[str, Any], out: Any) -> None:
        self._account(call, "forward", self._forward, out,
                      (args, kwargs) if _may_alias(func) else ())

    def backward_operator(self, owner: Call | None, func: Any, args: tuple[Any, ...],
                          kwargs: dict[str, Any], out: Any) -> None:
        self.backward_ran = True
        self._account(owner, "backward", self._backward, out,
                      (args, kwargs) if _may_alias(func) else ())

    def _account(self, call: Call | None, phase: Phase, maxima: dict[Call | None, int],
                 out: Any, inputs: Any) -> None:
        if self.live.add(out, inputs):
            current = self.live.current
            if current > maxima.get(call, -1):
                maxima[call] = current
            if current > self.peak or self.peak_at is None:
                self.peak = current
                self.peak_at = _location(call, phase)
        if self.cuda is not None and self.cuda.sample():
            self.cuda_peak_at = _location(call, phase)

    def finish(self, runner: PassRunner) -> None:
        inclusive = subtree_totals([self._forward.get(call) for call in runner.calls],
                                   [call.parent for call in runner.calls], max)
        for call, max_live in zip(runner.calls, inclusive):
            call.values["max_live_bytes"] = max_live
            if self.backward_ran:
                call.values["backward_max_live_bytes"] = self._backward.get(call)
        if self.cuda is not None:
            synchronize(self.cuda.device)
            if self.cuda.sample():
                self.cuda_peak_at = (None, "backward" if self.backward_ran else "forward", False)
            self.requested_peak_bytes = self.cuda.requested_peak_bytes()
        self.release()

    def release(self) -> None:
        """Drop every reference to storages and calls (the numbers stay)."""
        self.live.release()
        self._lazy.clear()
        self._forward.clear()
        self._backward.clear()


_ALIASING: dict[Any, bool] = {}


def _may_alias(func: Any) -> bool:
    """Whether the operator may return one of its inputs' storages (a view, an in-place or
    ``out=`` result: an alias annotation on a return in its schema); an operator without a
    schema may. Read once per operator: the inputs are walked only for these."""
    found = _ALIASING.get(func)
    if found is None:
        schema = getattr(func, "_schema", None)
        found = _ALIASING[func] = schema is None or any(
            ret.alias_info is not None for ret in schema.returns)
    return found


def _location(call: Call | None, phase: Phase) -> Location:
    accumulating = phase == "backward" and is_accumulation(torch._C._current_autograd_node())
    return call, phase, accumulating
