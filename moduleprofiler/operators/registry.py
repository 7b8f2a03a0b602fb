"""Operator formulas: aten operator -> ``(ops, macs)``, in the same convention as the module
formulas (``docs/conventions.md``).

An operator formula is a pure function ``(args, kwargs, out) -> (ops, macs)`` where ``args`` /
``kwargs`` are what the operator received and ``out`` what it returned (tensors may live on the
meta device: read shapes, never data). Keys are ``OpOverloadPacket`` (``torch.ops.aten.mm``: every
overload) or ``OpOverload`` (``torch.ops.aten.add.Tensor``: one overload; wins over its packet).
Custom operators made with ``torch.library`` register the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, TypeVar

import torch

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
    before = OPERATOR_FORMULAS.keys() | FREE_OPERATORS
    if not loader():
        return False
    _LATE_KEYS.update((OPERATOR_FORMULAS.keys() | FREE_OPERATORS) - before)
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
    by decomposition) is bound to ``table`` when it is looked up. ``wrap`` adapts every
    formula found (counting on a rank's local shards); ``missing`` is the dict to record into
    (new by default)."""

    __slots__ = ("_found", "_table", "_wrap", "missing")

    def __init__(self, table: OperatorMap | None,
                 wrap: Callable[[OperatorFormula], OperatorFormula] | None = None,
                 missing: dict[str, int] | None = None) -> None:
        self._table = table
        self._wrap = wrap
        self._found: dict[Any, Any] = {}
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
