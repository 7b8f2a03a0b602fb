"""Shared machinery of the operator families: schema-bound arguments, registration helpers,
shape helpers, and counting a composite operator through its decomposition.

Operator formulas receive what the dispatcher passed: positional ``args`` and ``kwargs`` whose
split differs between call sites (``aten.add.Tensor`` takes ``alpha`` as a keyword,
``aten.add.Scalar`` positionally) and between overloads (``out=`` variants). :class:`Args` reads
an argument by its schema name whatever way it was passed, and falls back to the schema default.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import torch
from torch import Tensor

from moduleprofiler.formulas.pooling import expand
from moduleprofiler.operators.registry import (
    TABLE_BOUND,
    OperatorCount,
    OperatorFormula,
    OperatorMap,
    decomposed_formula,
    decomposition_count,
    register_free,
    register_operator,
)
from moduleprofiler.storage import sparse_parts

Count = OperatorCount
"""``(ops, macs)`` of one operator call."""
OpKey = torch._ops.OpOverloadPacket | torch._ops.OpOverload
BoundFormula = Callable[["Args", Any], Count]
"""A formula written against named arguments: ``(args, out) -> (ops, macs)``."""

Formula = TypeVar("Formula", bound=Callable[..., Count])

ZERO: Count = (0, 0)

UNAVAILABLE: list[str] = []
"""Operator names a family asked for that this torch build does not have (older releases)."""


# -- arguments by schema name ------------------------------------------------------------------

class _Spec:
    """Where each argument of an operator's overloads sits, and its default."""

    __slots__ = ("defaults", "positions")

    def __init__(self, positions: dict[str, int], defaults: dict[str, Any]) -> None:
        self.positions = positions
        self.defaults = defaults


def _takes_tensors(schema: torch._C.FunctionSchema) -> bool:
    """False for TorchScript's scalar/list overloads (``aten.add.int``), which never dispatch."""
    return any("Tensor" in str(arg.type) for arg in schema.arguments)


def _spec_of(overloads: Iterable[torch._ops.OpOverload]) -> _Spec | None:
    """One spec valid for all ``overloads``, or ``None`` when their positions disagree."""
    positions: dict[str, int] = {}
    owner: dict[int, str] = {}
    defaults: dict[str, Any] = {}
    for overload in overloads:
        for index, arg in enumerate(overload._schema.arguments):
            if arg.has_default_value():
                defaults.setdefault(arg.name, arg.default_value)
            if arg.kwarg_only:
                continue
            if positions.setdefault(arg.name, index) != index:
                return None
            if owner.setdefault(index, arg.name) != arg.name:
                return None
    return _Spec(positions, defaults)


class Args:
    """The arguments of one operator call, read by schema name."""

    __slots__ = ("_args", "_kwargs", "_spec")

    def __init__(self, spec: _Spec, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._spec = spec
        self._args = args
        self._kwargs = kwargs

    def get(self, name: str, default: Any = None) -> Any:
        """The argument ``name``: passed by keyword, by position, else its schema default."""
        if name in self._kwargs:
            return self._kwargs[name]
        position = self._spec.positions.get(name)
        if position is not None and position < len(self._args):
            return self._args[position]
        return self._spec.defaults.get(name, default)

    def tensor(self, name: str) -> Tensor | None:
        """The argument ``name`` when it is a tensor, else ``None``."""
        value = self.get(name)
        return value if isinstance(value, Tensor) else None

    def first(self) -> Any:
        """The first positional argument (``self`` / ``input`` / ``query``, whatever its name)."""
        return self._args[0] if self._args else None

    def flag(self, name: str) -> bool:
        """The argument ``name`` as a bool (``None`` is False)."""
        return bool(self.get(name))

    def number(self, name: str, default: float) -> float:
        """The argument ``name`` as a float; ``default`` when it is missing or not a number."""
        value = self.get(name)
        if isinstance(value, (bool, int, float)):
            return float(value)
        return default


def _bind(fn: BoundFormula, spec: _Spec) -> OperatorFormula:
    @functools.wraps(fn)
    def formula(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> Count:
        return fn(Args(spec, args, kwargs), out)

    rebuild = getattr(fn, TABLE_BOUND, None)
    if rebuild is not None:  # (``wraps`` copied ``fn``'s, which builds an unbound formula)
        setattr(formula, TABLE_BOUND, lambda table: _bind(rebuild(table), spec))
    return formula


def through_table(build: Callable[[OperatorMap | None], Formula]) -> Formula:
    """The formula ``build(None)`` (counting other operators with the live registry's
    formulas), which each pass rebuilds as ``build(table)`` with the table it counts with
    (:data:`~moduleprofiler.operators.registry.TABLE_BOUND`): a profiler's own formulas for
    those operators count inside it too."""
    formula = build(None)
    setattr(formula, TABLE_BOUND, build)
    return formula


def named(formula: Formula, name: str | None, doc: str) -> Formula:
    """``formula``, made by a factory, with its own ``__name__`` (kept when ``None``) and
    docstring (the formula it computes), as a ``def`` would have them."""
    formula.__name__ = name or formula.__name__
    formula.__doc__ = doc
    return formula


def _overloads(packet: torch._ops.OpOverloadPacket) -> list[torch._ops.OpOverload]:
    found = (getattr(packet, name) for name in packet.overloads())  # type: ignore[no-untyped-call]
    return [op for op in found if _takes_tensors(op._schema)]


def register(*keys: OpKey | None) -> Callable[[BoundFormula], BoundFormula]:
    """Register a named-argument formula for operators (``None`` keys are skipped).

    A packet whose tensor overloads agree on argument positions is registered once; otherwise
    each overload is registered with its own schema.
    """

    def decorator(fn: BoundFormula) -> BoundFormula:
        for key in keys:
            if key is None:
                continue
            if isinstance(key, torch._ops.OpOverload):
                spec = _spec_of([key])
                assert spec is not None  # one schema always agrees with itself
                register_operator(key)(_bind(fn, spec))
                continue
            overloads = _overloads(key)
            shared = _spec_of(overloads)
            if shared is not None:
                register_operator(key)(_bind(fn, shared))
                continue
            for overload in overloads:
                own = _spec_of([overload])
                assert own is not None
                register_operator(overload)(_bind(fn, own))
        return fn

    return decorator


def aten(*names: str) -> list[torch._ops.OpOverloadPacket]:
    """``torch.ops.aten.<name>`` for each name this torch build has (others go to UNAVAILABLE)."""
    found = []
    for name in names:
        if hasattr(torch.ops.aten, name):
            found.append(getattr(torch.ops.aten, name))
        else:
            UNAVAILABLE.append(name)
    return found


def with_inplace(*names: str) -> list[torch._ops.OpOverloadPacket]:
    """Each operator and, where torch has one, its in-place twin (``relu`` and ``relu_``)."""
    found = aten(*names)
    found += [getattr(torch.ops.aten, f"{name}_") for name in names
              if hasattr(torch.ops.aten, f"{name}_")]
    return found


def aten_overload(name: str, overload: str) -> torch._ops.OpOverload | None:
    """``torch.ops.aten.<name>.<overload>``, or ``None`` (recorded) when torch lacks it."""
    packet = getattr(torch.ops.aten, name, None)
    if packet is None or overload not in packet.overloads():
        UNAVAILABLE.append(f"{name}.{overload}")
        return None
    return getattr(packet, overload)  # type: ignore[no-any-return]


def free(*names: str) -> None:
    """Declare ``torch.ops.aten.<name>`` free (0 ops, 0 macs) for each name torch has."""
    register_free(*aten(*names))


# -- shapes ------------------------------------------------------------------------------------

def numel(value: Any) -> int:
    """Elements of a tensor (0 for anything else); of a sparse tensor, the values it stores.

    An operator on a sparse tensor (``sparse * 2``, ``torch.sin(sparse)``: torch runs only the
    zero-preserving ones on a sparse layout) computes on its stored values, not on every
    element of its dense shape: 3 stored entries of a 3 x 3 matrix are 3 multiplies, not 9.
    """
    if not isinstance(value, Tensor):
        return 0
    if value.layout is torch.strided:
        return int(value.numel())
    return stored_numel(value)


def stored_numel(tensor: Tensor) -> int:
    """The values a tensor of a sparse layout stores (entries times the elements of each, for
    a hybrid or blocked one); ``numel`` for any other layout (a jagged nested tensor)."""
    parts = sparse_parts(tensor)
    return int(tensor.numel() if parts is None else parts[-1].numel())


def first_tensor(out: Any) -> Tensor | None:
    """The tensor an operator returned, or the first of the tuple/list it returned."""
    if isinstance(out, Tensor):
        return out
    if isinstance(out, (tuple, list)):
        for item in out:
            if isinstance(item, Tensor):
                return item
    return None


def add_counts(*counts: Count) -> Count:
    """The sum of ``(ops, macs)`` counts."""
    return sum(c[0] for c in counts), sum(c[1] for c in counts)


def out_numel(out: Any) -> int:
    """Elements of the (first) tensor an operator returned."""
    return numel(first_tensor(out))


def ints(value: Any, n: int, default: int) -> list[int]:
    """An int or int list argument as ``n`` ints (a single value repeats; empty -> default)."""
    return list(expand(value, n, (default,) * n))


# -- counting through a decomposition ----------------------------------------------------------

def by_decomposition(*keys: OpKey | None) -> None:
    """Count each of ``keys`` (composite operators) as the sum of its decomposition.

    Under ``torch.inference_mode`` composite operators reach the dispatch mode whole; elsewhere
    their parts do. Counting the whole as its parts keeps both paths equal.
    """
    for key in keys:
        if key is None:
            continue
        overloads = [key] if isinstance(key, torch._ops.OpOverload) else _overloads(key)
        for overload in overloads:
            register_operator(overload)(_decomposed(overload))


def _decomposed(op: torch._ops.OpOverload) -> OperatorFormula:
    """The formula of ``op`` as its decomposition, counted with the formulas of the table of
    the pass that counts it (:func:`through_table`)."""
    return through_table(lambda table: decomposed_formula(op, table))


def complex_by_decomposition(*keys: OpKey | None) -> Callable[[BoundFormula], BoundFormula]:
    """Register a named-argument formula for composite operators (each overload on its own),
    counting a call on complex tensors as the sum of its decomposition.

    Torch runs such a call (a complex ``conv2d``) as real operators (three real convolutions:
    Gauss's trick), which a dispatch mode sees outside ``torch.inference_mode``; under it the
    composite arrives whole. Counting it as its parts there too keeps both paths equal.
    """

    def decorator(fn: BoundFormula) -> BoundFormula:
        for key in keys:
            if key is None:
                continue
            overloads = [key] if isinstance(key, torch._ops.OpOverload) else _overloads(key)
            for overload in overloads:
                spec = _spec_of([overload])
                assert spec is not None  # one schema always agrees with itself
                register_operator(overload)(_complex_as_parts(overload, _bind(fn, spec)))
        return fn

    return decorator


def _complex_as_parts(op: torch._ops.OpOverload, direct: OperatorFormula) -> OperatorFormula:
    @functools.wraps(direct)
    def formula(args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> Count:
        first = args[0] if args else next(iter(kwargs.values()), None)
        if isinstance(first, Tensor) and first.is_complex():
            return decomposition_count(op, args, kwargs)
        return direct(args, kwargs, out)

    return formula
