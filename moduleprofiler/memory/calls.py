"""The runtime call stack of module calls, for attributing memory to the call that ran.

Light forward pre/post hooks (the post hook with ``always_call=True``) in one ``ExitStack``;
nothing is written onto the modules. In the forward the running call is the top of the stack.
In the backward it is found from the autograd node that is executing: each node's sequence
number falls in the interval between two hook events of the forward, and the call that was
innermost in that interval created it.
"""

from __future__ import annotations

import bisect
import sys
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from moduleprofiler.memory._storage import model_tensors, new_storage_bytes

_get_sequence_nr: Callable[[], int] | None = getattr(torch._C._autograd, "_get_sequence_nr", None)
"""The next autograd node's sequence number (absent on very old torch: no backward
attribution then)."""

_ACCUMULATE_SEQ = 2**64 - 1
"""Sequence number of ``AccumulateGrad`` nodes (not created by a forward operation)."""


@dataclass
class Call:
    """One module call seen by the tracker (mutable while the pass runs)."""

    index: int
    parent: int | None
    depth: int
    path: str
    type_name: str
    call_number: int
    output_bytes: int | None = None
    """Bytes of new storages among the outputs; ``None`` if the call raised."""


@dataclass
class _Interval:
    starts: list[int] = field(default_factory=list)
    calls: list[int | None] = field(default_factory=list)


EnterListener = Callable[[Call], None]


class CallTracker:
    """Keeps the stack of running module calls of one pass and the finished :class:`Call` list.

    ``on_enter`` listeners are told of every call as it starts. ``record_outputs`` switches on
    the per-call ``output_bytes`` (one storage walk per call).
    """

    def __init__(self, root: nn.Module, *, record_outputs: bool = True) -> None:
        self._root = root
        self._record_outputs = record_outputs
        self._paths = {id(module): path for path, module in root.named_modules()}
        self._types = {id(module): type(module).__name__ for module in root.modules()}
        self._counts: dict[int, int] = {}
        self._own: dict[int, list[torch.Tensor]] = {}
        self._owners: dict[int, str] = {}
        self.calls: list[Call] = []
        self.stack: list[Call] = []
        self.listeners: list[EnterListener] = []
        self.failed_path: str | None = None
        self._outer: list[BaseException | None] = []
        self._seq = _Interval()

    # -- installing ------------------------------------------------------------------------
    @contextmanager
    def hooked(self) -> Iterator[CallTracker]:
        """Hooks on every module for the duration of the ``with`` block."""
        with ExitStack() as hooks:
            for module in self._root.modules():
                hooks.enter_context(module.register_forward_pre_hook(self._enter))
                hooks.enter_context(module.register_forward_hook(
                    self._exit, with_kwargs=True, always_call=True))
            yield self

    def release(self) -> None:
        """Drop every reference to modules, tensors and listeners (the calls stay)."""
        self._own.clear()
        self._owners.clear()
        self.listeners.clear()
        self.stack.clear()
        self._outer.clear()

    # -- queries ---------------------------------------------------------------------------
    def current(self) -> int | None:
        """Index of the innermost running call (``None`` outside every call)."""
        return self.stack[-1].index if self.stack else None

    def call_of_node(self, node: Any) -> int | None:
        """Index of the forward call that created the autograd ``node`` (``None`` if unknown,
        e.g. created outside every module call or by the loss function)."""
        if node is None or not self._seq.starts:
            return None
        try:
            sequence = int(node._sequence_nr())
        except (AttributeError, RuntimeError):
            return None
        position = bisect.bisect_right(self._seq.starts, sequence) - 1
        return self._seq.calls[position] if position >= 0 else None

    def owner_of_accumulation(self, node: Any) -> str | None:
        """For an ``AccumulateGrad`` node: the path of the module that owns its parameter."""
        if not self._owners:
            for path, module in self._root.named_modules():
                for tensor in module.parameters(recurse=False):
                    self._owners.setdefault(id(tensor), path)
        variable = getattr(node, "variable", None)
        return None if variable is None else self._owners.get(id(variable))

    @staticmethod
    def is_accumulation(node: Any) -> bool:
        """Whether ``node`` accumulates a leaf's gradient (``AccumulateGrad``)."""
        try:
            return int(node._sequence_nr()) == _ACCUMULATE_SEQ
        except (AttributeError, RuntimeError):
            return False

    # -- hooks -----------------------------------------------------------------------------
    def _mark(self) -> None:
        if _get_sequence_nr is not None:
            self._seq.starts.append(int(_get_sequence_nr()))
            self._seq.calls.append(self.current())

    def _enter(self, module: nn.Module, args: tuple[Any, ...]) -> None:
        key = id(module)
        parent = self.stack[-1] if self.stack else None
        number = self._counts.get(key, 0)
        self._counts[key] = number + 1
        call = Call(
            index=len(self.calls),
            parent=parent.index if parent else None,
            depth=parent.depth + 1 if parent else 0,
            path=self._paths.get(key, "?"),
            type_name=self._types.get(key, type(module).__name__),
            call_number=number,
        )
        self.calls.append(call)
        self.stack.append(call)
        self._outer.append(sys.exc_info()[1])
        self._mark()
        for listener in self.listeners:
            listener(call)

    def _exit(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
              output: Any) -> None:
        path = self._paths.get(id(module))
        while self.stack:
            call = self.stack.pop()
            outer = self._outer.pop()
            if call.path == path:
                break
        else:
            return
        exception = sys.exc_info()[1]
        if exception is not None and exception is not outer:
            if self.failed_path is None:
                self.failed_path = call.path
        elif self._record_outputs:
            call.output_bytes = new_storage_bytes(output, args, kwargs, self._own_tensors(module))
        self._mark()

    def _own_tensors(self, module: nn.Module) -> list[torch.Tensor]:
        tensors = self._own.get(id(module))
        if tensors is None:
            tensors = self._own[id(module)] = model_tensors(module)
        return tensors
