"""The pass runner: the one place that hooks a model, keeps the call stack and calls listeners.

Every pass of moduleprofiler (counting, backward counting, memory, timing) is one
:class:`PassRunner` with *listeners*. The runner

* installs a forward pre-hook (``with_kwargs=True`` where a listener reads a call's arguments
  at its start) and a forward hook (``with_kwargs=True``, ``always_call=True``) on every
  module, written into the module's hook tables under one torch hook id exactly as
  ``register_forward_pre_hook`` / ``register_forward_hook`` would write them (a module whose
  class overrides those methods gets them called), and released by one
  cleanup even when the forward raises; nothing else is written onto the user's modules and
  torch is never patched. TorchScript children cannot carry Python hooks: they are left
  unhooked and their work belongs to the nearest hooked ancestor (:attr:`PassRunner.unhooked`).
  A module with forward pre-hooks of its own gets its call opened before them and announced
  to the listeners after them (:attr:`PassRunner.own_hooks`: their work is the call's);
* keeps the one runtime call stack: each module call is a :class:`Call` with its index in
  execution order, parent, depth and call number; the first module whose forward raises is
  :attr:`PassRunner.failed_path`, the one whose exception left the model
  :meth:`PassRunner.raised_path` (``None`` where the model caught every exception itself);
* maps autograd nodes to the forward call that created them (:meth:`PassRunner.owner_of_node`):
  a node's sequence number falls between two hook events of the forward, and the call that was
  innermost in that interval created it. One integer read per hook event, no graph walk;
* runs one aten-operator observer (a ``TorchDispatchMode``), on only while the innermost
  running call is one some listener wants observed (:meth:`Listener.observe`), so modules whose
  formula covers their work cost no dispatch at all; it is switched only when that state
  changes, and muted (not popped) while listeners do their own work at a call's end;
* matches a module call made while an autograd node runs (activation checkpointing rerunning a
  forward inside the backward) to the forward call it repeats: it is that call's backward work,
  never a new forward call, and only the listeners that ask (:meth:`Listener.rerun_enter`) hear
  of it (:mod:`moduleprofiler.reruns`);
* runs the backward (:meth:`PassRunner.backward`) with the one default loss
  (:func:`moduleprofiler.loss.default_loss`), telling listeners which forward call created the
  autograd node each backward operator runs for.

Per-call budget (the hot path, paid on every module call of the forward): the pre-hook builds
one :class:`Call` (a slotted object), pushes it and, where listeners want it, reads the
autograd sequence counter and switches the observer; the post-hook pops it and calls the
listeners that registered an ``exit``. Measured on a 2-core Xeon (Python 3.11, torch 2.14, one
thread) by replaying the 183 recorded hook events of a ResNet-50 forward without its compute:
the runner alone costs 1 µs per call; with the counting listener 10 µs (module formulas about
3 µs, resolving each module's formulas on its first call and switching the observer about
3 µs, output bytes under 1 µs: the output's storage and, when no other tensor holds it, nothing
else; the rest shapes, dtypes and the call's values). GPT-2's calls with keyword arguments or
tuple outputs take the general path: 15 µs per call on average. The observer is pushed and
popped (about 2 µs a pair) only when the innermost call's state changes: around each
formula-covered call inside an observed one (174 pairs in a ResNet-50 forward), never
elsewhere. Inside a real forward the same Python
work costs 2-3 times as much (in situ, 37 µs per ResNet-50 call with counting, plus about 7 µs
for torch's hooked call path itself), since it runs between convolution kernels. Per pass, on
ResNet-50: one module walk 0.08 ms (shared by the module facts, the hooks and the state kept),
module facts 0.35 ms, hook install and release 0.12 ms, the records 0.4 ms.
Anything that can be computed after the forward (totals, inclusive sums, per-module
aggregation, rendering) is left to the records and the views; what needs the live tensors
(shapes, dtypes, storage identity, formula results) is read once, and the counting listener
builds a one-tensor call's values from those facts after the pass, where the code that takes
stays in the caches from one call to the next; shape and dtype tuples are shared within a
pass, so few objects survive to set off the garbage collector.
"""

from __future__ import annotations

import bisect
import functools
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn.modules.lazy import LazyModuleMixin
from torch.utils.hooks import RemovableHandle

from moduleprofiler.autograd_nodes import (
    ACCUMULATE_SEQUENCE_NR,
    REENTRANT_CHECKPOINT_NODE,
    STOP,
    is_accumulation,
    sequence_number,
    walk_nodes,
)
from moduleprofiler.call import Call
from moduleprofiler.dispatch import OperatorObserver
from moduleprofiler.errors import LossError, ProfilingError
from moduleprofiler.failure import backward_error
from moduleprofiler.loss import LossFn, loss_of
from moduleprofiler.modules import ModuleWalk, walk_modules
from moduleprofiler.records import display_path
from moduleprofiler.reruns import Rerun, Reruns
from moduleprofiler.shards import shared_failure
from moduleprofiler.state import grads_set_aside

_get_sequence_nr: Callable[[], int] | None = getattr(torch._C._autograd, "_get_sequence_nr", None)
_current_node = torch._C._current_autograd_node

_pass_depth = [0]
"""How many passes are running now, nested (:func:`pass_scope`); one for the process, so
that module calls a model makes in other threads count at the same depth."""


@contextmanager
def pass_scope() -> Iterator[None]:
    """Run a pass of the package's own (one forward, its backward, a measurement loop) one
    level deeper: a runner hears only the module calls made at the depth it was installed at,
    so the hooks a watching runner keeps installed (``TrainingProfiler`` inside its window, a
    timed forward that runs another pass) take no part in the calls of a pass run meanwhile
    (a ``profile()`` or a ``benchmark()`` inside a training step would otherwise be recorded
    as more calls of that step, and its hook-free iterations would carry the watcher's
    hooks)."""
    _pass_depth[0] += 1
    try:
        yield
    finally:
        _pass_depth[0] -= 1


@dataclass
class GraphFacts:
    """What one walk of a loss's autograd graph found."""

    leaves: list[torch.Tensor]
    """The leaf tensors that require grad and that the loss depends on, in the order the
    graph reaches them: what ``loss.backward()`` accumulates gradients into (the trainable
    parameters the forward used, and input tensors that require grad)."""
    reentrant_checkpoint: bool
    """Whether the graph holds a reentrant checkpoint (:data:`REENTRANT_CHECKPOINT_NODE`)."""


def walk_graph(loss: torch.Tensor) -> GraphFacts:
    """One walk of ``loss``'s autograd graph, each node visited once."""
    if loss.grad_fn is None:
        return GraphFacts([loss] if loss.requires_grad else [], False)
    facts = GraphFacts([], False)

    def visit(node: Any, _: None) -> Any:
        variable = getattr(node, "variable", None)
        if isinstance(variable, torch.Tensor) and is_accumulation(node):
            facts.leaves.append(variable)
            return STOP
        if type(node).__name__ == REENTRANT_CHECKPOINT_NODE:
            facts.reentrant_checkpoint = True
        return None

    walk_nodes([(loss.grad_fn, None)], visit)
    return facts


_REFUSES_MODES = "non-infra torch dispatch mode present"
"""What torch.compile says when it refuses to run under the operator observer."""
_REFUSES_MODES_HINT = (
    "; hint: this call compiles itself (flex_attention does) and torch.compile refuses to run "
    "while operators are observed: profile with operators=False, or register a formula for "
    "the module that makes the call, so that no operator is observed inside it")

_DEEP_HINT = (
    "; hint: the model nests {depth} modules deep, and each level adds the hooks' frames to "
    "Python's call stack, whose limit is {limit}: raise it (sys.setrecursionlimit({more})) and "
    "profile again")

_PART_META_HINT = (
    "; hint: the model holds parameters or buffers on the meta device and others on {others} "
    "(accelerate's init_empty_weights() leaves the buffers off the meta device: "
    "init_empty_weights(include_buffers=True), or building under torch.device('meta'), "
    "puts all of them there)")


def _part_meta(modules: Iterable[nn.Module]) -> str | None:
    """The other device types of a model with some of its tensors on the meta device (what a
    model built with accelerate's ``init_empty_weights()`` is), else ``None``."""
    types = {tensor.device.type for module in modules
             for table in (module._parameters, module._buffers)
             for tensor in table.values() if tensor is not None}
    return ", ".join(sorted(types - {"meta"})) if "meta" in types and len(types) > 1 else None


def _refuse_stepping_hooks(tensors: Iterable[torch.Tensor]) -> None:
    """A ``ProfilingError`` when a leaf that ``loss.backward()`` would reach carries a
    post-accumulate-grad hook (an optimizer stepping inside the backward): the pass must not
    run it, and a reentrant checkpoint leaves no backward that skips it."""
    for tensor in tensors:
        # torch keeps these hooks in a private dict (``register_post_accumulate_grad_hook``)
        if getattr(tensor, "_post_accumulate_grad_hooks", None):
            raise ProfilingError(
                "the model uses torch.utils.checkpoint with use_reentrant=True, whose backward "
                "runs only as loss.backward(); that would run the post-accumulate-grad hooks "
                "registered on its parameters (an optimizer step in the backward): checkpoint "
                "with use_reentrant=False to profile the backward")


@dataclass(frozen=True)
class PassContext:
    """What the code that runs a pass tells all its listeners (``runner.context``), so that no
    listener searches the runner for another one to learn it."""

    operators: Mapping[Any, Any] | None = None
    """The aten-operator formulas the pass counts with (a profiler's ``operator_fn_map``);
    ``None`` outside a counted pass: a listener that prices operators then takes the
    registered ones."""
    plain_parameters: bool = False
    """Every parameter of the model is a plain ``nn.Parameter`` or tensor, as the code running
    the pass saw in its module scan (:attr:`~moduleprofiler.modules.ModuleScan.plain`): no
    listener needs to look for ``DTensor`` parameters (``False``: not known)."""


class Listener:
    """Base class of pass listeners: every method is a no-op; override the ones you need.

    A listener is told of every module call as it starts (:meth:`enter`, listeners in the order
    given to the runner) and ends (:meth:`exit`, in reverse order), of aten operators while the
    observer is on (:meth:`operator`, with the innermost running call or ``None`` outside every
    call), and of backward operators with the forward call that created their autograd node
    (:meth:`backward_operator`). It writes its results into ``call.values`` or keeps pass-level
    results of its own.
    """

    wants_nodes: bool = False
    """Whether this listener needs :meth:`PassRunner.owner_of_node` (autograd attribution)."""
    observes_all: bool = False
    """Whether this listener wants every aten operator of the pass, inside every module call
    and outside them (what :meth:`observe` and :meth:`observe_outside` answer by default)."""
    columns: tuple[Any, ...] = ()
    """The columns this listener writes into ``call.values``, each a
    :class:`~moduleprofiler.export.columns.ColumnSpec` registered in the class body
    (``register_column(...)`` returns it): the metric and its columns are one class."""

    def start(self, runner: PassRunner) -> None:
        """The hooks are installed and the pass is about to run."""

    def stop(self, runner: PassRunner) -> None:
        """The forward is over, also when it raised: undo what :meth:`start` set up for it."""

    def observe(self, module: nn.Module) -> bool:
        """Whether operators that run while ``module`` is the innermost call are wanted
        (asked once per module per pass); by default :attr:`observes_all`."""
        return self.observes_all

    def observe_outside(self) -> bool:
        """Whether operators that run outside every module call are wanted; by default
        :attr:`observes_all`."""
        return self.observes_all

    def enter(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """A module call starts."""

    def exit(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any],
             output: Any) -> None:
        """A module call returned (not called for a call whose forward raised)."""

    def operator(self, call: Call | None, func: Any, args: tuple[Any, ...],
                 kwargs: dict[str, Any], out: Any) -> None:
        """An aten operator ran inside ``call`` (``None``: outside every module call)."""

    def backward_operator(self, owner: Call | None, func: Any, args: tuple[Any, ...],
                          kwargs: dict[str, Any], out: Any) -> None:
        """A backward operator ran for a node created by ``owner`` (``None``: by no call)."""

    def rerun_enter(self, rerun: Rerun) -> None:
        """A module call starts inside the backward (a checkpoint's rerun of ``rerun.call``;
        see :mod:`moduleprofiler.reruns`)."""

    def rerun_exit(self, rerun: Rerun, output: Any, rebuilt: bool) -> None:
        """A rerun's module call ended (``output`` ``None`` when it raised). ``rebuilt``: it
        was the outermost of a reentrant checkpoint's rerun, whose graph (``output``'s, each
        node's owner known to :meth:`PassRunner.owner_of_node`) a nested backward
        differentiates next."""

    def finish(self, runner: PassRunner) -> None:
        """The pass is over (hooks released); complete ``call.values``."""


def _overrides(listener: Listener, name: str) -> bool:
    return getattr(type(listener), name) is not getattr(Listener, name)


_DIRECT, _REGISTER, _SCRIPTED = 0, 1, 2
"""How a module class is hooked: its hook tables written directly (it registers hooks the way
``nn.Module`` does) or through its own registration methods (it overrides one); plus
``_SCRIPTED`` for TorchScript, which carries no Python hooks (left unhooked below the root)."""
_HOOK_WAYS: dict[type[nn.Module], int] = {}


def _hook_way(cls: type[nn.Module]) -> int:
    """:data:`_DIRECT` or :data:`_REGISTER`, plus :data:`_SCRIPTED` for a TorchScript class,
    for module class ``cls`` (worked out once per class)."""
    way = _HOOK_WAYS.get(cls)
    if way is None:
        direct = (cls.register_forward_pre_hook is nn.Module.register_forward_pre_hook
                  and cls.register_forward_hook is nn.Module.register_forward_hook)
        way = _HOOK_WAYS[cls] = ((_DIRECT if direct else _REGISTER)
                                 + (_SCRIPTED if issubclass(cls, torch.jit.ScriptModule)
                                    else 0))
    return way


def _uninitialised(module: nn.Module) -> bool:
    """Whether ``module`` is a lazy module whose parameters are not materialised yet (its
    initialisation pre-hook is no work of the call)."""
    return isinstance(module, LazyModuleMixin) and module.has_uninitialized_params()


def _foreign(hooks: Mapping[int, Any]) -> bool:
    """Whether a module's hook table holds a hook no pass runner put there: another runner's
    (a pass run while a watching one keeps its hooks, a profile inside a training window) is
    no work of the module."""
    for hook in hooks.values():
        owner = getattr(hook, "__self__", None)
        if owner is None:  # the opening pre-hook is a partial of a runner's method
            owner = getattr(getattr(hook, "func", None), "__self__", None)
        if not isinstance(owner, PassRunner):
            return True
    return False


def _global_module_hooks() -> bool:
    """Whether torch holds global forward hooks or pre-hooks
    (``nn.modules.module.register_module_forward_hook``), which run for every module call."""
    module_hooks = nn.modules.module
    return bool(module_hooks._global_forward_hooks or module_hooks._global_forward_pre_hooks)


def _release_hooks(key: int, hooked: list[nn.Module], handles: list[RemovableHandle],
                   pre_kwargs: bool) -> None:
    for module in hooked:  # the tables ``_install`` wrote, by name (once per module)
        module._forward_pre_hooks.pop(key, None)
        if pre_kwargs:
            module._forward_pre_hooks_with_kwargs.pop(key, None)
        module._forward_hooks.pop(key, None)
        module._forward_hooks_with_kwargs.pop(key, None)
        module._forward_hooks_always_called.pop(key, None)
    for handle in handles:
        handle.remove()


@dataclass(frozen=True)
class SequenceMap:
    """Which forward call created the autograd node of each sequence number, in one pass:
    ``starts[i]`` is autograd's sequence counter at hook event ``i``, ``calls[i]`` the
    innermost call from that event on (``None`` outside every call)."""

    starts: list[int]
    calls: list[Call | None]

    @property
    def first(self) -> int | None:
        """The counter at the pass's first hook event (``None`` before any)."""
        return self.starts[0] if self.starts else None

    def owner(self, sequence: int) -> Call | None:
        """The call that created the node numbered ``sequence`` (``None``: none did)."""
        return owner_in(self.starts, self.calls, sequence)


def owner_in(starts: list[int], calls: list[Call | None], sequence: int) -> Call | None:
    """The innermost call from the last hook event at or before ``sequence`` (see
    :class:`SequenceMap`)."""
    position = bisect.bisect_right(starts, sequence) - 1
    return calls[position] if position >= 0 else None


def _listener_failed(listener: Listener | None, moment: str, call: Call,
                     exc: Exception) -> ProfilingError:
    """The error for a listener that raised ``exc`` (not a :class:`ProfilingError`: a
    formula's :class:`FormulaError` goes on as it is) at the ``moment`` (start or end) of
    ``call``: it names the listener and the module call, not the module's forward."""
    return ProfilingError(
        f"listener {type(listener).__name__} raised {type(exc).__name__} at the {moment} of "
        f"the call of module {display_path(call.path)!r} ({type(call.module).__name__}): "
        f"{exc}", call.path)


class PassRunner:
    """Hooks ``root``, runs a pass and dispatches its events to ``listeners``.

    Usage: ``runner = PassRunner(model, [listener, ...]); output = runner.forward(invoke)``,
    then optionally ``runner.backward(output, loss_fn)``; ``runner.calls`` lists every call.
    ``walk``: a :func:`~moduleprofiler.modules.walk_modules` of ``root`` the caller made anyway
    (else the runner walks the tree itself); ``context``: what every listener may read of the
    pass (:class:`PassContext`); ``unhookable``: modules to leave without hooks, the root
    included (:func:`~moduleprofiler.inputs.compiled_inside`: modules that run in compiled code
    of the caller's own), listed with the TorchScript ones in :attr:`unhooked`.
    """

    def __init__(self, root: nn.Module, listeners: Sequence[Listener], *,
                 walk: ModuleWalk | None = None, context: PassContext = PassContext(),
                 unhookable: Iterable[nn.Module] = ()) -> None:
        self.root = root
        self._unhookable = frozenset(map(id, unhookable))
        self.listeners = tuple(listeners)
        self.context = context
        if walk is None:
            walk = walk_modules(root)
        # the walk's own tables, read only here
        self.paths: dict[int, str] = walk.paths
        self.modules: list[nn.Module] = walk.modules
        self.calls: list[Call] = []
        self.stack: list[Call] = []
        self._failures: list[tuple[Call, BaseException]] = []
        """Each failed call with the exception it raised, innermost first (:attr:`failed_path`,
        :meth:`raised_path`)."""
        self.unhooked: tuple[str, ...] = ()
        """Paths of the modules left unhooked, TorchScript submodules (which cannot carry
        Python hooks) and the ``unhookable`` ones: their work is their nearest hooked
        ancestor's."""
        self.own_hooks: frozenset[int] = frozenset()
        """Ids of the modules that carry forward hooks of their own (the user's, a
        ``weight_norm``, a pruning mask): those hooks run inside the module's call (its
        pre-hooks after the call opens), so their work is the call's. Every module while
        torch holds global forward hooks (``register_module_forward_hook``): those run in
        each call, the global pre-hooks just before it, in the caller's call."""
        self.reruns = Reruns()
        """The module calls made inside the backward (a checkpoint's rerun), matched to the
        forward calls they repeat; never recorded as calls."""
        self._counts: dict[int, int] = {}
        self._dispatch(self.listeners)
        # sequence-number intervals: ``_seq_starts[i]`` is the counter at hook event ``i``,
        # ``_seq_calls[i]`` the innermost call from that event on
        self._seq_starts: list[int] = []
        self._seq_calls: list[Call | None] = []
        self._leaf_owners: dict[int, Call] | None = None
        self._depth = 0
        """The :func:`pass_scope` depth its hooks were installed at: the calls it hears."""

    def _dispatch(self, listeners: Sequence[Listener]) -> None:
        """Tell ``listeners`` (of this runner's) of the events from now on."""
        self.active = tuple(listeners)
        self._enter_listeners = [lst for lst in self.active if _overrides(lst, "enter")]
        # exit in reverse order: the last listener is the innermost, so a clock listener put
        # last stamps after every other listener's enter work and before their exit work
        self._exit_listeners = [lst for lst in reversed(self.active)
                                if _overrides(lst, "exit")]
        self._operator_listeners = [lst for lst in self.active if _overrides(lst, "operator")]
        self._only_watcher = tuple(self._operator_listeners[:1])
        self._backward_listeners = [lst for lst in self.active
                                    if _overrides(lst, "backward_operator")]
        self._rerun_listeners = [lst for lst in self.active
                                 if _overrides(lst, "rerun_enter") or _overrides(lst, "rerun_exit")]
        self._track_nodes = _get_sequence_nr is not None and any(
            lst.wants_nodes or lst in self._backward_listeners for lst in self.active)
        self._observed: dict[int, bool] = {}
        # per module, the listeners that asked for its operators: only they are told of them
        self._watchers: dict[int, tuple[Listener, ...]] = {}
        self._outside_watchers = tuple(lst for lst in self._operator_listeners
                                       if lst.observe_outside())
        self._observe_outside = bool(self._outside_watchers)
        self._observer = (OperatorObserver(self._on_operator) if self._operator_listeners
                          else None)

    # -- the forward -----------------------------------------------------------------------
    def forward(self, invoke: Callable[[], Any]) -> Any:
        """Install the hooks, run ``invoke()`` once, release the hooks; return its output.

        Raises:
            ProfilingError: ``invoke()`` raised; the message names the module whose forward
                failed, and the original exception is chained.
        """
        with pass_scope(), self.installed():
            return self.run(invoke)

    @contextmanager
    def installed(self, only: Sequence[Listener] | None = None) -> Iterator[PassRunner]:
        """Keep the hooks installed for the block, for any number of :meth:`run` calls or
        forwards the caller makes itself (timing's iterations, a live training loop); every
        hook is released on exit, also when the block raises. ``only``: the runner's
        listeners told of this block's events (a timed pass runs one kind of iteration per
        block on its one runner); default: all."""
        with ExitStack() as cleanup:
            if only is not None:
                self._dispatch(only)
                cleanup.callback(self._dispatch, self.listeners)
            self._install(cleanup)
            for listener in self.active:
                listener.start(self)
                cleanup.callback(listener.stop, self)
            if self._observer is not None:
                cleanup.callback(self._observer.stop)
                self._sync_observer()
            yield self

    def run(self, invoke: Callable[[], Any]) -> Any:
        """``invoke()`` inside :meth:`installed`; return its output.

        Raises:
            ProfilingError: as :meth:`forward`.
        """
        try:
            return invoke()
        except ProfilingError:
            raise
        except Exception as exc:
            raise shared_failure(self._error_for(exc), self.root, self.modules) from exc

    def reset(self) -> None:
        """Forget the previous run's calls (the hooks stay installed): the next run starts at
        call index 0. The lists are replaced, not cleared, so a caller may keep the old ones."""
        self.calls = []
        self.stack.clear()
        self.reruns.reset()
        self._failures = []
        self._counts.clear()
        self._seq_starts = []
        self._seq_calls = []
        self._leaf_owners = None

    @property
    def failed_path(self) -> str | None:
        """The first module whose forward raised in the run (the innermost of the first
        failure), caught inside the model or not; ``None`` when none raised."""
        return self._failures[0][0].path if self._failures else None

    def raised_path(self) -> str | None:
        """The module whose forward raised the exception that left an outermost call of the
        run (the model, as a whole, raised): the innermost call that raised that exception;
        ``None`` when every exception a module raised was caught inside the model (a
        fallback after a failed fast path: the forward finished) or none was raised."""
        escaped = next((error for call, error in self._failures if call.parent is None), None)
        if escaped is None:
            return None
        return next(call.path for call, error in self._failures if error is escaped)

    def finish(self) -> None:
        """Tell every listener that the pass is over."""
        for listener in self.listeners:
            listener.finish(self)

    def _install(self, cleanup: ExitStack) -> None:
        # the calls it hears: those made at this depth; the one before comes back with the
        # hooks' release (a backward's hooks installed inside a block of the forward's)
        cleanup.callback(setattr, self, "_depth", self._depth)
        self._depth = _pass_depth[0]
        unhooked: list[str] = []
        # What ``register_forward_pre_hook(with_kwargs=pre_kwargs)`` and ``register_forward_hook(
        # with_kwargs=True, always_call=True)`` do, written into the module's hook tables under
        # one fresh torch hook id: no handle objects (four or five tracked objects per hook,
        # enough to set off the garbage collector during the pass), one cleanup callback for
        # all modules, registered first so a failure half-way still releases what was installed.
        # A module whose class overrides the registration methods gets them called instead.
        key = RemovableHandle.next_id
        RemovableHandle.next_id += 1
        hooked: list[nn.Module] = []
        handles: list[RemovableHandle] = []
        # the pre-hook takes the keyword arguments only for listeners that read them at a
        # call's start: without one, a table entry less to write and release per module
        pre_kwargs = bool(self._enter_listeners)
        cleanup.callback(_release_hooks, key, hooked, handles, pre_kwargs)
        enter, exit_ = self._enter, self._exit
        opening = functools.partial(enter, announce=False)
        ways = _HOOK_WAYS
        unhookable = self._unhookable
        own_hooks: list[int] = []
        for module in self.modules:  # one class lookup per module; paths only when needed
            if unhookable and id(module) in unhookable:
                unhooked.append(self.paths[id(module)])
                continue
            way = ways.get(type(module))
            if way is None:
                way = _hook_way(type(module))
            if way >= _SCRIPTED:
                if module is not self.root:
                    unhooked.append(self.paths[id(module)])
                    continue
                way -= _SCRIPTED
            # hooks of its own, besides a lazy module's initialisation (and the snapshot the
            # state restore puts behind it): the call starts before they run
            # each table read once from the module (an attribute read of a module goes
            # through nn.Module's __getattr__ hook: about twice a dict read)
            pre_hooks, post_hooks = module._forward_pre_hooks, module._forward_hooks
            first = (bool(pre_hooks) and _foreign(pre_hooks) and not _uninitialised(module))
            if first or (post_hooks and _foreign(post_hooks)):
                own_hooks.append(id(module))
            try:
                if first:
                    # the call opens before the module's own pre-hooks run (their work is
                    # the call's) and the listeners hear of it after them, with the arguments
                    # they made; a rare case, registered through torch
                    handles.append(module.register_forward_pre_hook(
                        opening, with_kwargs=True, prepend=True))
                    handles.append(module.register_forward_pre_hook(
                        self._announce, with_kwargs=True))
                    handles.append(module.register_forward_hook(
                        exit_, with_kwargs=True, always_call=True))
                elif way == _DIRECT:
                    hooked.append(module)
                    pre_hooks[key] = enter
                    if pre_kwargs:
                        module._forward_pre_hooks_with_kwargs[key] = True
                    post_hooks[key] = exit_
                    module._forward_hooks_with_kwargs[key] = True
                    module._forward_hooks_always_called[key] = True
                else:
                    handles.append(module.register_forward_pre_hook(enter,
                                                                    with_kwargs=pre_kwargs))
                    handles.append(module.register_forward_hook(
                        exit_, with_kwargs=True, always_call=True))
            except Exception as exc:
                path = self.paths[id(module)]
                raise ProfilingError(
                    f"cannot hook module {display_path(path)!r} ({type(module).__name__}): "
                    f"{exc}", path) from exc
        self.unhooked = tuple(unhooked)
        if _global_module_hooks():
            # torch's global forward hooks run in every module's call (the forward hooks) or
            # just before it, in its caller's (the pre-hooks): work no formula prices
            own_hooks = [id(module) for module in self.modules]
        self.own_hooks = frozenset(own_hooks)

    def _enter(self, module: nn.Module, args: tuple[Any, ...],
               kwargs: dict[str, Any] | None = None,
               announce: bool = True) -> None:
        if _pass_depth[0] != self._depth:
            return  # a call of a pass run inside this one's (pass_scope): not this pass's
        stack = self.stack
        if self.reruns.frames or (not stack and _current_node() is not None):
            # inside the backward: a rerun, not a forward call (asked only when no forward
            # call is running, so once per forward)
            self._enter_rerun(module)
            return
        key = id(module)
        calls = self.calls
        number = self._counts.get(key, 0)
        self._counts[key] = number + 1
        if stack:
            parent = stack[-1]
            call = Call(len(calls), parent.index, parent.depth + 1, module,
                        self.paths.get(key, "?"), number, sys.exc_info()[1])
        else:
            call = Call(len(calls), None, 0, module, self.paths.get(key, "?"), number,
                        sys.exc_info()[1])
        calls.append(call)
        stack.append(call)
        if self._track_nodes:
            self._seq_starts.append(_get_sequence_nr())  # type: ignore[misc]
            self._seq_calls.append(call)
        if announce and self._enter_listeners:
            # ``kwargs`` is None only from a pre-hook installed without them, in a pass with
            # no listener to tell here
            self._tell_start(call, args, kwargs or {})
        observer = self._observer
        if observer is not None:
            wanted = self._observed.get(key)
            if wanted is None:
                wanted = self._wants(module)
            if wanted is not observer.pushed:  # switch only when the state changes
                observer.set_active(wanted)

    def _announce(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]
                  ) -> None:
        """After a module's own pre-hooks: tell the listeners of the call opened before them
        (``_enter(announce=False)``), with the arguments the hooks left."""
        stack = self.stack
        if (_pass_depth[0] != self._depth or self.reruns.frames or not stack
                or stack[-1].module is not module):
            return  # another pass's call, or a rerun inside the backward: none was opened
        call = stack[-1]
        # tensor work done by listeners is never observed: the observer, when it is on and
        # not muted already, is muted for them
        observer = self._observer
        muted = (observer if observer is not None and observer.pushed and not observer.muted
                 else None)
        if muted is not None:
            muted.muted = True
        try:
            self._tell_start(call, args, kwargs)
        finally:
            if muted is not None:
                muted.muted = False

    def _tell_start(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Tell each listener that ``call`` starts; one that raises is named with the call."""
        listener = None
        try:
            for listener in self._enter_listeners:
                listener.enter(call, args, kwargs)
        except ProfilingError:
            raise
        except Exception as exc:
            raise _listener_failed(listener, "start", call, exc) from exc

    def _exit(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any],
              output: Any) -> None:
        if _pass_depth[0] != self._depth:
            return  # a call of a pass run inside this one's: its enter was not heard either
        frames = self.reruns.frames
        if frames and frames[-1].module is module:
            self._exit_rerun(output)
            return
        stack = self.stack
        if stack and stack[-1].module is module:
            call = stack.pop()
        else:
            # A foreign hook raised between our pre-hook and the forward: unwind to this
            # module's call.
            found = None
            while stack:
                candidate = stack.pop()
                if candidate.module is module:
                    found = candidate
                    break
            if found is None:
                return
            call = found
        observer = self._observer
        if observer is not None and observer.pushed:
            # tensor work done by listeners is never observed; muting is cheaper than popping
            # the mode when the caller is observed too
            observer.muted = True
        try:
            exception = sys.exc_info()[1]
            if exception is not None and exception is not call.outer_exception:
                # Called from ``_call_impl``'s exception handler: this forward raised. The
                # first module to get here is the innermost one, the one that failed.
                call.failed = True
                self._failures.append((call, exception))
            else:
                listener = None
                try:
                    for listener in self._exit_listeners:
                        listener.exit(call, args, kwargs, output)
                except ProfilingError:
                    raise
                except Exception as exc:
                    # this call's error, not its caller's: the caller's exit hook, which
                    # sees it next, would otherwise be named as the module that failed
                    call.failed = True
                    error = _listener_failed(listener, "end", call, exc)
                    self._failures.append((call, error))
                    raise error from exc
        finally:
            if self._track_nodes:
                self._seq_starts.append(_get_sequence_nr())  # type: ignore[misc]
                self._seq_calls.append(stack[-1] if stack else None)
            if observer is not None:
                if stack:
                    caller = stack[-1].module
                    wanted = self._observed.get(id(caller))
                    if wanted is None:
                        wanted = self._wants(caller)
                else:
                    wanted = self._observe_outside
                if wanted and observer.pushed:
                    observer.muted = False
                else:
                    observer.set_active(wanted)

    # -- reruns (module calls inside the backward) ------------------------------------------
    def _enter_rerun(self, module: nn.Module) -> None:
        reruns = self.reruns
        node = None if reruns.frames else _current_node()
        owner = None if node is None else self.owner_of_node(node)
        rerun = reruns.enter(module, node, owner, self.calls, self._seq_starts,
                             self._seq_calls, sys.exc_info()[1])
        if self._track_nodes and reruns.rebuilds:
            reruns.mark(_get_sequence_nr(), rerun.call)  # type: ignore[misc]
        for listener in self._rerun_listeners:
            listener.rerun_enter(rerun)

    def _exit_rerun(self, output: Any) -> None:
        reruns = self.reruns
        rerun = reruns.frames.pop()
        failed = sys.exc_info()[1] is not rerun.exception
        outermost = not reruns.frames
        if self._track_nodes and reruns.rebuilds:
            reruns.mark(_get_sequence_nr(), rerun.outer)  # type: ignore[misc]
            if outermost and not failed:
                reruns.own_graph(output)
        rebuilt = outermost and reruns.rebuilds and not failed
        for listener in self._rerun_listeners:
            listener.rerun_exit(rerun, None if failed else output, rebuilt)

    # -- operators -------------------------------------------------------------------------
    def _wants(self, module: nn.Module) -> bool:
        """Whether some listener wants ``module``'s operators, asked on its first call in this
        pass (the callers looked in :attr:`_observed` first)."""
        listeners = self._operator_listeners
        if len(listeners) == 1:  # the usual case: the counting listener alone
            watchers = self._only_watcher if listeners[0].observe(module) else ()
        else:
            watchers = tuple(lst for lst in listeners if lst.observe(module))
        self._watchers[id(module)] = watchers
        wanted = self._observed[id(module)] = bool(watchers)
        return wanted

    def _sync_observer(self) -> None:
        """Observe exactly when the innermost running call (or, outside every call, the pass
        itself) is wanted by some listener."""
        observer = self._observer
        assert observer is not None
        stack = self.stack
        if stack:
            module = stack[-1].module
            wanted = self._observed.get(id(module))
            observer.set_active(self._wants(module) if wanted is None else wanted)
        else:
            observer.set_active(self._observe_outside)

    def _on_operator(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                     out: Any) -> None:
        stack = self.stack
        if stack:
            call: Call | None = stack[-1]
            listeners = self._watchers.get(id(stack[-1].module), ())
        else:
            call, listeners = None, self._outside_watchers
        for listener in listeners:
            listener.operator(call, func, args, kwargs, out)

    # -- autograd ----------------------------------------------------------------------------
    def owner_of_node(self, node: Any) -> Call | None:
        """The forward call that created the autograd ``node`` (``None``: created outside
        every module call or by the loss). An ``AccumulateGrad`` node belongs to the first call
        of the module that registers its parameter (``None`` for an input or an uncalled
        module's parameter)."""
        if node is None or not self._seq_starts:
            return None
        sequence = sequence_number(node)
        if sequence is None:
            return None
        if sequence == ACCUMULATE_SEQUENCE_NR:
            return self._owner_of_leaf(node)
        if self.reruns.owns_nodes:
            rebuilt = self.reruns.owner(node)
            if rebuilt is not None:
                return rebuilt
        return owner_in(self._seq_starts, self._seq_calls, sequence)

    def sequence_map(self) -> SequenceMap:
        """The map from autograd sequence numbers to the calls of this pass (the lists are
        replaced, not emptied, by :meth:`reset`: an earlier pass's map stays valid)."""
        return SequenceMap(self._seq_starts, self._seq_calls)

    def _owner_of_leaf(self, node: Any) -> Call | None:
        if self._leaf_owners is None:  # built once, on the backward's first accumulation
            first: dict[int, Call] = {}
            for call in self.calls:
                first.setdefault(id(call.module), call)
            self._leaf_owners = {}
            for module in self.modules:
                owner = first.get(id(module))
                if owner is None:
                    continue
                for parameter in module._parameters.values():
                    if parameter is not None:
                        self._leaf_owners.setdefault(id(parameter), owner)
        variable = getattr(node, "variable", None)
        return None if variable is None else self._leaf_owners.get(id(variable))

    def backward(self, output: Any, loss_fn: LossFn | None,
                 inputs: Iterable[torch.Tensor] | None = None, *,
                 accumulate: bool = False, every_leaf: bool = False) -> None:
        """Differentiate ``loss_fn(output)`` (default :func:`~moduleprofiler.loss.default_loss`)
        with respect to ``inputs`` (default: every leaf tensor that requires grad and that the
        loss depends on, as ``loss.backward()`` would: the model's trainable parameters, and
        input tensors that require grad, such as a loss's prediction) with
        ``torch.autograd.grad``, so no ``.grad`` is touched, while telling the listeners which
        forward call each backward operator works for. ``accumulate=True`` runs a training
        step's backward instead (``torch.autograd.backward``): the gradients are accumulated
        into ``.grad`` of the trainable parameters (set them aside with
        ``preserved_state(grads=True)``). ``every_leaf=True`` is ``loss.backward()`` itself,
        into every leaf the loss depends on: the one backward a wrapper that swaps its
        parameters during the pass can take (FSDP2 computes with unsharded copies of the
        parameters it registers, and reduces their gradients in its own hooks).

        Raises:
            LossError: no loss can be derived from ``output``: the message names the cause
                (the pass ran under ``torch.inference_mode()``; nothing in it requires grad; or
                the output holds no tensor that requires grad, so pass ``loss_fn``).
            ProfilingError: the backward pass has nothing to differentiate, or it raised.
        """
        if torch.is_inference_mode_enabled():  # no graph was recorded: no loss can help
            raise LossError(
                "the backward pass cannot run under torch.inference_mode(), which records no "
                "autograd graph: profile outside the inference_mode block")
        try:
            loss = loss_of(output, loss_fn)
        except LossError as exc:
            cause = self._nothing_requires_grad()
            if cause is not None:  # "pass loss_fn=" cannot help: name the cause
                raise LossError(cause) from exc
            raise
        if not isinstance(loss, torch.Tensor) or not loss.requires_grad:
            cause = self._nothing_requires_grad() if isinstance(loss, torch.Tensor) else None
            raise LossError(cause or (
                f"loss_fn returned {type(loss).__name__}"
                + ("" if not isinstance(loss, torch.Tensor) else " that does not require grad")
                + ": the backward pass needs a tensor that requires grad"))
        graph = None if every_leaf else walk_graph(loss)
        if inputs is None and not accumulate and graph is not None:
            targets = graph.leaves
        else:
            targets = [t for t in (self.root.parameters() if inputs is None else inputs)
                       if t.requires_grad]
        if not targets:
            raise ProfilingError(
                "the backward pass has nothing to differentiate: no parameter of the model "
                "requires grad" + (" (a training step's backward accumulates into parameters "
                                   "only)" if accumulate and inputs is None else ""))
        reentrant = graph is not None and graph.reentrant_checkpoint
        if reentrant:
            assert graph is not None
            # ``loss.backward()`` reaches every parameter and input leaf: all but the
            # gradients a training step accumulates (``accumulate``) are set aside
            reached = [*self.root.parameters(), *graph.leaves]
            _refuse_stepping_hooks(reached)
            accumulated = {id(t) for t in targets} if accumulate else set()
            aside = [t for t in reached if id(t) not in accumulated]
        observer = OperatorObserver(self._on_backward_operator) if self._backward_listeners \
            else None
        try:
            with pass_scope(), ExitStack() as hooks:
                if self._backward_listeners or self._rerun_listeners:
                    # the hooks again, for the module calls a checkpoint reruns in the backward
                    self._install(hooks)
                if observer is not None:
                    observer.start()
                    hooks.callback(observer.stop)
                if every_leaf:
                    torch.autograd.backward(loss)
                elif reentrant:
                    # the reentrant checkpoint only runs inside ``loss.backward()`` itself
                    with grads_set_aside(aside):
                        torch.autograd.backward(loss)
                elif accumulate:
                    torch.autograd.backward(loss, inputs=targets)
                else:
                    torch.autograd.grad(loss, targets, allow_unused=True)
        except ProfilingError:
            raise
        except Exception as exc:
            raise shared_failure(backward_error(exc, self.root, self.failed_backward_of),
                                 self.root, self.modules) from exc

    def failed_backward_of(self, exc: BaseException) -> str:
        """``"; in the backward of module 'blk.1' (Inner)"`` when ``exc`` came from a custom
        autograd Function's ``backward`` whose node (its ``ctx``) a forward call of this pass
        created (the node map, :meth:`owner_of_node`; empty in a pass that tracks no nodes),
        else ``""``: nothing is run again."""
        found: Call | None = None
        trace = exc.__traceback__
        while trace is not None:  # outermost frame first: the last match is the innermost
            node = trace.tb_frame.f_locals.get("ctx")
            if node is not None and hasattr(node, "_sequence_nr"):
                found = self.owner_of_node(node) or found
            trace = trace.tb_next
        if found is None:
            return ""
        return (f"; in the backward of module {display_path(found.path)!r} "
                f"({type(found.module).__name__})")

    def _nothing_requires_grad(self) -> str | None:
        """Why no loss requires grad, when the cause is the pass rather than the output: no
        parameter of the model requires grad (and, since the output does not either, no input
        that requires grad reached it). ``None`` when some parameter requires grad."""
        parameters = list(self.root.parameters())
        if any(p.requires_grad for p in parameters):
            return None
        model = ("has no parameters" if not parameters
                 else f"has {len(parameters)} parameter tensor(s), none of which requires grad")
        return (f"nothing in the pass requires grad: the model {model}, and no input tensor "
                "that requires grad reaches its output; call requires_grad_() on an input "
                "(a loss's prediction, a parameter-free block's input) or on the parameters "
                "to differentiate")

    def _on_backward_operator(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                              out: Any) -> None:
        frames = self.reruns.frames
        if frames:  # a rerun's forward: the work of the call it repeats
            rerun = frames[-1]
            owner = rerun.call if rerun.call is not None else rerun.outer
        else:
            owner = self.owner_of_node(_current_node())
        for listener in self._backward_listeners:
            listener.backward_operator(owner, func, args, kwargs, out)

    def release(self) -> None:
        """Drop the forward's operator observer, which refers back to the runner: the runner,
        its calls and the modules they name are then freed as soon as the caller lets go of
        them, without waiting for the garbage collector."""
        self._observer = None

    # -- errors --------------------------------------------------------------------------------
    def _error_for(self, exc: Exception) -> ProfilingError:
        # notes on the exception (a hint added by the invocation) end the message
        notes = "".join(f"; {note}" for note in getattr(exc, "__notes__", ()))
        if _REFUSES_MODES in str(exc):
            notes += _REFUSES_MODES_HINT
        if isinstance(exc, RecursionError):  # the bare forward may fit where the hooked can't
            depth = max((path.count(".") + 1 for path in self.paths.values() if path), default=0)
            limit = sys.getrecursionlimit()
            notes += _DEEP_HINT.format(depth=depth, limit=limit, more=4 * limit)
        if "meta" in str(exc):
            others = _part_meta(self.modules)
            if others is not None:
                notes += _PART_META_HINT.format(others=others)
        path = self.raised_path()
        if path is None:
            return ProfilingError(
                f"the profiled call raised {type(exc).__name__} outside any module's forward: "
                f"{exc}{notes}")
        module = next(m for m in self.modules if self.paths[id(m)] == path)
        return ProfilingError(
            f"forward of module {display_path(path)!r} ({type(module).__name__}) raised "
            f"{type(exc).__name__}: {exc}{notes}", path)
