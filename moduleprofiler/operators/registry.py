"""Operator formulas: aten operator -> ``(ops, macs)``, in the same convention as the module
formulas (``docs/conventions.md``).

An operator formula is a pure function ``(args, kwargs, out) -> (ops, macs)`` where ``args`` /
``kwargs`` are what the operator received and ``out`` what it returned (tensors may live on the
meta device: read shapes, never data). Keys are ``OpOverloadPacket`` (``torch.ops.aten.mm``: every
overload) or ``OpOverload`` (``torch.ops.aten.add.Tensor``: one overload; wins over its packet).
Custom operators made with ``torch.library`` register the same way.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

import torch
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_flatten, tree_map

from moduleprofiler.dispatch import OperatorObserver
from moduleprofiler.errors import FormulaError, RegistryError
from moduleprofiler.records import display_path
from moduleprofiler.registry import LiveFormulaMap, live_map
from moduleprofiler.shards import on_local_shards
from moduleprofiler.validate import operator_counts, operator_pair

OperatorCount = tuple[int, int]
"""``(ops, macs)`` of one operator call."""
OperatorFormula = Callable[[tuple[Any, ...], dict[str, Any], Any], OperatorCount]
OperatorKey = torch._ops.OpOverloadPacket | torch._ops.OpOverload

F = TypeVar("F", bound=Callable[..., Any])

OPERATOR_FORMULAS: dict[OperatorKey, OperatorFormula] = {}
FREE_OPERATORS: set[OperatorKey] = set()
"""Operators known to cost 0 (views, reshapes, copies, allocation, metadata)."""

_BUILT_IN: dict[OperatorKey, OperatorFormula | None] = {}
"""The package's own entries (formula, ``None`` for a free operator), once its families are
registered (:func:`built_ins_registered`; a family loaded later adds its own): what the direct
formula of a composite (``linear``) was written to equal the parts of."""

_LOADING = False
"""A family loader is registering the package's own formulas (no user change)."""

_CHANGED: set[OperatorKey] = set()
"""The keys whose entry differs from the package's own since it registered them (through the
functions below): a formula registered, replaced or removed by the user."""


def _changed(key: OperatorKey) -> None:
    """Note whether ``key``'s entry now differs from the built-in one."""
    if not _BUILT_IN or _LOADING:
        return
    if key in OPERATOR_FORMULAS:
        current: object = OPERATOR_FORMULAS[key]
    elif key in FREE_OPERATORS:
        current = None
    else:
        current = _MISSING
    if (key in _BUILT_IN and _BUILT_IN[key] is current) or (
            key not in _BUILT_IN and current is _MISSING):
        _CHANGED.discard(key)
    else:
        _CHANGED.add(key)


def built_ins_registered() -> None:
    """Called once every family of the package is registered: later changes are the user's."""
    _BUILT_IN.update(OPERATOR_FORMULAS)
    _BUILT_IN.update(dict.fromkeys(FREE_OPERATORS))


def is_built_in(key: OperatorKey, formula: object) -> bool:
    """Whether ``formula`` is the package's own entry for ``key``."""
    return key in _BUILT_IN and _BUILT_IN[key] is formula


def _check_key(key: object) -> OperatorKey:
    if isinstance(key, (torch._ops.OpOverloadPacket, torch._ops.OpOverload)):
        return key
    raise RegistryError(
        f"operator keys are torch.ops.<namespace>.<op> or one of its overloads, got {key!r}"
    )


def register_operator(*keys: OperatorKey) -> Callable[[F], F]:
    """Register an operator formula ``(args, kwargs, out) -> (ops, macs)`` for operators.

    Example:
        >>> import torch
        >>> @register_operator(torch.ops.aten.special_chebyshev_polynomial_t)
        ... def chebyshev_ops(args, kwargs, out):
        ...     return out.numel() * 20, 0  # say 20 ops per element
        >>> unregister_operator(torch.ops.aten.special_chebyshev_polynomial_t)
    """
    if not keys:
        raise RegistryError("register_operator needs at least one operator")
    checked = [_check_key(key) for key in keys]

    def decorator(fn: F) -> F:
        if not callable(fn):
            raise TypeError(f"register_operator decorates a function (args, kwargs, out) -> "
                            f"(ops, macs), got {type(fn).__name__}")
        for key in checked:
            if key in OPERATOR_FORMULAS or key in FREE_OPERATORS:
                raise RegistryError(f"operator {key} already has a formula; unregister it first")
            _refuse_shadowed(key)
        for key in checked:
            OPERATOR_FORMULAS[key] = fn
            _index(key)
            _changed(key)
        return fn

    return decorator


def register_free(*keys: OperatorKey) -> None:
    """Declare operators that cost 0 ops (views, copies, allocations)."""
    for key in map(_check_key, keys):
        if key in OPERATOR_FORMULAS:
            raise RegistryError(f"operator {key} already has a formula")
        _refuse_shadowed(key)
        FREE_OPERATORS.add(key)
        _index(key)
        _changed(key)


_OVERLOADS_OF: dict[OperatorKey, set[OperatorKey]] = {}
"""Packet -> its overloads registered on their own (formula or free)."""


def _index(key: OperatorKey) -> None:
    if isinstance(key, torch._ops.OpOverload):
        _OVERLOADS_OF.setdefault(key.overloadpacket, set()).add(key)


def _refuse_shadowed(key: OperatorKey) -> None:
    """Refuse a packet some of whose overloads have a formula (or are free) of their own: an
    overload's entry wins over its packet's, so the packet's would never count for them."""
    shadowing = _OVERLOADS_OF.get(key)
    if shadowing:
        raise RegistryError(
            f"operator {key}: its overloads {', '.join(sorted(map(str, shadowing)))} already "
            "have formulas of their own, which win over the packet's; unregister them first, "
            "or register the overloads")


def unregister_operator(*keys: OperatorKey) -> None:
    """Remove operator formulas (or free declarations); a key without one of its own raises
    ``KeyError`` (naming its overloads that have theirs) and nothing is removed."""
    for key in keys:
        if key not in OPERATOR_FORMULAS and key not in FREE_OPERATORS:
            overloads = _OVERLOADS_OF.get(key)
            held = "" if not overloads else (
                f"; its overloads {', '.join(sorted(map(str, overloads)))} have their own")
            raise KeyError(f"no operator formula is registered for {key}{held}")
    for key in keys:
        if key in OPERATOR_FORMULAS:
            del OPERATOR_FORMULAS[key]
        else:
            FREE_OPERATORS.remove(key)
        if isinstance(key, torch._ops.OpOverload):
            _OVERLOADS_OF.get(key.overloadpacket, set()).discard(key)
        _changed(key)


_MISSING = object()

TABLE_BOUND = "for_table"
"""Name of the optional attribute of an operator formula that counts other operators' work with
their formulas (a composite operator counted as its decomposition): ``for_table(table) ->
formula``, the same formula counting with the operator table ``table`` (``None``: the live
registry). Each pass asks it once, with the table it counts with (:class:`PassFormulas`), so a
profiler's own entries for the parts count inside the composite too."""

_FAMILY_LOADERS: list[Callable[[], bool]] = []


def register_family_loader(loader: Callable[[], bool]) -> None:
    """Register an optional library's operator formulas once the library is loaded.

    ``loader()`` registers them and returns True when it can (the library's operators exist),
    else False. It is tried now, then again by :func:`load_families` until it succeeds, so that
    moduleprofiler never imports an optional library itself (torchvision takes seconds).
    """
    if not _load(loader):
        _FAMILY_LOADERS.append(loader)


_LATE_KEYS: set[OperatorKey] = set()
"""Operators registered by family loaders after import: a table made before its library was
loaded looks them up in the registry."""


def _load(loader: Callable[[], bool]) -> bool:
    global _LOADING
    before = OPERATOR_FORMULAS.keys() | FREE_OPERATORS
    _LOADING = True
    try:
        if not loader():
            return False
    finally:
        _LOADING = False
    added = (OPERATOR_FORMULAS.keys() | FREE_OPERATORS) - before
    _LATE_KEYS.update(added)
    if _BUILT_IN:  # a family loaded after the package's: its formulas are built in too
        _BUILT_IN.update({key: OPERATOR_FORMULAS.get(key) for key in added})
    return True


def load_families() -> bool:
    """Try again the loaders still waiting for their library (:func:`register_family_loader`);
    True when one of them registered its formulas now."""
    waiting = len(_FAMILY_LOADERS)
    _FAMILY_LOADERS[:] = [loader for loader in _FAMILY_LOADERS if not _load(loader)]
    return len(_FAMILY_LOADERS) < waiting


def packet_of(func: Any) -> Any:
    """``func``'s overload packet (``aten.add`` for ``aten.add.Tensor``); a higher-order
    operator (``torch.cond``'s ``cond``) is its own."""
    return getattr(func, "overloadpacket", func)


def operator_name(func: Any) -> str:
    """How an operator is named in the lists of operators without a formula."""
    packet = getattr(func, "overloadpacket", None)
    return str(packet) if packet is not None else f"higher_order.{func.name()}"


def lookup(func: torch._ops.OpOverload) -> OperatorFormula | object | None:
    """The formula for ``func``: its overload's, else its packet's; ``None`` when the operator
    is free; ``_MISSING`` (see :data:`MISSING`) when nothing is known about it."""
    for key in (func, packet_of(func)):
        formula = OPERATOR_FORMULAS.get(key)
        if formula is not None:
            return formula
        if key in FREE_OPERATORS:
            return None
    if _FAMILY_LOADERS and load_families():  # an optional library loaded since
        return lookup(func)
    return _MISSING


MISSING = _MISSING

OperatorMap = Mapping[OperatorKey, "OperatorFormula | None"]
"""An operator table: aten operator (overload or packet) -> formula, ``None`` for a free one."""


def get_default_operator_map() -> dict[OperatorKey, OperatorFormula | None]:
    """A fresh copy of the registered operator formulas (free operators map to ``None``), for
    one :class:`~moduleprofiler.ModuleProfiler` to own and extend without touching others."""
    load_families()
    table: dict[OperatorKey, OperatorFormula | None] = dict.fromkeys(FREE_OPERATORS)
    table.update(OPERATOR_FORMULAS)
    return table


class _FreeOperators(Mapping[OperatorKey, None]):
    """:data:`FREE_OPERATORS`, live, as a table mapping each to ``None`` (free)."""

    def __getitem__(self, key: OperatorKey) -> None:
        if key not in FREE_OPERATORS:
            raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return key in FREE_OPERATORS

    def __iter__(self) -> Iterator[OperatorKey]:
        return iter(list(FREE_OPERATORS))

    def __len__(self) -> int:
        return len(FREE_OPERATORS)


def live_operator_map(own: OperatorMap | None = None) -> LiveFormulaMap:
    """A profiler's operator map: ``own`` entries over the live operator registry (formulas
    and free operators), so an operator registered after the profiler was made is counted."""
    load_families()
    return live_map(own, MappingProxyType(OPERATOR_FORMULAS), _FreeOperators(),
                    factory=live_operator_map)


def lookup_in(table: OperatorMap, func: torch._ops.OpOverload) -> OperatorFormula | object | None:
    """:func:`lookup` in ``table``: the overload's entry, else its packet's; ``None`` when the
    operator is free; :data:`MISSING` when the table does not know it. In a profiler's map
    (:class:`~moduleprofiler.registry.LiveFormulaMap`) its own entries come first: its entry
    for a packet wins over a formula registered for one of the packet's overloads."""
    keys = (func, packet_of(func))
    if isinstance(table, LiveFormulaMap) and table.own:
        own = table.own
        for key in keys:
            if key in own:
                return own[key]  # type: ignore[no-any-return]
    for key in keys:
        if key in table:
            return table[key]
    loaded = bool(_FAMILY_LOADERS) and load_families()
    if isinstance(table, LiveFormulaMap):
        # the registry is live under it: a family loaded now is in it, and an operator the
        # table's owner removed on purpose stays missing
        return lookup_in(table, func) if loaded else _MISSING
    if func in _LATE_KEYS or packet_of(func) in _LATE_KEYS:
        # an optional library loaded after the table was made; an operator the table's owner
        # removed on purpose stays missing
        return lookup(func)
    return _MISSING


class PassFormulas:
    """The one way an operator formula is applied: one pass's lookups in ``table`` (each
    operator looked up once; ``None``: the live registry), each formula's result checked, and
    the operators that ran without a formula, by name with their counts (:attr:`missing`).

    A formula that counts through other formulas (:data:`TABLE_BOUND`: a composite counted
    by decomposition) is bound to ``table`` when it is looked up. So is a composite operator
    with a built-in direct formula (``linear``, ``matmul``, ``conv2d``, ``softmax``: it arrives
    whole under ``inference_mode``, its parts elsewhere) when ``table`` prices some operator
    otherwise than the built-in formulas (:func:`changed_keys`): a call whose decomposition
    reaches such an operator is counted as its parts with ``table``'s formulas
    (:func:`decomposed_formula`), as its parts are counted outside ``inference_mode``; an
    entry for the composite itself is used as it is. What ``table`` changes is asked once,
    here: a table without such entries pays nothing per operator. ``wrap`` adapts every
    formula found (counting on a rank's local shards); ``missing`` is the dict to record into
    (new by default)."""

    __slots__ = ("_changed", "_found", "_table", "_wrap", "missing")

    def __init__(self, table: OperatorMap | None,
                 wrap: Callable[[OperatorFormula], OperatorFormula] | None = None,
                 missing: dict[str, int] | None = None) -> None:
        self._table = table
        self._wrap = wrap
        self._found: dict[Any, Any] = {}
        self._changed = changed_keys(table)
        """What ``table`` prices otherwise than the built-in formulas: where a composite with
        a direct formula reaches one of these, it is counted as its parts (see the class)."""
        self.missing: dict[str, int] = {} if missing is None else missing

    def formula(self, func: torch._ops.OpOverload) -> Any:
        """``func``'s formula, ``None`` when it is free, :data:`MISSING` (counted in
        :attr:`missing`) when there is none."""
        found = self._found.get(func, _NOT_LOOKED_UP)
        if found is _NOT_LOOKED_UP:
            found = lookup(func) if self._table is None else lookup_in(self._table, func)
            if found is not None and found is not _MISSING:
                bind = getattr(found, TABLE_BOUND, None)
                if bind is not None:  # it counts through formulas: those of this pass's table
                    found = bind(self._table)
                elif self._changed and is_composite(func) and (
                        is_built_in(func, found) or is_built_in(func.overloadpacket, found)):
                    # the built-in direct formula equals the built-in formulas of the parts,
                    # not this table's: where its parts reach a changed one, count the parts
                    # with this table's
                    found = decomposed_formula(func, self._table, same_device=True,
                                               direct=found,  # type: ignore[arg-type]
                                               changed=self._changed)
                if self._wrap is not None:
                    found = self._wrap(found)  # type: ignore[arg-type]
            self._found[func] = found
        if found is _MISSING:
            name = operator_name(func)
            self.missing[name] = self.missing.get(name, 0) + 1
        return found

    def count(self, func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any],
              out: Any, call: Any = None, backward: bool = False) -> Any:
        """``(ops, macs)`` of one operator call, two non-negative ints; ``None`` when the
        operator is free; :data:`MISSING` when it has no formula, or its formula returned
        :data:`MISSING` (this call's arguments do not say). ``call`` (the module call it
        ran in, ``None``: outside every call) and ``backward`` name it in a
        :class:`~moduleprofiler.errors.FormulaError` when the formula raises or returns
        something that is not a count."""
        formula = self.formula(func)
        if formula is None or formula is _MISSING:
            return formula
        try:
            counted = formula(args, kwargs, out)
            if counted is _MISSING:  # the formula cannot tell from this call's arguments
                name = operator_name(func)
                self.missing[name] = self.missing.get(name, 0) + 1
                return _MISSING
        except FormulaError:
            raise
        except Exception as exc:
            where = "outside every module call" if call is None else (
                f"in module {display_path(call.path)!r} ({type(call.module).__name__})")
            raise FormulaError(
                f"{'backward ' if backward else ''}operator formula for {func} {where} raised "
                f"{type(exc).__name__}: {exc}", None if call is None else call.path) from exc
        if type(counted) is tuple and len(counted) == 2:
            ops, macs = counted
        else:  # a formula's own value, not an error of its arguments: say what it returned
            ops, macs = operator_pair(counted, func, call, backward)
        if not (type(ops) is int and type(macs) is int and ops >= 0 and macs >= 0):
            ops, macs = operator_counts(ops, macs, func, call, backward)
        return ops, macs


def pass_formulas(table: OperatorMap, dtensor: type | None, missing: dict[str, int]
                  ) -> PassFormulas:
    """The operator formulas of ``table`` for one pass, recording missing operators in
    ``missing``; with ``dtensor`` (the model holds DTensors:
    :func:`~moduleprofiler.shards.sharded_by`) they count on this rank's local shards (a model
    without them pays nothing)."""
    if dtensor is None:
        return PassFormulas(table, missing=missing)
    return PassFormulas(table, lambda formula: on_local_shards(formula, dtensor), missing)


_NOT_LOOKED_UP = object()


# -- composites and their parts ------------------------------------------------------------------

def is_composite(func: Any) -> bool:
    """Whether torch takes ``func`` apart before a dispatch mode sees it, outside
    ``inference_mode`` (it has a CompositeImplicitAutograd kernel): there the mode sees its
    parts, under ``inference_mode`` the operator itself."""
    try:
        return bool(torch._C._dispatch_has_kernel_for_dispatch_key(
            func.name(), "CompositeImplicitAutograd"))
    except (AttributeError, RuntimeError, TypeError):  # no such aten overload (a TorchScript
        return False  # one, a higher-order operator): never taken apart


def _registered(key: Any) -> Any:
    """The registry's entry for ``key``: its formula, ``None`` when it is free, else
    :data:`MISSING`."""
    formula = OPERATOR_FORMULAS.get(key)
    if formula is not None:
        return formula
    return None if key in FREE_OPERATORS else _MISSING


def changed_keys(table: OperatorMap | None) -> frozenset[Any]:
    """The operators ``table`` prices otherwise than the built-in formulas: its own entries
    that are not the registered ones, the registered operators it removed, and those
    registered or removed in the registry itself since the package's own
    (``register_operator(aten.addmm)``). A profiler's map answers from its own entries (the
    rest is the live registry); another mapping is compared entry by entry, once per pass."""
    changed = set(_CHANGED)
    if isinstance(table, LiveFormulaMap):
        changed.update(table.hidden_keys)
        changed.update(key for key, value in table.own.items() if value is not _registered(key))
    elif table is not None:
        changed.update(key for key, value in table.items() if value is not _registered(key))
        changed.update(key for key in (*OPERATOR_FORMULAS, *FREE_OPERATORS) if key not in table)
    return frozenset(changed)


def _reaches(funcs: Iterable[Any], keys: frozenset[Any]) -> bool:
    """Whether one of the operators ``funcs`` is, or is an overload of, one of ``keys``."""
    return any(func in keys or getattr(func, "overloadpacket", None) in keys
               for func in funcs)


class OperatorCounter(OperatorObserver):
    """Adds up the operator formulas of every aten operator it sees, applied as a pass applies
    them (:meth:`PassFormulas.count`; used by tests and by :func:`decomposition_count`), with
    the live registered formulas (default) or ``table``. Every call is tallied in ``calls``;
    operators without a formula also in ``missing``."""

    def __init__(self, table: OperatorMap | None = None) -> None:
        super().__init__(self._count)
        self.ops = 0
        self.macs = 0
        self.missing: Counter[str] = Counter()
        self.calls: Counter[str] = Counter()
        self.seen: set[Any] = set()
        """Every operator seen (the overloads)."""
        self._formulas = PassFormulas(table, missing=self.missing)

    def _count(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
               ) -> None:
        self.calls[str(func)] += 1
        self.seen.add(func)
        counts = self._formulas.count(func, args, kwargs, out)
        if counts is not None and counts is not _MISSING:
            self.ops += counts[0]
            self.macs += counts[1]


def _to_meta(value: Any) -> Any:
    if isinstance(value, Tensor):
        return torch.empty_strided(
            value.shape, value.stride(), dtype=value.dtype, device="meta"
        )
    return value


def _identity(value: Any) -> Any:
    return value


_FAKE_MODES: list[FakeTensorMode] = []
"""The one fake-tensor mode of the process, made on first use (the first one takes seconds)."""


def _fake_mode() -> FakeTensorMode:
    if not _FAKE_MODES:
        _FAKE_MODES.append(FakeTensorMode())
    return _FAKE_MODES[0]


def _to_fake(value: Any) -> Any:
    """A fake tensor of ``value``'s shape, strides, dtype and device (made under the fake mode:
    it never holds data, and it is no inference tensor, so in-place parts run on it)."""
    if isinstance(value, Tensor):
        with _fake_mode():
            return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype,
                                       device=value.device)
    return value


def decomposition_count(op: torch._ops.OpOverload, args: tuple[Any, ...],
                        kwargs: dict[str, Any], table: OperatorMap | None = None
                        ) -> OperatorCount:
    """Sum of the operator formulas of ``op``'s CompositeImplicitAutograd decomposition, those
    of ``table`` (``None``: the live registry); :data:`MISSING` when one of its operators has
    no formula (the sum of the others would count that one's work as 0).

    Run on meta copies of the inputs (no data is touched); if the decomposition needs data
    (it reads a value), it is run again on the real inputs. It runs
    under ``no_grad`` outside ``inference_mode``, so that the composite operators inside it are
    taken apart too, as ``no_grad`` takes them apart: its parts are those the other path
    counts, each with its formula in ``table`` (a profiler's own ``mm`` formula counts in the
    ``matmul`` inside ``matrix_power``).
    """
    return _decompose(op, args, kwargs, table, False)[0]


def _decompose(op: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any],
               table: OperatorMap | None, same_device: bool
               ) -> tuple[OperatorCount, bool, set[Any]]:
    """:func:`decomposition_count`, whether it had to run on the real inputs, and the
    operators the decomposition ran; with ``same_device`` on fake tensors of the inputs'
    device instead of meta copies (no data either), for the operators whose decomposition
    depends on the device (``scaled_dot_product_attention`` takes the flash kernel on a CPU,
    its math reference on meta; ``lstm`` oneDNN's layer on a CPU)."""
    first = _to_fake if same_device else _to_meta
    with _disable_current_modes(), torch.inference_mode(False), torch.no_grad():
        for convert in (first, _identity):
            counter = OperatorCounter(table)
            try:
                converted = tree_map(convert, (args, kwargs))
                with (_fake_mode() if convert is _to_fake else contextlib.nullcontext()), \
                        counter:
                    _composite_kernel(op, *converted[0], **converted[1])
            except (RuntimeError, NotImplementedError):
                if convert is _identity:
                    raise
                continue
            counted = _MISSING if counter.missing else (counter.ops, counter.macs)
            return counted, convert is _identity, counter.seen  # type: ignore[return-value]
    return (0, 0), False, set()  # pragma: no cover (the loop always returns or raises)


def _composite_kernel(op: torch._ops.OpOverload, *args: Any, **kwargs: Any) -> Any:
    """Run ``op``'s C++ CompositeImplicitAutograd kernel, the one eager dispatch takes apart
    outside ``inference_mode``. Not ``op.decompose()``: that prefers a Python decomposition
    torch registers for compilers where there is one (``upsample_bilinear2d.vec`` into
    ``arange``, ``clamp`` and ``_unsafe_index``, 756 ops where eager runs one
    ``upsample_bilinear2d`` of 648), whose parts eager never runs."""
    key = torch._C.DispatchKey.CompositeImplicitAutograd
    if torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), key):
        return op._op_dk(key, *args, **kwargs)
    return op.decompose(*args, **kwargs)


_PLAIN = (type(None), bool, int, float, str, torch.dtype, torch.device, torch.layout,
          torch.memory_format)
"""Argument types a decomposition's count may be keyed by (with their type: ``1 == True``)."""


def _signature(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...] | None:
    """What a decomposition's count depends on, when the inputs' values do not enter it: the
    arguments' structure, each strided tensor's shape, strides, dtype and device, every other
    argument's type and value; ``None`` where an argument is something else (a sparse or
    subclassed tensor, an object)."""
    leaves, spec = tree_flatten((args, kwargs))
    key: list[Any] = [spec]
    for leaf in leaves:
        if type(leaf) is Tensor or type(leaf) is torch.nn.Parameter:
            if leaf.layout is not torch.strided:
                return None
            key.append((tuple(leaf.shape), leaf.stride(), leaf.dtype, leaf.device))
        elif type(leaf) in _PLAIN:
            key.append((type(leaf), leaf))
        else:
            return None
    return tuple(key)


def decomposed_formula(op: torch._ops.OpOverload, table: OperatorMap | None,
                       same_device: bool = False, direct: OperatorFormula | None = None,
                       changed: frozenset[Any] = frozenset()) -> OperatorFormula:
    """The formula of ``op`` as its decomposition counted with ``table``'s formulas
    (:func:`decomposition_count`).

    With ``same_device`` (one pass's formula for a composite with a built-in ``direct``
    formula) the decomposition runs once per call signature (:func:`_signature`: operator
    formulas read shapes, never values, and a pass calls ``linear`` with a few shapes many
    times; one that needed the inputs' values runs again each time), and its count is used only
    where its parts reach an operator of ``changed`` (those ``table`` prices otherwise than
    the built-in formulas); elsewhere ``direct`` prices the call, as with the built-in table:
    a decomposition run without data can take other branches than the eager kernel
    (``one_hot`` checks its classes with ``aminmax`` on data, with comparisons on fake
    tensors), so it is trusted only where it is needed."""
    counts: dict[tuple[Any, ...], OperatorCount | None] = {}

    def formula(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> OperatorCount:
        if not same_device:
            return decomposition_count(op, args, kwargs, table)
        key = _signature(args, kwargs)
        if key is not None and key in counts:
            counted = counts[key]
        else:
            counted, from_data, seen = _decompose(op, args, kwargs, table, same_device)
            if direct is not None and not _reaches(seen, changed):
                counted = None  # no part priced otherwise: the direct formula
            if key is not None and not from_data:
                counts[key] = counted
        if counted is None:
            assert direct is not None
            return direct(args, kwargs, out)
        return counted

    formula.__name__ = f"{op.overloadpacket.__name__}_by_decomposition"
    formula.__doc__ = f"Sum of the operator formulas of {op}'s decomposition."
    return formula
