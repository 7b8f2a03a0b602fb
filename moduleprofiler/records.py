"""Immutable results: one :class:`CallRecord` per module call, static :class:`ModuleInfo` per
module, and the :class:`Profile` that holds them. Everything else is a view of these."""

from __future__ import annotations

import difflib
import operator
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from moduleprofiler.facts import TimingFacts

_T = TypeVar("_T")

OpsSource = Literal["formula", "operator", "mixed", "excluded", "unknown"]
"""Where a call's own ops came from:

* ``formula``: the module formula of its type (operators inside are not counted again);
* ``operator``: the aten operators its own forward ran (no module formula for its type);
* ``mixed``: operators, some of which have no operator formula (see
  ``Profile.unsupported_ops``): the count is a lower bound;
* ``excluded``: not counted on purpose (``exclude_from_ops``);
* ``unknown``: no formula and operator accounting was off."""

COUNTED_SOURCES: tuple[str, ...] = ("formula", "operator", "excluded")
"""The ``ops_source`` values whose ops are fully known."""
_COUNTED = COUNTED_SOURCES

Aggregate = Literal["call", "module", "type"]

ROOT_NAME = "__root__"
"""How every output (tables, files, messages, the 0.0.4 dicts) names the root module, whose
``named_modules()`` path is ``""`` (why this name: :mod:`moduleprofiler.export.names`)."""


ModuleStatus = Literal["called", "grouping", "uncalled", "unhooked"]
"""A module's status: called, a grouping of called descendants, never run, or a TorchScript
submodule that carries no hooks (its work is in its nearest hooked ancestor's calls)."""
CALLED: ModuleStatus = "called"
GROUPING: ModuleStatus = "grouping"
UNCALLED: ModuleStatus = "uncalled"
UNHOOKED: ModuleStatus = "unhooked"


def ancestor_paths(path: str) -> list[str]:
    """``"a.b.c"`` -> ``["", "a", "a.b"]`` (the root ``""`` has none)."""
    if not path:
        return []
    parts = path.split(".")
    return ["", *(".".join(parts[:i]) for i in range(1, len(parts)))]


def module_statuses(modules: Iterable[ModuleInfo], called: Collection[str],
                    unhooked: Collection[str] = ()) -> dict[str, ModuleStatus]:
    """The status of each module of ``modules``: the one definition of "never called" that
    every result (profiles, timings) and view uses.

    A module in ``called`` is :data:`CALLED`; one in ``unhooked`` :data:`UNHOOKED`. A module
    never called itself is a :data:`GROUPING` when it could not have been called (a
    :attr:`ModuleInfo.container`: a ``ModuleList``, a ``ModuleDict``) or is the root (whose
    ``pred_fn`` calls its children), and a descendant of it ran; any other is
    :data:`UNCALLED`, whatever its children did: a module whose own ``forward`` never ran
    while another method of it called its children is never called. So is one whose
    ``forward`` ran without its hooks (``module.forward(x)``, a class that replaces
    ``__call__``): the pass cannot see that run, whose operators count in its caller's."""
    modules = tuple(modules)
    groupable = {info.path for info in modules if info.container or info.path == ""}
    holding = {above for path in called for above in ancestor_paths(path) if above in groupable}
    out: dict[str, ModuleStatus] = {}
    for info in modules:
        path = info.path
        if path in called:
            out[path] = CALLED
        elif path in unhooked:
            out[path] = UNHOOKED
        else:
            out[path] = GROUPING if path in holding else UNCALLED
    return out


def ran_without(path: str, called: Iterable[str]) -> tuple[str, ...]:
    """The modules of ``called`` below ``path`` whose nearest ancestor in ``called`` is above
    ``path`` (or who have none): the topmost descendants of a module never called that ran
    without it (called through another method of it, or from outside it)."""
    ran = dict.fromkeys(called)  # in the caller's order
    inside = path + "."
    return tuple(each for each in ran if each.startswith(inside) and not any(
        above.startswith(inside) and above in ran for above in ancestor_paths(each)))


def subtree_totals(own: Sequence[_T | None], parents: Sequence[int | None],
                   combine: Callable[[_T, _T], _T] = operator.add) -> list[_T | None]:
    """For each call in execution order (``parents[i]``: the position of call ``i``'s parent,
    or ``None``), its own value combined (summed, or ``max``) with those of every call inside
    it. Unknown (``None``) values count as nothing; a call whose subtree knows none stays
    unknown."""
    totals = list(own)
    for row in range(len(totals) - 1, -1, -1):  # children start after their parent
        value, parent = totals[row], parents[row]
        if value is not None and parent is not None:
            above = totals[parent]
            totals[parent] = value if above is None else combine(above, value)
    return totals


def display_path(path: str) -> str:
    """How the module at ``path`` is named in every output and message: ``""`` (the root's
    path) -> :data:`ROOT_NAME`; a path whose first name is :data:`ROOT_NAME` (a child
    registered under that attribute name) with a dot in front, joined to the root's ``""``
    (``".__root__"``: no two modules share a name, and no path starts with a dot, so a name
    is named again as itself); any other path as it is."""
    if path.partition(".")[0] == ROOT_NAME:
        return f".{path}"
    return ROOT_NAME if path == "" else path


def module_path(name: str) -> str:
    """The ``named_modules()`` path of an output name (:func:`display_path`'s inverse):
    ``"__root__"`` -> ``""``, ``".__root__.rest"`` -> ``"__root__.rest"``, any other name as
    it is."""
    if name == ROOT_NAME:
        return ""
    return name[1:] if name[1:].partition(".")[0] == ROOT_NAME and name[:1] == "." else name


def model_name(profile: ProfileData) -> str:
    """How every result names its model (a summary's ``model``, a view's or a report's title):
    the root module's class name, ``"model"`` for a result that holds no module."""
    return profile.modules[0].type_name if profile.modules else "model"


SharedTensor = tuple[int, int, int, int, int]
"""A tensor registered at more than one module: its number within the model, its kind (0: a
parameter, 1: a buffer), elements, bytes and trainable elements."""

_SHARED_COLUMNS = {"params": (0, 2), "param_bytes": (0, 3), "trainable_params": (0, 4),
                   "buffers": (1, 2), "buffer_bytes": (1, 3)}
"""The module facts a shared tensor adds to, with its kind and the entry that holds it."""


def shared_overlap(column: str, holders: Iterable[ModuleInfo]) -> int:
    """How much more than once ``column`` (``params``, ``param_bytes``, ``trainable_params``,
    ``buffers``, ``buffer_bytes``) of ``holders``, summed, counts the tensors several of them
    hold: each such tensor's size times the number of holders past the first."""
    where = _SHARED_COLUMNS.get(column)
    if where is None:
        return 0
    kind, entry = where
    seen: set[int] = set()
    extra = 0
    for info in holders:
        for tensor in info.shared_tensors:
            if tensor[1] == kind:
                if tensor[0] in seen:
                    extra += tensor[entry]
                seen.add(tensor[0])
    return extra


@dataclass(frozen=True, slots=True)
class ModuleInfo:
    """Static facts about one module of the profiled model (called or not)."""

    path: str
    """Dotted path as in ``named_modules()``; the root is ``""``."""
    type_name: str
    depth: int
    params: int | None
    """Parameters of the module and its descendants, each tensor counted once, with the
    weights packed in objects they hold (a quantized layer's: :mod:`moduleprofiler.packed`).
    ``None`` (unknown) for a module holding packed weights that cannot be read
    (:attr:`ProfileData.unknown_params`); above it, the known part: a lower bound, ``None``
    where that part is 0."""
    self_params: int
    """Parameters registered directly on the module (``recurse=False``) that no module
    before it in ``named_modules()`` order registered: a tied weight is owned once, by the
    first module holding it, so own parameters add up to the model's parameters. Weights
    packed in an object the module holds count as its own (never trainable) where they can
    be read."""
    trainable_params: int
    """Of ``params``, those with ``requires_grad`` (packed weights never are)."""
    buffers: int
    """Elements of the buffers of the module and its descendants, each tensor counted once."""
    is_leaf: bool
    param_bytes: int | None = 0
    """Bytes of ``params`` this process holds (``numel * element_size``, each tensor once: a
    qint8 weight's value is 1 byte; its quantization scales and zero points are not counted);
    of the weights that can be read: unknown (``None``) where ``params`` is. A ``DTensor``
    counts the shard this rank holds and a sparse tensor its indices and stored values, as the
    memory views do (:func:`moduleprofiler.storage.own_nbytes`), while ``params`` counts the
    global and dense elements."""
    buffer_bytes: int = 0
    """Bytes of ``buffers``."""
    shared_with: str | None = None
    """The names (comma-separated paths, the root as ``__root__``) of the modules owning
    parameters or buffers that this module registers too (a tied output layer:
    ``"transformer.wte"``; a rotary ``inv_freq`` buffer every layer registers: the first
    layer), each tensor owned by the first module registering it; ``None`` when it shares
    none. Its ``params`` and ``buffers`` include them, its ``self_params`` do not."""
    container: bool = False
    """True when the module's class keeps ``nn.Module``'s unimplemented ``forward`` (a
    ``ModuleList``, a ``ModuleDict``, a subclass of one that adds no ``forward``): it holds
    modules that are called directly, and is never called itself
    (:func:`module_statuses`)."""
    shared_tensors: tuple[SharedTensor, ...] = ()
    """The tensors registered at more than one module (tied weights) that this module's sums
    hold, each once: what a view summing several modules takes away, so that a tensor two of
    them hold counts once (:func:`shared_overlap`)."""

    @property
    def parent(self) -> str | None:
        """Path of the module holding this one (``None`` for the root): its path's prefix, as
        ``named_modules()`` lists a module registered at several places at its first place,
        inside its parent's first place."""
        return None if self.path == "" else self.path.rpartition(".")[0]


@dataclass(frozen=True, slots=True)
class CallPosition:
    """Where one module call sat in the runtime call stack: the fields every per-call result
    (counts, memory, time) is keyed by."""

    index: int
    """Position in execution order (order in which the calls started)."""
    parent: int | None
    """``index`` of the call that was running when this one started (``None`` for the first)."""
    depth: int
    """Nesting depth in the runtime call stack (0 for the outermost call)."""
    path: str
    type_name: str
    call_number: int
    """0 for the module's first call, 1 for its second, ..."""


@dataclass(frozen=True, slots=True)
class CallRecord(CallPosition):
    """One call of one module during the profiled forward pass."""

    input_shapes: Any
    """Shape tree of the positional arguments (a tuple), with a trailing dict of keyword
    arguments when there were any."""
    input_dtypes: tuple[str, ...]
    output_shapes: Any
    output_dtypes: tuple[str, ...]
    output_bytes: int
    """Bytes of memory the outputs occupy that were not there before the call: each distinct
    storage once, storages shared with the inputs or the module's own parameters and buffers
    (views, in-place results) excluded."""
    input_size: Any
    """0.0.4's ``input_size`` (from the io-size function of the module's type)."""
    output_size: Any
    """0.0.4's ``output_size``."""
    params: int | None
    """The module's :attr:`ModuleInfo.params` (``None``: unknown)."""
    self_params: int
    self_ops: int | float | None
    """Operations of this call's own work (children excluded); ``None`` = unknown."""
    self_macs: int | float | None
    """Multiply-accumulates of this call's own matmul/conv-type work; ``None`` = unknown."""
    ops_source: OpsSource
    ops: int | float | None
    """``self_ops`` plus the ops of every child call: unknown parts count as 0 (a lower bound,
    ``complete`` False); ``None`` when no part is known (an unknown call without counted
    children) and in a pass that counted nothing (timing, memory)."""
    macs: int | float | None
    complete: bool
    """Whether this call and every call inside it have known ops and MACs (False: ``ops``,
    ``macs`` and so ``flops`` may be lower bounds)."""
    self_backward_ops: int | float | None = None
    """Ops of the backward work that autograd did for this call's own forward operators
    (``profile(..., backward=True)``; ``None`` when backward was not run)."""
    self_backward_macs: int | float | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    """Columns that other listeners wrote for this call (memory, timing, your own listener's),
    by column name (:mod:`moduleprofiler.export.columns` says how each one renders)."""

    @classmethod
    def uncounted(cls, position: CallPosition, params: int | None, self_params: int, *,
                  output_bytes: int | None = None,
                  metrics: dict[str, Any] | None = None) -> CallRecord:
        """The record of a call in a pass that counted nothing (timing, memory): its place,
        its module's parameters, ``metrics``; no shapes, ``self_ops`` and ``ops``
        unknown (``None``, never 0: nothing was counted)."""
        return cls(
            position.index, position.parent, position.depth, position.path,
            position.type_name, position.call_number, input_shapes=None, input_dtypes=(),
            output_shapes=None, output_dtypes=(),
            output_bytes=output_bytes,  # type: ignore[arg-type]  # not measured: None
            input_size=None, output_size=None, params=params, self_params=self_params,
            self_ops=None, self_macs=None, ops_source="unknown", ops=None, macs=None,
            complete=False,
            metrics={} if metrics is None else metrics)


def filling_class(cls: type[_T]) -> type[_T]:
    """A subclass of the frozen, slotted dataclass ``cls`` that takes plain attribute stores
    and adds no slots, so that its instances have ``cls``'s memory layout: one is filled field
    by field, then made a ``cls`` by ``__class__`` assignment, the same record the constructor
    builds. Why: a frozen dataclass's ``__init__`` stores each field through
    ``object.__setattr__``, about 1,400 instructions a field (5 M per ResNet-50 profile, whose
    183 records and 151 module facts hold 27 and 12 fields); a plain store into a slot costs
    a few dozen. Both ``__setattr__`` and ``__delattr__`` are ``object``'s own so that
    Python gives the class its plain attribute store (either one left to the dataclass keeps
    the slow generic one)."""
    return type(f"_Filling{cls.__name__}", (cls,), {
        "__slots__": (), "__setattr__": object.__setattr__,
        "__delattr__": object.__delattr__, "__module__": cls.__module__})


_FILLING_MODULE_INFO: Any = filling_class(ModuleInfo)
_new = object.__new__


def new_module_info(path: str, type_name: str, depth: int, params: int | None,
                    self_params: int, trainable_params: int, buffers: int,
                    is_leaf: bool, param_bytes: int | None,
                    buffer_bytes: int, shared_with: str | None, container: bool,
                    shared_tensors: tuple[SharedTensor, ...], /) -> ModuleInfo:
    """``ModuleInfo(...)`` with every field given in order, at a fifth of its constructor's
    cost (:func:`filling_class`): the module scan makes one per module on every pass."""
    info = _new(_FILLING_MODULE_INFO)
    info.path = path
    info.type_name = type_name
    info.depth = depth
    info.params = params
    info.self_params = self_params
    info.trainable_params = trainable_params
    info.buffers = buffers
    info.is_leaf = is_leaf
    info.param_bytes = param_bytes
    info.buffer_bytes = buffer_bytes
    info.shared_with = shared_with
    info.container = container
    info.shared_tensors = shared_tensors
    info.__class__ = ModuleInfo
    return info  # type: ignore[no-any-return]


@dataclass(frozen=True)
class ProfileData:
    """The result of one profiled pass: per-call records plus the model's modules, with
    their totals. Data only: :class:`moduleprofiler.Profile` adds the views."""

    records: tuple[CallRecord, ...]
    modules: tuple[ModuleInfo, ...]
    excluded: tuple[str, ...] = ()
    """Paths of modules excluded from ops counting (``exclude_from_ops``)."""
    total_params: int | None = 0
    """``sum(p.numel())`` over the model's distinct parameters (tied weights once), with the
    weights packed in objects its modules hold (a quantized model's); a lower bound where some
    of those cannot be read (:attr:`unknown_params`), ``None`` where nothing else is known."""
    total_buffers: int = 0
    unsupported_ops: dict[str, int] = field(default_factory=dict)
    """Operators that ran but have no operator formula, with their call counts."""
    outside_ops: int | float = 0
    """Ops of operators that ran outside every module call (e.g. in a ``pred_fn``)."""
    outside_macs: int | float = 0
    backward: bool = False
    """Whether a backward pass was profiled (``profile(..., backward=True)``)."""
    backward_unsupported_ops: dict[str, int] = field(default_factory=dict)
    """Backward operators without a formula, with their call counts."""
    backward_outside_ops: int | float = 0
    """Backward ops not created by any module call (the loss, gradient accumulation)."""
    backward_outside_macs: int | float = 0
    formula_fallbacks: tuple[str, ...] = ()
    """Modules whose formula, inherited from a base class, failed on their real inputs or
    output: they were counted by their operators instead (one line each, saying why)."""
    unhooked: tuple[str, ...] = ()
    """Paths of TorchScript submodules that cannot carry Python hooks: their work is counted
    in their nearest hooked ancestor's call."""
    rank: int | None = None
    """This process's rank in the default ``torch.distributed`` process group (``None``
    outside a distributed program); its counts are the work of this rank alone."""
    world_size: int | None = None
    """The number of ranks of that group (``None`` outside a distributed program)."""
    module_metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Your own per-module columns, attached with ``Profile.with_metrics`` (module path ->
    column -> value); every module view shows them. A pass's own per-module values are not
    kept here: the module views compute them from its call records (the one exception: a
    kernel-clock timing's model row ``time_bound``, the hook-free regime no call measured)."""
    facts: TimingFacts | None = None
    """What a timing pass found about its run (clock, device, calibration, kept and dropped
    iterations...); ``None`` for a pass that timed nothing."""
    _by_path: dict[str, ModuleInfo] = field(default_factory=dict, repr=False, compare=False)
    _frames: dict[Any, Any] = field(default_factory=dict, init=False, repr=False,
                                    compare=False)
    """The views' frames built from this profile so far (:mod:`moduleprofiler.export.frame`):
    a report builds the module frame several times, and the data never changes."""

    # equal by value, field by field, and holding dicts: no hash, said by the result's own
    # type ("unhashable type: 'Profile'"), not by one of its fields' ('dict')
    __hash__ = None  # type: ignore[assignment]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.__hash__ = None  # type: ignore[assignment]  # a @dataclass would add a field hash

    def __post_init__(self) -> None:
        self._by_path.update({info.path: info for info in self.modules})

    # -- lookups ---------------------------------------------------------------------------
    def __iter__(self) -> Iterator[CallRecord]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def _path(self, path: str) -> str:
        """``path`` as the records hold it: a ``named_modules()`` path, else an output name
        (:func:`module_path`: the root's name :data:`ROOT_NAME` is its ``""``, unless a module
        really has that path).

        Raises:
            TypeError: ``path`` is not a string (``module(1)``: a position is no path).
        """
        if not isinstance(path, str):
            raise TypeError(f"path must be a module path string such as 'layer1.0' (the root "
                            f"'' or {ROOT_NAME!r}), got {type(path).__name__} {path!r:.40}")
        return path if path in self._by_path else module_path(path)

    def module(self, path: str) -> ModuleInfo:
        """Static information on the module at ``path`` (its ``named_modules()`` path, the
        root ``""``, also called ``"__root__"`` as in every output).

        Raises:
            KeyError: no module has that path (the message names the nearest paths).
            TypeError: ``path`` is not a string.
        """
        info = self._by_path.get(self._path(path))
        if info is None:
            near = difflib.get_close_matches(str(path), list(self._by_path), n=3)
            nearest = f"; nearest: {', '.join(map(repr, near))}" if near else ""
            raise KeyError(f"no module {path!r} in this profile (paths are named_modules() "
                           f"paths, the root '' or {ROOT_NAME!r}{nearest})")
        return info

    def calls(self, path: str) -> tuple[CallRecord, ...]:
        """Every call record of the module at ``path``, in execution order (``()`` for a
        module that was never called); the root is ``""`` or ``"__root__"``.

        Raises:
            KeyError: no module has that path, as :meth:`module`.
        """
        path = self._path(path)
        found = tuple(record for record in self.records if record.path == path)
        if not found:
            self.module(path)  # a path of no module is a typo, not a module never called
        return found

    def calls_by_module(self) -> dict[str, list[CallRecord]]:
        """Call records grouped by module path, every module present (``[]`` if uncalled)."""
        grouped: dict[str, list[CallRecord]] = {info.path: [] for info in self.modules}
        for record in self.records:
            grouped.setdefault(record.path, []).append(record)
        return grouped

    @property
    def roots(self) -> tuple[CallRecord, ...]:
        """The outermost calls (normally the single call of the root module)."""
        return tuple(record for record in self.records if record.parent is None)

    @property
    def pass_notes(self) -> tuple[str, ...]:
        """What the pass that made this profile says under every table of it, beside the
        counting notes (a prediction: what it rests on and where it is a bound)."""
        return ()

    @property
    def model_input(self) -> tuple[Any, tuple[str, ...]] | None:
        """The shape tree and dtypes of the model's arguments in this pass (its first root
        call's ``input_shapes`` and ``input_dtypes``: a counting pass records them per call, a
        timing pass in its :attr:`facts`, a memory report beside its peaks); ``None`` where
        the pass does not know them (a ``pred_fn`` gave the model its arguments, a document
        written before they were kept). ``Profile.merge`` refuses passes of other inputs."""
        if self.facts is not None and self.facts.input_shapes is not None:
            return self.facts.input_shapes, self.facts.input_dtypes
        for record in self.records:
            if record.parent is None and record.input_shapes is not None:
                return record.input_shapes, record.input_dtypes
        return None

    @property
    def counted(self) -> bool:
        """Whether this pass counted ops (``profile()``), rather than only timing or measuring
        memory: a counting pass records every call's shapes, also when none of its ops are
        known. Without it, the count totals are unknown, not 0 (also for a timing pass that
        recorded no call)."""
        return (not self.records and self.facts is None) or any(
            record.input_shapes is not None or record.self_ops is not None
            for record in self.records)

    # -- totals ----------------------------------------------------------------------------
    # Each total says whether it is exact: ``ops_complete``, ``macs_complete`` and
    # ``backward_complete``; ``lower_bounds`` names the totals that are only lower bounds.
    @property
    def total_ops(self) -> int | float | None:
        """Sum of every call's own ops (a lower bound when ``ops_complete`` is False);
        ``None`` for a pass that counted nothing (a timing, a memory pass: :attr:`counted`)."""
        if not self.counted:
            return None
        own = sum(record.self_ops for record in self.records if record.self_ops is not None)
        return own + self.outside_ops

    @property
    def total_macs(self) -> int | float | None:
        """Sum of every call's own multiply-accumulates (a lower bound when ``macs_complete`` is
        False: a call whose ops are known but whose MACs are not, e.g. a type registered with
        an ops formula only, adds nothing here); ``None`` for a pass that counted nothing."""
        if not self.counted:
            return None
        own = sum(record.self_macs for record in self.records
                  if record.self_macs is not None)
        return own + self.outside_macs

    @property
    def total_flops(self) -> int | float | None:
        """``2 * total_macs``: the number ``torch.utils.flop_counter.FlopCounterMode`` reports
        (a lower bound when ``macs_complete`` is False); ``None`` for a pass that counted
        nothing."""
        macs = self.total_macs
        return None if macs is None else 2 * macs

    @property
    def total_backward_ops(self) -> int | float | None:
        """Ops of the profiled backward pass (``None`` when backward was not run; a lower bound
        when ``backward_complete`` is False)."""
        if not self.backward:
            return None
        own = sum(record.self_backward_ops or 0 for record in self.records)
        return own + self.backward_outside_ops

    @property
    def total_backward_macs(self) -> int | float | None:
        """Multiply-accumulates of the profiled backward pass (``None`` when backward was not
        run; a lower bound when ``backward_complete`` is False)."""
        if not self.backward:
            return None
        own = sum(record.self_backward_macs or 0 for record in self.records)
        return own + self.backward_outside_macs

    @property
    def ops_complete(self) -> bool:
        """True when ``total_ops`` is exact: every called module's own ops are known (counted
        or deliberately excluded) and every operator that ran has a formula."""
        return not self.unsupported_ops and all(
            record.ops_source in _COUNTED for record in self.records)

    @property
    def macs_complete(self) -> bool:
        """True when ``total_macs`` (and ``total_flops``) is exact: the ops are complete and
        every call that was counted has known MACs."""
        return self.ops_complete and all(
            record.self_macs is not None or record.ops_source == "excluded"
            for record in self.records)

    @property
    def backward_complete(self) -> bool | None:
        """True when the backward totals are exact (every backward operator has a formula);
        ``None`` when no backward pass was profiled."""
        if not self.backward:
            return None
        return not self.backward_unsupported_ops

    @property
    def unknown_params(self) -> tuple[str, ...]:
        """Paths of the modules holding packed weights that cannot be read (an object of a
        kind :mod:`moduleprofiler.packed` does not know): the deepest modules whose ``params``
        is ``None``. The ``params`` of every module above them, ``total_params`` included,
        count only the known part (lower bounds)."""
        unknown = {info.path for info in self.modules if info.params is None}
        holding = {info.parent for info in self.modules if info.path in unknown}
        return tuple(path for path in unknown if path not in holding)

    @property
    def params_complete(self) -> bool:
        """True when ``total_params`` is exact: every packed weight could be read."""
        return all(info.params is not None for info in self.modules)

    @property
    def lower_bounds(self) -> tuple[str, ...]:
        """The totals that are lower bounds, by quantity: a subset of ``("ops", "macs",
        "flops", "backward", "params")`` (empty when :attr:`complete`). ``flops``
        (``2 * macs``) is named wherever ``macs`` is, as ``to_dict()["totals"]`` holds both: a
        script that looks up a total by its key finds whether it is a lower bound under the
        same name."""
        flags = (("ops", self.ops_complete), ("macs", self.macs_complete),
                 ("flops", self.macs_complete), ("backward", self.backward_complete is not False),
                 ("params", self.params_complete))
        return tuple(name for name, exact in flags if not exact)

    @property
    def complete(self) -> bool:
        """True when every total is exact: ``ops_complete`` and ``macs_complete``,
        ``backward_complete`` when a backward was profiled, and ``params_complete``. When
        False, :attr:`lower_bounds` says which totals are lower bounds."""
        return not self.lower_bounds

    @property
    def unsupported(self) -> tuple[str, ...]:
        """Paths of called modules whose own ops are unknown or only partly known."""
        return tuple(
            dict.fromkeys(r.path for r in self.records if r.ops_source not in _COUNTED)
        )

    @property
    def unsupported_types(self) -> tuple[str, ...]:
        """Type names of the modules listed in :attr:`unsupported`."""
        return tuple(
            dict.fromkeys(r.type_name for r in self.records if r.ops_source not in _COUNTED)
        )

    def statuses(self) -> dict[str, ModuleStatus]:
        """Every module's :data:`ModuleStatus` by path (:func:`module_statuses`)."""
        return module_statuses(self.modules, {record.path for record in self.records},
                               set(self.unhooked))

    @property
    def uncalled(self) -> tuple[str, ...]:
        """Paths of modules not called during the pass: whose ``forward`` never ran (whatever
        their children did: a child called through another method of its parent ran without
        it), or ran without the module's hooks (``module.forward(x)``, a class that replaces
        ``__call__``; its work is then in its caller's own count).
        A grouping whose children ran (GPT-2's ``transformer.h``, a ``ModuleList``) is in
        :attr:`groupings` instead, a TorchScript submodule (no hooks) in :attr:`unhooked`."""
        return tuple(path for path, status in self.statuses().items() if status == UNCALLED)

    @property
    def groupings(self) -> tuple[str, ...]:
        """Paths of the modules that cannot be called (``ModuleList``, ``ModuleDict``: see
        :attr:`ModuleInfo.container`), and of a root run through ``pred_fn``, whose
        descendants ran."""
        return tuple(path for path, status in self.statuses().items() if status == GROUPING)

    def __repr__(self) -> str:
        # the result's own class: a memory report or a prediction says what it is
        return (
            f"{type(self).__name__}(calls={len(self.records)}, modules={len(self.modules)}, "
            f"total_params={self.total_params}, {self._total_repr('ops', self.total_ops)}, "
            f"{self._total_repr('macs', self.total_macs)}, complete={self.complete})"
        )

    def _total_repr(self, name: str, value: int | float | None) -> str:
        """``total_<name>=`` its value: ``None`` when the pass counted nothing (a timing or
        memory pass, whose count totals are unknown, not 0), ``>=`` before a lower bound."""
        if value is None:
            return f"total_{name}=None"
        return f"total_{name}{'>=' if name in self.lower_bounds else '='}{value}"


def unknown_work(profile: ProfileData) -> str:
    """Which of ``profile``'s totals are lower bounds and what had no formula, in one line
    (``"the ops, macs, flops totals are lower bounds: no formula for ..."``); for a complete
    profile, ``""``."""
    if profile.complete:
        return ""
    return (f"the {', '.join(profile.lower_bounds)} totals are lower bounds: "
            f"{without_formula(profile)}")


def without_formula(profile: ProfileData) -> str:
    """What had no formula in ``profile`` (``"no formula for modules [...]; operators
    {...}"``) and which modules hold packed weights that cannot be read, the causes
    :func:`unknown_work` names; ``""`` for a complete profile."""
    if profile.complete:
        return ""
    unknown_macs = list(dict.fromkeys(r.path for r in profile.records
                                      if r.self_ops is not None and r.self_macs is None))
    parts = [f"modules {list(profile.unsupported)}" if profile.unsupported else "",
             f"operators {profile.unsupported_ops}" if profile.unsupported_ops else "",
             f"macs of modules {unknown_macs}" if unknown_macs else "",
             f"backward operators {profile.backward_unsupported_ops}"
             if profile.backward_unsupported_ops else ""]
    found = "; ".join(part for part in parts if part)
    unread = profile.unknown_params
    packed = (f"packed weights that cannot be read in modules "
              f"{[display_path(path) for path in unread]}") if unread else ""
    return "; ".join(part for part in (f"no formula for {found}" if found else "", packed)
                     if part)
