"""The clock: a :class:`~moduleprofiler.runner.Listener` that stamps every module call, and
optionally the backward work each call created, on a :class:`~.clock.StampSource`.

Forward. The clock is the runner's *last* listener, so its ``enter`` runs after every other
listener's and its ``exit`` before theirs: its two stamps enclose the module's own forward and
as little instrumentation as possible. Per call that is two clock reads, a list append and a
dict store; everything else (per-module sums, self times, statistics) is computed from the
stamps after the timed iterations (:mod:`.iteration`).

Backward (``backward=True``). Each autograd node belongs to the forward call that created it,
by the runner's one map (:meth:`~moduleprofiler.runner.PassRunner.owner_of_node`). When an
outermost call returns, one walk of the graph it created finds its nodes and hooks them:
sorted by creation, each run of nodes of one call gets a post-hook on its first-created node,
which backward runs last, and a node's time runs from the previous event on its thread, so one
hook times the whole run. A pre-hook on the output nodes marks where backward starts.
``AccumulateGrad`` nodes (writing a parameter's ``.grad``) are kept by autograd across steps
while a graph is alive, so they are hooked once, booked to the module whose call consumed
the parameter, and unhooked when the timing ends: a graph the caller keeps alive (a retained
graph, a later profile's) would otherwise keep every earlier clock's hooks on the parameters'
nodes, each stamping on its dead clock (a CUDA event, from a pool that grew by one per stamp)
inside the later steps' backward, which then read slower with every earlier timing. Hooks of
an earlier iteration check their iteration before they stamp, for the same reason.
Full backward module hooks are never used: they wrap outputs in views that break in-place
successors and fire early for a first layer whose input needs no gradient.

Activation checkpointing (:mod:`moduleprofiler.reruns`): a forward rerun inside the backward is
stamped at each of its module calls, so each call's rerun is its own backward time; the graph a
reentrant checkpoint rebuilds is hooked as the rerun ends, and its nested backward is booked
node by node to the calls that created them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from threading import get_ident
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from moduleprofiler.call import Call
from moduleprofiler.reruns import Rerun
from moduleprofiler.runner import Listener, PassRunner
from moduleprofiler.timing.clocks.stamps import StampSource
from moduleprofiler.timing.graph import call_graph
from moduleprofiler.timing.iteration import (
    END,
    START,
    IterationTimes,
    RawIteration,
    resolve_iteration,
)

Step = Callable[[Callable[[str], None], Callable[[Callable[[], Any]], Any]], None]
"""One iteration of a timing pass, ``step(mark, run)``: it stamps its named points with
``mark(name)`` and calls the model through ``run(invoke)``, so that one step serves the
hooked block (:meth:`ClockListener.block`) and the hook-free one (:func:`stamped_block`)."""


def no_mark(name: str) -> None:
    """The ``mark`` of a step whose points need no stamp (a device clock's traced iteration:
    its times are the kernels')."""


def stamped_block(stamps: StampSource, step: Step,
                  kept: list[dict[str, float]]) -> Callable[[int, bool], None]:
    """The hook-free block of ``step``: ``mark(name)`` takes a stamp of ``stamps`` and
    ``run(invoke)`` is ``invoke()``; each kept iteration's marks (ns) appended to ``kept``."""
    def run_block(count: int, keep: bool) -> None:
        taken: list[tuple[str, int]] = []
        for _ in range(count):
            stamps.reset()
            taken.clear()
            step(lambda name: taken.append((name, stamps.stamp())), _call)
            ns = stamps.resolve([stamp for _, stamp in taken])
            if keep:
                kept.append({name: float(t) for (name, _), t in zip(taken, ns)})
    return run_block


def _call(invoke: Callable[[], Any]) -> Any:
    return invoke()


class ClockListener(Listener):
    """Stamps module calls (and, with ``backward``, the backward nodes they created).

    Usage: ``clock = ClockListener.on(model, stamps)``, then ``with clock.installed():`` any
    number of ``clock.begin(); clock.run(invoke); raw = clock.snapshot()``, and
    ``clock.resolve(raw)`` after the timed loop. Added to another pass's listeners (last, so
    that their work stays outside its stamps) it writes ``forward_ms`` / ``self_forward_ms``
    (and ``backward_ms`` / ``self_backward_ms``) into every ``call.values`` when that pass
    finishes.
    """

    def __init__(self, stamps: StampSource, backward: bool = False) -> None:
        self.stamps = stamps
        self.stamp: Callable[[], int] = stamps.stamp
        self.wants_nodes = backward
        self.runner: PassRunner | None = None
        self._only: list[Listener] = [self]
        self.module_index: dict[int, int] = {}
        """``id(module)`` -> position in ``named_modules()`` (the runner's module order)."""
        self._start: list[int] = []
        self._end: dict[int, int] = {}  # by call index: no placeholder work at call start
        self._marks: list[tuple[str, int]] = []
        self._events: list[tuple[int, int, int, int]] = []
        self._node_owner: list[int] = []
        self._generation = 0
        self._open = False
        # AccumulateGrad nodes outlive an iteration: numbered by parameter, hooked once
        self._accumulate_number: dict[int, int] = {}
        self._accumulate_module: list[int] = []
        self._accumulate_nodes: dict[int, Any] = {}
        self._accumulate_hooks: list[RemovableHandle] = []

    @classmethod
    def on(cls, root: nn.Module, stamps: StampSource, backward: bool = False) -> ClockListener:
        """A clock on a runner of its own over ``root`` (hooks not installed yet)."""
        clock = cls(stamps, backward)
        clock.attach(PassRunner(root, [clock]))
        return clock

    def attach(self, runner: PassRunner, outer: Sequence[Listener] = ()) -> None:
        """Remember ``runner`` and its module order; its blocks run the ``outer`` listeners
        (of the runner's) and this one, no other."""
        self.runner = runner
        self.module_index = {id(module): i for i, module in enumerate(runner.modules)}
        self._only = [*outer, self]

    # -- the runner's events (hot path) ----------------------------------------------------
    def start(self, runner: PassRunner) -> None:
        """The hooks are installed: start an iteration."""
        if runner is not self.runner:
            self.attach(runner, [lst for lst in runner.active if lst is not self])
        self.begin(reset_runner=False)

    def enter(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Stamp the call's start (``call.index`` is its position in ``_start``)."""
        self._start.append(self.stamp())

    def exit(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any],
             output: Any) -> None:
        """Stamp the call's end; after an outermost call, hook the graph it created."""
        self._end[call.index] = self.stamp()
        if call.parent is None and self.wants_nodes and torch.is_grad_enabled():
            self._hook_graph(call, output)

    def rerun_enter(self, rerun: Rerun) -> None:
        """A checkpoint reruns a forward inside the backward: the time until now is backward
        work of the call it ran for (the enclosing rerun's call, or the checkpoint's own)."""
        if self.wants_nodes and self._open:
            self._stamp_backward(rerun.outer)

    def rerun_exit(self, rerun: Rerun, output: Any, rebuilt: bool) -> None:
        """The rerun of one call ended: its time is that call's backward work; after the
        outermost, hook the graph a reentrant checkpoint rebuilt, which its nested backward
        runs next, so each of its nodes is booked like the forward's own."""
        if not (self.wants_nodes and self._open):
            return
        self._stamp_backward(rerun.call if rerun.call is not None else rerun.outer)
        if rebuilt and rerun.call is not None:
            self._hook_graph(rerun.call, output, rebuilt_by=rerun.outer)

    def finish(self, runner: PassRunner) -> None:
        """End of a single pass: write this pass's times into ``call.values``."""
        times = self.resolve(self.snapshot())
        columns = [("forward_ms", times.call_fwd_inclusive),
                   ("self_forward_ms", times.call_fwd_exclusive)]
        if self.wants_nodes:
            columns += [("backward_ms", times.call_bwd_inclusive),
                        ("self_backward_ms", times.call_bwd_exclusive)]
        for call in runner.calls:
            if not call.failed:
                for name, values in columns:
                    call.values[name] = float(values[call.index]) / 1e6

    # -- iterations ------------------------------------------------------------------------
    @contextmanager
    def installed(self) -> Iterator[ClockListener]:
        """Keep the runner's hooks installed for the block (any number of iterations)."""
        assert self.runner is not None, "ClockListener.on(...) or attach() first"
        try:
            with self.runner.installed(only=self._only):
                yield self
        finally:
            self._open = False
            for handle in self._accumulate_hooks:  # nodes a live graph keeps outlive the timing
                handle.remove()
            self._accumulate_hooks.clear()
            self._accumulate_nodes.clear()  # let reused AccumulateGrad nodes be freed

    def begin(self, reset_runner: bool = True) -> None:
        """Start an iteration: forget the previous one's calls and stamps."""
        if reset_runner and self.runner is not None:
            self.runner.reset()
        self._generation += 1  # late backward hooks of earlier iterations are ignored
        self._start, self._end, self._marks = [], {}, []
        self._events, self._node_owner = [], []
        self._open = True
        self.stamps.reset()

    def run(self, invoke: Callable[[], Any]) -> Any:
        """``invoke()`` with the hooks installed; a failing forward names its module."""
        assert self.runner is not None
        return self.runner.run(invoke)

    def mark(self, name: str) -> None:
        """Stamp a named point of the iteration (``"start"``, ``"forward"``, ...)."""
        self._marks.append((name, self.stamp()))

    def snapshot(self) -> RawIteration:
        """End the iteration cheaply: keep references to its lists (the next :meth:`begin`
        makes new ones); on CUDA read the events now, after one synchronisation. Resolving
        waits until after the timed loop, so the work between iterations stays small (it
        evicts caches the next iteration's first module would pay for)."""
        assert self.runner is not None
        self._generation += 1
        self._open = False
        raw = RawIteration(self.runner.calls, self._start, self._end, self._marks,
                           self._events, self._node_owner, tuple(self._accumulate_module))
        if not self.stamps.deferred:
            raw.resolved_ns = self.stamps.resolve(raw.stamps())
        return raw

    def resolve(self, raw: RawIteration) -> IterationTimes:
        """The per-call and per-module times of a :meth:`snapshot`."""
        ns = raw.resolved_ns if raw.resolved_ns is not None else self.stamps.resolve(raw.stamps())
        return resolve_iteration(raw, ns, self.module_index)

    def block(self, step: Step, kept: list[RawIteration]) -> Callable[[int, bool], None]:
        """The hooked block of a pass's ``step`` for the measurement loop
        (:class:`~moduleprofiler.timing.loop.Block`): ``count`` iterations of
        ``step(self.mark, self.run)`` with the hooks installed, each kept one's
        :meth:`snapshot` appended to ``kept`` (resolved after the timed loop)."""
        def run_block(count: int, keep: bool) -> None:
            with self.installed():
                for _ in range(count):
                    self.begin()
                    step(self.mark, self.run)
                    raw = self.snapshot()
                    if keep:
                        kept.append(raw)
        return run_block

    # -- backward --------------------------------------------------------------------------
    def _hook_graph(self, outer: Call, output: Any, rebuilt_by: Call | None = None) -> None:
        """Hook the nodes created by the outermost call ``outer`` (see the module docstring).
        ``rebuilt_by``: the graph is a checkpoint's rebuilt one, differentiated inside the node
        this call made: the time until its nested backward reaches the graph is the call's."""
        assert self.runner is not None
        graph = call_graph(self.runner, outer, output, hooked=self._accumulate_nodes)
        if not graph.nodes:
            return
        for node in graph.roots:
            self._hook_entry(node, rebuilt_by)
        previous = -1
        for _, node, owner_index in graph.nodes:
            if owner_index != previous:  # the run's first-created node ends it in backward
                self._hook_node(node, owner_index)
            previous = owner_index
        for node, module in graph.accumulate:
            self._accumulate_nodes[id(node)] = node
            # A parameter's gradient accumulation is the consuming module's work; a leaf that
            # is no parameter of the model (an input that requires grad) is the caller's:
            # booked to no module. It used to go to the first layer, which then read the copy
            # into ``input.grad`` as its own backward (+6 % for a 400 us module on the CPU,
            # more on a GPU where the layer itself is short).
            self._hook_accumulate(node, self.module_index.get(id(module), -1))

    def _stamp_backward(self, owner: Call | None) -> None:
        """Book the time since the previous backward event on this thread to ``owner``."""
        number = len(self._node_owner)
        self._node_owner.append(-1 if owner is None else owner.index)
        self._events.append((number, END, self.stamp(), get_ident()))

    def _hook_node(self, node: Any, owner: int) -> None:
        number = len(self._node_owner)
        self._node_owner.append(owner)
        generation = self._generation

        def after(grad_inputs: Any, grad_outputs: Any) -> None:
            if self._generation == generation:  # a retained graph's later backward: no stamp
                self._events.append((number, END, self.stamp(), get_ident()))

        node.register_hook(after)

    def _hook_entry(self, node: Any, rebuilt_by: Call | None) -> None:
        """Mark where the backward of an output node starts (``rebuilt_by``: a rebuilt graph's
        node, whose time until then is that call's)."""
        generation = self._generation

        def before(grad_outputs: Any) -> None:
            if self._generation != generation:
                return
            if rebuilt_by is not None:
                self._stamp_backward(rebuilt_by)
                return
            # the backward may start on a GPU that has finished the forward, or finishes it
            # before the CPU launches the first backward kernel: prime it either way, or the
            # first module read the CPU's way to its first kernel as its own time
            self.stamps.prime(busy=True)
            self._events.append((0, START, self.stamp(), get_ident()))

        node.register_prehook(before)

    def _hook_accumulate(self, node: Any, module: int) -> None:
        key = id(node.variable)
        number = self._accumulate_number.setdefault(key, len(self._accumulate_module))
        if number == len(self._accumulate_module):
            self._accumulate_module.append(module)
        else:
            self._accumulate_module[number] = module
        code = -1 - number

        def after(grad_inputs: Any, grad_outputs: Any) -> None:
            if self._open:  # not tied to an iteration: the node may serve several
                self._events.append((code, END, self.stamp(), get_ident()))

        self._accumulate_hooks.append(node.register_hook(after))
