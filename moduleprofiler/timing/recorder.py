"""The hooks: one record per module call, stamped on a :class:`~.clock.StampSource`.

Forward: a pre-hook and a post-hook (``always_call=True``) on every module, all released by one
``ExitStack``. The pre-hook pushes the call on a stack (its parent is the call below it) and
stamps *last*; the post-hook stamps *first* and pops. Hooks are closures over the module's
index, so a call costs a few list appends and two clock reads; nothing is written onto the
user's modules.

Backward (optional), two mechanisms, neither of them full backward module hooks (which wrap
outputs in views, crash on in-place successors and fire early for first layers):

* ``"nodes"`` (default where available): an autograd *node-creation hook*
  (``torch.autograd.graph.node_creation_hook``) gives every autograd node created during the
  forward to the innermost module call running at that moment, and puts a pre- and a post-hook
  on the node. A module's backward self time is the time its own nodes ran (AccumulateGrad of a
  parameter counts for the module that first used it); inclusive time adds its descendants'.
  This is the attribution the profiler makes with sequence numbers, without the profiler.
* ``"seq"`` (where node-creation hooks are missing, torch < 2.14): the same attribution from
  sequence numbers. Each call notes ``_get_sequence_nr()`` at its pre- and post-hook; after an
  outermost call, one walk of the graph it created gives every node to the innermost call
  whose range holds the node's sequence number, and hooks the nodes as ``"nodes"`` does.
* ``"tensors"`` (last resort): the post-hook puts a gradient hook on each output (backward start),
  the pre-hook one on each input (backward end); parameters' post-accumulate-grad hooks end the
  backward of modules whose inputs need no gradient (first layers). Identity modules (the
  output *is* the input, unmodified) get 0; in-place successors work because hooks registered
  before an in-place op see the gradient of the old version.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_right
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from threading import get_ident
from typing import Any, Literal

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor, nn

from moduleprofiler.timing.clock import StampSource

GradMode = Literal["off", "nodes", "seq", "tensors"]

_START, _END = 0, 1
_ACCUMULATE_GRAD: type = type(
    torch.ones(1, requires_grad=True).mul(1).grad_fn.next_functions[0][0]  # type: ignore[union-attr]
)


def sequence_numbers_available() -> bool:
    """Whether this torch exposes the autograd sequence counter (the ``"seq"`` mode)."""
    return hasattr(getattr(torch._C, "_autograd", None), "_get_sequence_nr")


def node_hooks_available() -> bool:
    """Whether this torch has autograd node-creation hooks (the ``"nodes"`` backward mode)."""
    autograd = getattr(torch._C, "_autograd", None)
    return hasattr(autograd, "_push_node_creation_hook") and hasattr(
        autograd, "_pop_node_creation_hook"
    )


@dataclass
class IterationTimes:
    """One iteration resolved to nanoseconds, summed per module (arrays indexed like
    ``CallRecorder.paths``). Backward arrays are ``nan`` where a module had no backward."""

    calls: NDArray[np.int64]
    fwd_inclusive: NDArray[np.float64]
    fwd_exclusive: NDArray[np.float64]
    bwd_inclusive: NDArray[np.float64]
    bwd_exclusive: NDArray[np.float64]
    call_module: NDArray[np.int64]
    """Module index of each call, in call order."""
    call_inclusive: NDArray[np.float64]
    """Forward inclusive time of each call."""
    marks: dict[str, float] = field(default_factory=dict)
    """Named marks (``CallRecorder.mark``), ns from the iteration's first stamp."""
    bwd_unattributed: float = math.nan
    """Backward time of nodes created outside every module (loss, code in ``pred_fn``)."""
    identity: NDArray[np.bool_] | None = None
    """Modules whose output was their unmodified input (``"tensors"`` mode)."""


@dataclass
class RawIteration:
    """One iteration's stamps, copied out of the hooks' lists (see ``CallRecorder.snapshot``)."""

    module: array[int]
    parent: array[int]
    start: array[int]
    end: array[int]
    mark_names: tuple[str, ...]
    marks: array[int]
    events: list[tuple[int, int, int, int]]
    node_owner: array[int]
    acc_module: tuple[int, ...]
    identity: frozenset[int]
    resolved_ns: NDArray[np.float64] | None = None
    """CUDA: every stamp already read, in the order start, end, marks, events."""


class CallRecorder:
    """Hooks every module of ``root`` and turns one iteration's stamps into per-module times.

    Usage: ``with recorder.installed(): recorder.begin(); ...run...; times = recorder.end()``.
    """

    def __init__(self, root: nn.Module, stamps: StampSource, grad_mode: GradMode = "off") -> None:
        if grad_mode == "nodes" and not node_hooks_available():
            raise RuntimeError("this torch has no autograd node-creation hooks; use 'seq'")
        if grad_mode == "seq" and not sequence_numbers_available():
            raise RuntimeError("this torch has no autograd sequence counter; use 'tensors'")
        self.root = root
        self.stamps = stamps
        self.grad_mode = grad_mode
        named = list(root.named_modules())
        self.paths: tuple[str, ...] = tuple(path for path, _ in named)
        self.modules: tuple[nn.Module, ...] = tuple(module for _, module in named)
        self.parent_index: tuple[int, ...] = self._static_parents(named)
        # per-iteration call lists (cleared in place: the hooks hold references to them)
        self._mod: list[int] = []
        self._parent: list[int] = []
        self._start: list[int] = []
        self._end: list[int] = []
        self._stack: list[int] = []
        self._marks: list[tuple[str, int]] = []
        # backward events (owner code, kind, stamp, thread): one tuple per event, appended
        # atomically (the CUDA backward runs on the engine's device threads)
        self._events: list[tuple[int, int, int, int]] = []
        self._node_owner: list[int] = []
        self._call_inputs: dict[int, list[tuple[Tensor, int]]] = {}
        self._identity: set[int] = set()
        self._param_owners: dict[int, tuple[int, ...]] = {}
        self._param_keys: dict[int, int] = {}
        self._acc_number: dict[int, int] = {}
        self._acc_module: list[int] = []
        self._run_owner = -2
        self._seq_pre: list[int] = []
        self._seq_post: list[int] = []
        self._acc_nodes: dict[int, Any] = {}
        self._generation = 0
        self.active = False

    @staticmethod
    def _static_parents(named: list[tuple[str, nn.Module]]) -> tuple[int, ...]:
        index = {path: i for i, (path, _) in enumerate(named)}
        parents = []
        for path, _ in named:
            if path == "":
                parents.append(-1)
            else:
                head = path.rpartition(".")[0]
                parents.append(index.get(head, 0))
        return tuple(parents)

    # -- installing ------------------------------------------------------------------------
    def installed(self) -> ExitStack:
        """Register every hook; the returned ``ExitStack`` removes them all (use ``with``)."""
        stack = ExitStack()
        try:
            kwargs_hooks = self.grad_mode == "tensors"
            for index, module in enumerate(self.modules):
                pre, post = self._forward_hooks(index)
                stack.enter_context(
                    module.register_forward_pre_hook(pre, with_kwargs=kwargs_hooks)
                )
                stack.enter_context(module.register_forward_hook(post, always_call=True))
            if self.grad_mode == "nodes":
                torch._C._autograd._push_node_creation_hook(self._on_node)
                stack.callback(torch._C._autograd._pop_node_creation_hook)
            elif self.grad_mode == "tensors":
                self._install_param_hooks(stack)
        except BaseException:
            stack.close()
            raise
        self.active = True
        stack.callback(self._deactivate)
        return stack

    def _deactivate(self) -> None:
        self.active = False
        self._stack.clear()
        self._acc_nodes.clear()  # let reused AccumulateGrad nodes (and our hooks) be freed

    def _forward_hooks(self, index: int) -> tuple[Callable[..., None], Callable[..., None]]:
        mod, parent, start, end, stack = self._mod, self._parent, self._start, self._end, \
            self._stack
        stamp = self.stamps.stamp
        tensors_mode = self.grad_mode == "tensors"
        nodes_mode = self.grad_mode == "nodes"
        seq_mode = self.grad_mode == "seq"
        sequence = getattr(torch._C._autograd, "_get_sequence_nr", None)
        seq_pre, seq_post = self._seq_pre, self._seq_post

        def pre(module: nn.Module, args: tuple[Any, ...], *maybe_kwargs: Any) -> None:
            call = len(mod)
            parent.append(stack[-1] if stack else -1)
            mod.append(index)
            end.append(-1)
            stack.append(call)
            if tensors_mode:
                self._watch_inputs(call, args, maybe_kwargs[0] if maybe_kwargs else {})
            elif seq_mode:
                seq_pre.append(sequence())  # type: ignore[misc]
                seq_post.append(-1)
            start.append(stamp())

        def post(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            now = stamp()
            while stack:
                call = stack.pop()
                if mod[call] == index:
                    end[call] = now
                    if tensors_mode:
                        self._watch_outputs(call, output)
                    elif nodes_mode and not stack:
                        self._mark_outputs(output)
                    elif seq_mode:
                        seq_post[call] = sequence()  # type: ignore[misc]
                        if not stack and torch.is_grad_enabled():
                            self._attach_graph(call, output)
                    return

        return pre, post

    # -- named marks -----------------------------------------------------------------------
    def mark(self, name: str) -> None:
        """Stamp a named point of the iteration (e.g. ``"start"``, ``"forward"``)."""
        self._marks.append((name, self.stamps.stamp()))

    # -- iterations ------------------------------------------------------------------------
    def begin(self) -> None:
        """Start an iteration: forget the previous one's stamps."""
        self._generation += 1
        for lst in (self._mod, self._parent, self._start, self._end, self._stack, self._marks,
                    self._events, self._node_owner, self._seq_pre, self._seq_post):
            lst.clear()
        self._call_inputs.clear()
        self._identity.clear()
        self._run_owner = -2
        self.stamps.reset()

    def snapshot(self) -> RawIteration:
        """End the iteration cheaply: copy its stamps into compact arrays (CUDA: read the
        events now, after one device synchronisation). Resolve later with :meth:`resolve`, so
        that the work between timed iterations stays small (it evicts caches that the next
        iteration's first module would otherwise pay for)."""
        self._generation += 1  # late backward hooks of this iteration are ignored from now on
        events = list(self._events)
        raw = RawIteration(
            module=array("q", self._mod),
            parent=array("q", self._parent),
            start=array("q", self._start),
            end=array("q", self._end),
            mark_names=tuple(name for name, _ in self._marks),
            marks=array("q", (stamp for _, stamp in self._marks)),
            events=events,
            node_owner=array("q", self._node_owner),
            acc_module=tuple(self._acc_module),
            identity=frozenset(self._identity),
        )
        if self.stamps.kind == "cuda-events":
            stamps = [*raw.start, *(e if e >= 0 else 0 for e in raw.end), *raw.marks,
                      *(event[2] for event in events)]
            raw.resolved_ns = self.stamps.resolve(stamps)
        return raw

    def end(self) -> IterationTimes:
        """:meth:`snapshot` and :meth:`resolve` in one go."""
        return self.resolve(self.snapshot())

    def resolve(self, raw: RawIteration) -> IterationTimes:
        """Per-module times of one :meth:`snapshot`."""
        n_calls = len(raw.module)
        valid_end = np.frombuffer(raw.end, dtype=np.int64) >= 0 if n_calls else np.zeros(
            0, dtype=bool)
        if raw.resolved_ns is not None:
            ns = raw.resolved_ns
        else:
            parts = [np.frombuffer(raw.start, dtype=np.int64),
                     np.frombuffer(raw.end, dtype=np.int64),
                     np.frombuffer(raw.marks, dtype=np.int64),
                     np.asarray([event[2] for event in raw.events], dtype=np.int64)]
            stamps = np.concatenate([part for part in parts if part.size] or [np.zeros(0,
                                                                          dtype=np.int64)])
            if n_calls:
                ends = stamps[n_calls:2 * n_calls]
                ends[ends < 0] = stamps[:n_calls][ends < 0]
            ns = (stamps - stamps.min()).astype(np.float64) if stamps.size else np.zeros(0)
        start_ns = ns[:n_calls]
        end_ns = ns[n_calls:2 * n_calls]
        offset = 2 * n_calls
        marks = {name: float(ns[offset + k]) for k, name in enumerate(raw.mark_names)}
        offset += len(raw.mark_names)
        b_ns = ns[offset:]

        n_mod = len(self.modules)
        call_module = np.frombuffer(raw.module, dtype=np.int64) if n_calls else np.zeros(
            0, dtype=np.int64)
        call_parent = np.frombuffer(raw.parent, dtype=np.int64) if n_calls else np.zeros(
            0, dtype=np.int64)
        inclusive = np.where(valid_end, end_ns - start_ns, 0.0)
        exclusive = inclusive - _child_sums(call_parent, inclusive)
        calls = np.bincount(call_module, weights=valid_end, minlength=n_mod).astype(np.int64)
        times = IterationTimes(
            calls=calls,
            fwd_inclusive=_per_module(call_module, inclusive, n_mod, call_parent),
            fwd_exclusive=_bincount(call_module, exclusive, n_mod),
            bwd_inclusive=np.full(n_mod, np.nan),
            bwd_exclusive=np.full(n_mod, np.nan),
            call_module=call_module[valid_end],
            call_inclusive=inclusive[valid_end],
            marks=marks,
        )
        if self.grad_mode in ("nodes", "seq") and raw.events:
            self._resolve_nodes(times, call_module, call_parent, raw, b_ns)
        elif self.grad_mode == "tensors" and raw.events:
            self._resolve_tensors(times, call_module, call_parent, raw, b_ns)
        return times

    # -- backward: node mode ---------------------------------------------------------------
    def _on_node(self, node: Any) -> None:
        stack = self._stack
        owner = stack[-1] if stack else -1
        if isinstance(node, _ACCUMULATE_GRAD):
            self._on_accumulate(node, self._mod[owner] if owner >= 0 else -1)
            return
        if owner == self._run_owner and owner >= 0:
            # same call as the node created just before: backward runs this node right
            # before that one, whose hook closes the run; no hook needed here
            return
        self._run_owner = owner
        self._hook_node(node, owner)
        if owner < 0:  # a loss node: backward starts here
            self._mark_entry(node)

    def _hook_node(self, node: Any, owner: int) -> None:
        """A post-hook that stamps the end of ``node`` for ``owner`` (a call index, -1 for
        none); the node's time runs from the previous event on its thread."""
        number = len(self._node_owner)
        self._node_owner.append(owner)
        generation = self._generation
        events = self._events
        stamp = self.stamps.stamp

        def after(grad_inputs: Any, grad_outputs: Any) -> None:
            now = stamp()
            if self._generation == generation:
                events.append((number, _END, now, get_ident()))

        node.register_hook(after)  # type: ignore[no-untyped-call]

    def _mark_entry(self, node: Any) -> None:
        """A pre-hook that marks "backward starts here" on a node where backward passes are
        expected to begin (nodes created outside every module, the outputs of outermost
        calls): a node's time is measured from the previous event on its thread."""
        generation = self._generation
        events = self._events
        stamp = self.stamps.stamp

        def before(grad_outputs: Any) -> None:
            if self._generation == generation:
                events.append((0, _START, stamp(), get_ident()))

        node.register_prehook(before)  # type: ignore[no-untyped-call]

    def _on_accumulate(self, node: Any, module: int) -> None:
        """An ``AccumulateGrad`` node is cached on its parameter and reused by later graphs
        while an earlier graph is alive (a ``loss`` kept until the next step), so the creation
        hook may fire only once for many iterations: its hook is not tied to an iteration,
        and it is attributed to the first call, in each iteration, of the module that first
        used the parameter."""
        key = id(node.variable)
        number = self._acc_number.get(key)
        if number is None:
            number = len(self._acc_module)
            self._acc_number[key] = number
            self._acc_module.append(module)
        else:
            self._acc_module[number] = module
        code = -1 - number
        events = self._events
        stamp = self.stamps.stamp

        def after(grad_inputs: Any, grad_outputs: Any) -> None:
            now = stamp()
            if self.active:
                events.append((code, _END, now, get_ident()))

        node.register_hook(after)  # type: ignore[no-untyped-call]

    def _attach_graph(self, outer: int, output: Any) -> None:
        """``"seq"`` mode, after an outermost call: walk the graph it created, give each node
        to the innermost call whose sequence range holds it, and hook the nodes."""
        roots = [t.grad_fn for t in _flat_tensors(output) if t.grad_fn is not None]
        loss = getattr(output, "loss", None)
        if isinstance(loss, Tensor) and loss.grad_fn is not None:
            roots.append(loss.grad_fn)
        if not roots:
            return
        low, high = self._seq_pre[outer], self._seq_post[outer]
        seen: set[int] = set()
        found: list[tuple[int, Any]] = []
        accumulate: list[tuple[Any, int]] = []  # (node, sequence number of its consumer)
        frontier: list[tuple[Any, int]] = [(node, -1) for node in roots]
        while frontier:
            node, consumer = frontier.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            if isinstance(node, _ACCUMULATE_GRAD):
                accumulate.append((node, consumer))
                continue
            number = node._sequence_nr()
            if not low <= number < high:
                continue  # created before this call: not ours
            found.append((number, node))
            for child, _ in node.next_functions:
                if child is not None:
                    frontier.append((child, number))
        if not found:
            return
        for node in {id(n): n for n in roots}.values():
            self._mark_entry(node)
        found.sort(key=lambda item: item[0])
        owner_of = self._owners_by_sequence([number for number, _ in found], outer)
        previous = -2
        for (_, node), owner in zip(found, owner_of):
            if owner != previous:  # the first-created node of a run closes it in backward
                self._hook_node(node, owner)
            previous = owner
        owner_at = dict(zip((number for number, _ in found), owner_of))
        for node, consumer in accumulate:
            owner = owner_at.get(consumer, -1)
            key = id(node)
            if key not in self._acc_nodes:  # hooked once, even if reused by later graphs
                self._acc_nodes[key] = node
                self._on_accumulate(node, self._mod[owner] if owner >= 0 else -1)

    def _owners_by_sequence(self, numbers: list[int], outer: int) -> list[int]:
        """For sorted sequence numbers, the innermost call (within ``outer``) holding each."""
        pre, post, parent = self._seq_pre, self._seq_post, self._parent
        starts = pre[outer:]
        owners = []
        for number in numbers:
            call = outer + bisect_right(starts, number) - 1
            while call > outer and not (pre[call] <= number < post[call]):
                call = parent[call]
            owners.append(call)
        return owners

    def _mark_outputs(self, output: Any) -> None:
        """Backward usually starts at an outermost call's output (a loss computed inside the
        model): mark those nodes as entries."""
        for tensor in _flat_tensors(output):
            node = tensor.grad_fn
            if node is not None and not isinstance(node, _ACCUMULATE_GRAD):
                self._mark_entry(node)
        loss = getattr(output, "loss", None)
        if isinstance(loss, Tensor) and loss.grad_fn is not None:
            self._mark_entry(loss.grad_fn)

    def _resolve_nodes(self, times: IterationTimes, call_module: NDArray[np.int64],
                       call_parent: NDArray[np.int64], raw: RawIteration,
                       b_ns: NDArray[np.float64]) -> None:
        n_calls = len(call_module)
        node_owner = raw.node_owner
        acc_module = raw.acc_module
        first_call: dict[int, int] = {}
        for call, module in enumerate(call_module.tolist()):
            first_call.setdefault(module, call)
        own = np.zeros(n_calls + 1)  # last slot: nodes created outside every module
        previous: dict[int, float] = {}
        for (node, kind, _, thread), t in zip(raw.events, b_ns):
            before = previous.get(thread)
            previous[thread] = float(t)
            if kind == _START or before is None:
                continue
            if node >= 0:
                owner = node_owner[node]
            else:  # AccumulateGrad
                owner = first_call.get(acc_module[-1 - node], -1)
            own[owner if owner >= 0 else n_calls] += float(t) - before
        self_ns = own[:n_calls]
        inclusive = self_ns.copy()
        for call in range(n_calls - 1, -1, -1):
            parent = call_parent[call]
            if parent >= 0:
                inclusive[parent] += inclusive[call]
        n_mod = len(self.modules)
        times.bwd_exclusive = _bincount(call_module, self_ns, n_mod)
        times.bwd_inclusive = _per_module(call_module, inclusive, n_mod, call_parent)
        times.bwd_unattributed = float(own[n_calls])

    # -- backward: tensor-hook mode --------------------------------------------------------
    def _grad_hook(self, call: int, kind: int) -> Callable[[Tensor], None]:
        generation = self._generation
        events = self._events
        stamp = self.stamps.stamp

        def hook(grad: Tensor) -> None:
            now = stamp()
            if self._generation == generation:
                events.append((call, kind, now, 0))

        return hook

    def _watch_inputs(self, call: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if not torch.is_grad_enabled():
            return
        watched: list[tuple[Tensor, int]] = []
        for value in (*args, *kwargs.values()):
            for tensor in _flat_tensors(value):
                if tensor.requires_grad:
                    watched.append((tensor, tensor._version))
                    tensor.register_hook(self._grad_hook(call, _END))  # type: ignore[no-untyped-call]
        if watched:
            self._call_inputs[call] = watched

    def _watch_outputs(self, call: int, output: Any) -> None:
        if not torch.is_grad_enabled():
            return
        inputs = self._call_inputs.pop(call, [])
        for tensor in _flat_tensors(output):
            if not tensor.requires_grad:
                continue
            if any(tensor is inp and tensor._version == version for inp, version in inputs):
                self._identity.add(call)  # output is the unmodified input: no backward work
                continue
            tensor.register_hook(  # type: ignore[no-untyped-call]
                self._grad_hook(call, _START))

    def _install_param_hooks(self, stack: ExitStack) -> None:
        owners: dict[int, list[int]] = {}
        params: dict[int, Tensor] = {}
        for index, module in enumerate(self.modules):
            param: Tensor
            for param in module.parameters(recurse=False):
                owners.setdefault(id(param), []).append(index)
                params[id(param)] = param
        self._param_owners = {key: tuple(value) for key, value in owners.items()}
        self._param_keys = {}
        for number, (key, param) in enumerate(params.items()):
            if not param.requires_grad:
                continue
            self._param_keys[number] = key
            handle = param.register_post_accumulate_grad_hook(  # type: ignore[no-untyped-call]
                self._param_hook(number))
            stack.enter_context(handle)

    def _param_hook(self, number: int) -> Callable[[Tensor], None]:
        def hook(param: Tensor) -> None:
            if self.active:  # negative owner: a parameter, not a call
                self._events.append((-1 - number, _END, self.stamps.stamp(), 0))
        return hook

    def _resolve_tensors(self, times: IterationTimes, call_module: NDArray[np.int64],
                         call_parent: NDArray[np.int64], raw: RawIteration,
                         b_ns: NDArray[np.float64]) -> None:
        n_calls = len(call_module)
        start = np.full(n_calls, np.nan)
        end = np.full(n_calls, np.nan)
        param_stamps: list[tuple[int, float]] = []
        for (owner, kind, _, _), t in zip(raw.events, b_ns):
            if owner < 0:
                param_stamps.append((-1 - owner, float(t)))
            elif kind == _START:
                start[owner] = t if math.isnan(start[owner]) else max(start[owner], t)
            else:
                end[owner] = t if math.isnan(end[owner]) else max(end[owner], t)
        calls_of: dict[int, list[int]] = {}
        for call, module in enumerate(call_module.tolist()):
            calls_of.setdefault(module, []).append(call)
        for number, t in param_stamps:
            # the parameter's gradient is complete: it ends the backward of the owning call
            # whose backward started last before it
            best = -1
            for module in self._param_owners.get(self._param_keys.get(number, -1), ()):
                for call in calls_of.get(module, ()):
                    s = start[call]
                    if not math.isnan(s) and s <= t and (best < 0 or s > start[best]):
                        best = call
            if best >= 0:
                end[best] = t if math.isnan(end[best]) else max(end[best], t)
        # a call without own end stamps (input needs no grad, no own parameters) ends when
        # its last child does; children have larger indices than their parents
        for call in range(n_calls - 1, -1, -1):
            parent = call_parent[call]
            if parent >= 0 and not math.isnan(end[call]):
                end[parent] = end[call] if math.isnan(end[parent]) else max(end[parent], end[call])
        inclusive = np.where(np.isnan(start) | np.isnan(end), np.nan,
                             np.clip(end - start, 0.0, None))
        identity = np.zeros(n_calls, dtype=bool)
        for call in raw.identity:
            identity[call] = True
            inclusive[call] = 0.0
        known = np.nan_to_num(inclusive)
        exclusive = np.clip(inclusive - _child_sums(call_parent, known), 0.0, None)
        n_mod = len(self.modules)
        has = ~np.isnan(inclusive)
        times.bwd_inclusive = np.where(
            np.bincount(call_module, weights=has, minlength=n_mod) > 0,
            _per_module(call_module, known, n_mod, call_parent), np.nan)
        times.bwd_exclusive = np.where(
            np.bincount(call_module, weights=has, minlength=n_mod) > 0,
            np.bincount(call_module, weights=np.nan_to_num(exclusive), minlength=n_mod), np.nan)
        times.identity = np.bincount(call_module, weights=identity, minlength=n_mod) > 0
        times.bwd_unattributed = math.nan


def _bincount(index: NDArray[np.int64], weights: NDArray[Any], length: int) -> NDArray[
        np.float64]:
    """``np.bincount`` with weights, as float64."""
    out: NDArray[np.float64] = np.bincount(index, weights=weights, minlength=length).astype(
        np.float64, copy=False)
    return out


def _child_sums(call_parent: NDArray[np.int64], values: NDArray[np.float64]) -> NDArray[
        np.float64]:
    """For each call, the sum of ``values`` over its direct children."""
    n = len(call_parent)
    has_parent = call_parent >= 0
    return _bincount(call_parent[has_parent], values[has_parent], n)[:n]


_NESTED_CACHE: dict[bytes, NDArray[np.bool_]] = {}


def _outermost(call_module: NDArray[np.int64], call_parent: NDArray[np.int64]) -> NDArray[
        np.bool_]:
    """Calls that are not nested inside another call of the same module (cached: the call
    structure of a model is normally the same every iteration)."""
    n = len(call_module)
    if n == 0 or len(np.unique(call_module)) == n:
        return np.ones(n, dtype=bool)
    key = call_module.tobytes() + b"|" + call_parent.tobytes()
    keep = _NESTED_CACHE.get(key)
    if keep is None:
        keep = np.ones(n, dtype=bool)
        for call in range(n):
            parent = call_parent[call]
            while parent >= 0:
                if call_module[parent] == call_module[call]:
                    keep[call] = False
                    break
                parent = call_parent[parent]
        if len(_NESTED_CACHE) > 64:
            _NESTED_CACHE.clear()
        _NESTED_CACHE[key] = keep
    return keep


def _per_module(call_module: NDArray[np.int64], values: NDArray[np.float64], n_mod: int,
                call_parent: NDArray[np.int64]) -> NDArray[np.float64]:
    """Sum of a module's calls, skipping a call nested inside another call of the same module
    (recursion would otherwise count the inner call twice)."""
    keep = _outermost(call_module, call_parent)
    return _bincount(call_module[keep], values[keep], n_mod)


def _flat_tensors(value: Any, depth: int = 0) -> list[Tensor]:
    if isinstance(value, Tensor):
        return [value]
    if depth < 2 and isinstance(value, (tuple, list)):
        return [t for item in value for t in _flat_tensors(item, depth + 1)]
    if depth < 2 and isinstance(value, dict):
        return [t for item in value.values() for t in _flat_tensors(item, depth + 1)]
    return []
