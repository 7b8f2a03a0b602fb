"""Named ranges for GPU tools: every module call, forward and backward, labelled with its path.

:class:`RangeListener` opens a ``torch.autograd.profiler.record_function`` range (the PyTorch
profiler's trace, TensorBoard, Perfetto) and, where CUDA is available, an NVTX range (Nsight
Systems) around every module call, named by the module path (``layer1.0.conv1``; the root is
``__root__``). Forward ranges nest as the calls do.

Backward (``backward=True``): when an outermost call returns, the nodes each call created are
found by the same graph walk as the clock's (:func:`~.graph.call_graph`), and each gets a
pre-hook that opens a range ``"<path> (backward)"`` and a post-hook that closes it. A node's
pre- and post-hooks run on the thread that runs the node, just around it, so the ranges nest
properly on every thread (NVTX ranges are per-thread stacks). A module's backward is then one
range per autograd node it created; ranges do not nest across modules in the backward, since
a parent's backward is not one interval around its children's. ``AccumulateGrad`` (the write
of a parameter's ``.grad``) keeps torch's own name. An activation checkpoint's rerun of a call
inside the backward is a ``"<path> (backward)"`` range too, as is each node of the graph a
reentrant checkpoint rebuilds (named after the call that created it in the rerun).

Opt-in: ``time_modules(..., ranges=True)``, ``train_step_times(..., ranges=True)``, or
``profile(..., listeners=[RangeListener()])``. A range costs a few microseconds of CPU per
call or node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.autograd.profiler import record_function
from torch.utils.hooks import RemovableHandle

from moduleprofiler.call import Call
from moduleprofiler.devices import cuda_available, range_pop, range_push
from moduleprofiler.records import display_path
from moduleprofiler.reruns import Rerun
from moduleprofiler.runner import Listener, PassRunner
from moduleprofiler.timing.graph import CallGraph, call_graph

BACKWARD_SUFFIX = " (backward)"
"""Appended to the module path in the names of backward ranges."""


class CallRanges(Listener):
    """Wraps every module call in a range: the bookkeeping :class:`RangeListener` and the
    kernel clock share. A subclass says how a range opens (``_begin(label)``) and closes
    (``_close(scope)``), how a call is labelled (``_label``) and, with ``wants_nodes``, what
    it names in the graph an outermost call created (``_name_graph``)."""

    def __init__(self, backward: bool) -> None:
        self.wants_nodes = backward
        self.runner: PassRunner | None = None
        """The runner of the pass (its calls name the backward ranges)."""
        self._open: list[tuple[int, Any]] = []
        """Forward ranges still open: ``(call index, scope)``, innermost last."""
        self._reruns: list[Any] = []
        """Ranges of a checkpoint's rerun still open (``None`` for a call matching none)."""

    _begin: Callable[[str], Any]
    _close: Callable[[Any], None]
    _label: Callable[[Call], str]
    _backward_label: Callable[[Call], str]
    """The label of a call's backward work (a checkpoint's rerun of it, its rebuilt nodes)."""
    _name_graph: Callable[[CallGraph], None]
    _name_rebuilt: Callable[[CallGraph], None]
    """What it names in the graph a reentrant checkpoint rebuilt from the rerun of a call."""

    def start(self, runner: PassRunner) -> None:
        """Remember the runner (its calls name the backward ranges)."""
        self.runner = runner

    def stop(self, runner: PassRunner) -> None:
        """Close every forward range a raising forward left open, innermost first."""
        while self._open:
            self._close(self._open.pop()[1])
        while self._reruns:
            scope = self._reruns.pop()
            if scope is not None:
                self._close(scope)

    def rerun_enter(self, rerun: Rerun) -> None:
        """A checkpoint reruns a call inside the backward: its backward work, so a range of
        the call's backward."""
        if self.wants_nodes:
            self._reruns.append(None if rerun.call is None
                                else self._begin(self._backward_label(rerun.call)))

    def rerun_exit(self, rerun: Rerun, output: Any, rebuilt: bool) -> None:
        """Close the rerun's range; after the outermost, name each node of the graph a
        reentrant checkpoint rebuilt with the backward label of the call that created it."""
        if not (self.wants_nodes and self._reruns):
            return
        scope = self._reruns.pop()
        if scope is not None:
            self._close(scope)
        if rebuilt and rerun.call is not None:
            self._name_rebuilt(self._graph(rerun.call, output))

    def enter(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Open the call's range."""
        self._open.append((call.index, self._begin(self._label(call))))

    def exit(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any],
             output: Any) -> None:
        """Close the call's range (and those of inner calls that raised and were caught);
        after an outermost call, name the backward work it created."""
        while self._open:
            index, scope = self._open.pop()
            self._close(scope)
            if index == call.index:
                break
        if call.parent is None and self.wants_nodes and torch.is_grad_enabled():
            self._name_graph(self._graph(call, output))

    def _graph(self, outer: Call, output: Any) -> CallGraph:
        """The graph the outermost call ``outer`` created (:func:`~.graph.call_graph`)."""
        assert self.runner is not None
        return call_graph(self.runner, outer, output)

    def _name_nodes(self, graph: CallGraph) -> None:
        """Name every node of ``graph`` with the backward label of the call that created it."""
        assert self.runner is not None
        for _, node, owner in graph.nodes:
            label = self._backward_label(self.runner.calls[owner])
            self._name_node(node, lambda label=label: label)  # type: ignore[misc]

    def _name_node(self, node: Any, label: Callable[[], str]
                   ) -> tuple[RemovableHandle, RemovableHandle]:
        """A range ``label()`` around every run of an autograd node (its pre- and post-hook
        run on the node's thread, just around it, so ranges nest on every thread)."""
        running: list[Any] = []  # a node may run more than once (retain_graph)

        def before(grad_outputs: Any) -> None:
            running.append(self._begin(label()))

        def after(grad_inputs: Any, grad_outputs: Any) -> None:
            if running:
                self._close(running.pop())

        return node.register_prehook(before), node.register_hook(after)


class RangeListener(CallRanges):
    """Wraps each module call (and, with ``backward``, each autograd node it created) in a
    ``record_function`` range and, with ``nvtx``, an NVTX range named by the module path.

    Args:
        backward: also name the backward work of each call.
        nvtx: push NVTX ranges too (default: when ``torch.cuda.is_available()``).
    """

    def __init__(self, backward: bool = True, nvtx: bool | None = None) -> None:
        if not isinstance(backward, bool):
            raise TypeError(f"backward must be a bool, got {type(backward).__name__}")
        if nvtx is not None and not isinstance(nvtx, bool):
            raise TypeError(f"nvtx must be a bool or None, got {type(nvtx).__name__}")
        super().__init__(backward)
        self.nvtx = cuda_available() if nvtx is None else nvtx

    def _label(self, call: Call) -> str:
        return display_path(call.path)

    def _backward_label(self, call: Call) -> str:
        return display_path(call.path) + BACKWARD_SUFFIX

    _name_graph = CallRanges._name_nodes
    _name_rebuilt = _name_graph  # the rebuilt nodes are named as the forward's are

    def _begin(self, name: str) -> Any:
        if self.nvtx:
            range_push(name)
        return record_function(name).__enter__()

    def _close(self, record: Any) -> None:
        record.__exit__(None, None, None)
        if self.nvtx:
            range_pop()
