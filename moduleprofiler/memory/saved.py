"""Bytes of the tensors autograd saves for backward, per module call, as a listener of the
pass runner.

``torch.autograd.graph.saved_tensors_hooks`` (on for the forward) sees every tensor an operation
saves; the pack hook returns the tensor itself (nothing is copied or kept) and charges its
storage, once, to the innermost module call running. Saved storages that belong to parameters
or buffers, or to tensors the modules held as attributes before the pass, are not activation
memory (they exist anyway) and are counted apart, as are the model's inputs.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor

from moduleprofiler.call import Call
from moduleprofiler.export.columns import register_column, register_quantity
from moduleprofiler.modules import held_tensors
from moduleprofiler.records import subtree_totals
from moduleprofiler.runner import Listener, PassRunner
from moduleprofiler.shapes import iter_tensors
from moduleprofiler.storage import own_nbytes, storage_key, storage_nbytes, storage_of

SavedKind = Literal["activation", "parameter", "input"]


@dataclass
class SavedTotals:
    """Saved bytes by kind (each storage charged once, to its first saver)."""

    activation: int = 0
    parameter: int = 0
    input: int = 0


MEMORY_NEEDS = ("a profile from measure_memory() (train=True for the saved and training "
                "columns), or one merged with it: profile.merge(memory)")
"""What every measured memory column needs (views say it when one is asked for and missing)."""


class SavedTensorsListener(Listener):
    """Charges every storage autograd saves in the forward to the innermost running call.

    Writes ``self_saved_bytes`` (activations saved by the call's own operators),
    ``saved_bytes`` (with the calls inside it) and ``self_saved_param_bytes`` (parameter and
    buffer storages its operators saved first, and those of tensors the modules held as
    attributes before the pass) into every call's values; :attr:`totals` holds
    the pass's totals by kind, work outside every module call (the loss) included.

    Args:
        inputs: the model's inputs, counted as ``input`` (default: the arguments of the first
            outermost module call).
    """

    param_column = register_column(
        "self_saved_param_bytes", "bytes", "self saved param", aggregation="sum", unit="bytes",
        needs=MEMORY_NEEDS, description="parameter bytes saved for backward by the call's own "
        "operators, buffers and tensors the modules held as attributes before the pass "
        "included (not activations: they are the weights)")
    """The column of the parameters saved: weights, which exist anyway, so the views of
    activation memory (a memory report's default tree) leave it out."""
    columns = (
        register_column("saved_bytes", "bytes", "saved", aggregation="inclusive",
                        unit="bytes", needs=MEMORY_NEEDS, description="activation bytes "
                        "saved for backward by the call and the calls inside it"),
        register_column("self_saved_bytes", "bytes", "self saved", aggregation="sum",
                        unit="bytes", needs=MEMORY_NEEDS, description="activation bytes "
                        "saved for backward by the call's own operators"),
        param_column,
    )

    def __init__(self, inputs: Any = None) -> None:
        self._inputs = inputs
        self._inputs_pending = inputs is None
        self._kinds: dict[int, SavedKind] = {}
        self._keep: list[torch.UntypedStorage] = []  # alive, so their keys are never reused
        self._seen: dict[int, weakref.ref[torch.UntypedStorage]] = {}
        # held as module attributes at the start; weak, so a cache the forward replaces is
        # freed as it would be without the pass
        self._held: dict[int, weakref.ref[torch.UntypedStorage]] = {}
        self._stack: list[Call] = []
        self._hooks: Any = None
        self.by_call: dict[Call | None, SavedTotals] = {}
        self.totals = SavedTotals()

    def start(self, runner: PassRunner) -> None:
        self._stack = runner.stack
        self._classify("parameter", [*runner.root.parameters(), *runner.root.buffers()])
        self._classify("input", iter_tensors(self._inputs))
        self._inputs = None
        for tensor in held_tensors(runner.root.modules()):
            storage = storage_of(tensor)
            if storage is not None:
                self._held.setdefault(storage_key(storage), weakref.ref(storage))
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack)
        self._hooks.__enter__()

    def stop(self, runner: PassRunner) -> None:
        if self._hooks is not None:
            self._hooks.__exit__(None, None, None)
            self._hooks = None

    def enter(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self._inputs_pending and call.parent is None:
            self._inputs_pending = False
            self._classify("input", iter_tensors((args, kwargs)))

    def finish(self, runner: PassRunner) -> None:
        owns = [self.by_call.get(call) for call in runner.calls]
        inclusive = subtree_totals([own.activation if own is not None else None for own in owns],
                                   [call.parent for call in runner.calls])
        for call, own, saved in zip(runner.calls, owns, inclusive):
            call.values["self_saved_bytes"] = own.activation if own is not None else 0
            call.values["saved_bytes"] = saved or 0
            call.values["self_saved_param_bytes"] = own.parameter if own is not None else 0
        self._kinds.clear()
        self._keep.clear()
        self._seen.clear()
        self._held.clear()
        self.by_call.clear()
        self._stack = []

    def _classify(self, kind: SavedKind, tensors: Any) -> None:
        for tensor in tensors:
            storage = storage_of(tensor)
            if storage is not None:
                self._kinds.setdefault(storage_key(storage), kind)
                self._keep.append(storage)

    def _pack(self, tensor: Tensor) -> Tensor:
        storage = storage_of(tensor)
        if storage is None:
            self._charge("activation", own_nbytes(tensor))
            return tensor
        key = storage_key(storage)
        kind = self._kinds.get(key)
        if kind is None:
            held = self._held.get(key)
            if held is not None and held() is not None:
                kind = "parameter"  # model state from before the pass, like a buffer
        if kind is None:
            ref = self._seen.get(key)
            if ref is not None and ref() is not None:
                return tensor
            kind = "activation"
        elif key in self._seen:
            return tensor
        self._seen[key] = weakref.ref(storage)
        self._charge(kind, storage_nbytes(storage))
        return tensor

    def _charge(self, kind: SavedKind, nbytes: int) -> None:
        call = self._stack[-1] if self._stack else None
        totals = self.by_call.get(call)
        if totals is None:
            totals = self.by_call[call] = SavedTotals()
        setattr(totals, kind, getattr(totals, kind) + nbytes)
        setattr(self.totals, kind, getattr(self.totals, kind) + nbytes)


def _unpack(tensor: Tensor) -> Tensor:
    return tensor


register_quantity("memory", "self_saved_bytes", "saved_bytes", "saved for backward")
