"""Formula registries: module type -> ops / macs formula.

A *formula* is a pure function with the forward-hook signature ``(module, inputs, output)``.
``inputs`` is the tuple of positional arguments the module received (keyword arguments that
name positional parameters of ``forward`` are merged in, in signature order), ``output`` is
whatever ``forward`` returned.

Keys are ``nn.Module`` subclasses, or the dotted qualified name of a class
(``"transformers.pytorch_utils.Conv1D"``) so that a formula can be registered for a third-party
class without importing its package. Lookup walks the method resolution order of the module's
class, so a subclass of ``nn.Linear`` gets the Linear formula unless it has one of its own.

The ops map's string keys ``"default"`` (used for types with no formula) and ``"excluded"``
(used for modules listed in ``exclude_from_ops``) are kept from moduleprofiler 0.0.4, whose
maps users pass in. The io-size registry is the 0.0.4 layer's (``moduleprofiler.compat``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from types import MappingProxyType
from typing import Any, TypeVar

from torch import nn

from moduleprofiler.errors import RegistryError
from moduleprofiler.validate import (
    DEFAULT_KEY,
    EXCLUDED_KEY,
    base_module_key,
    check_registration,
    check_registry_key,
)

Count = int | float | None
"""What an ops/macs formula returns: a count, or ``None`` for "unknown"."""

COVERS = "covers"
"""Name of the optional attribute of an ops formula: ``covers(module) -> bool``, whether the
formula prices this module instance. A formula covers every call of its types (their operators
are not observed), so a ``None`` it returns makes the call unknown; where its test says False
(a transformer layer whose activation is a function the formula has no cost for), the module's
own operators are observed, and counted when the formula returns ``None`` for its calls."""

PARTS_BOUND = "for_map"
"""Name of the optional attribute of an ops or macs formula that prices parts of its module as
the layers they are (``nn.MultiheadAttention``'s projections are ``nn.Linear`` work):
``for_map(table) -> formula``, the same formula pricing each such part with ``table``'s
formula for the part's layer type. A pass asks it once per module type, with the map it
counts with (:func:`bound_to`), so that a profiler's own ``nn.Linear`` formula prices the
projections inside a ``MultiheadAttention`` too (``moduleprofiler.formulas.parts``)."""

Formula = Callable[[nn.Module, tuple[Any, ...], Any], Count]
Key = type | str
FormulaMap = dict[Any, Callable[..., Any]]

_RESERVED_KEYS = (DEFAULT_KEY, EXCLUDED_KEY)

F = TypeVar("F", bound=Callable[..., Any])

_LAYER_ORDER: tuple[type, ...] = tuple(
    cls for cls in (getattr(nn, name) for name in dir(nn))
    if isinstance(cls, type) and issubclass(cls, nn.Module) and cls is not nn.Module)
"""The layer classes ``torch.nn`` exports (alphabetical): the keys 0.0.4's maps were keyed by,
each a key of a profiler's ops and macs map when some base class of it has a formula."""
_LAYER_CLASSES = frozenset(_LAYER_ORDER)


def qualified_name(cls: type) -> str:
    """``module.QualName`` of a class, the form used for lazily registered keys."""
    return f"{cls.__module__}.{cls.__qualname__}"


def _validate_key(key: object, entry_point: str) -> Key:
    if isinstance(key, type):
        if not issubclass(key, nn.Module):
            raise RegistryError(f"{key!r} is not a subclass of torch.nn.Module")
        if key is nn.Module:
            raise RegistryError(base_module_key(entry_point))
        return key
    if isinstance(key, str) and "." in key and key not in _RESERVED_KEYS:
        return key
    raise RegistryError(
        f"registry keys are nn.Module subclasses or dotted class names such as "
        f"'transformers.pytorch_utils.Conv1D'; got {key!r}"
    )


class FormulaRegistry:
    """A table of functions keyed by module type, with MRO-aware lookup.

    Registration refuses duplicates, so two formulas can never silently compete for a type.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self._table: dict[Key, Callable[..., Any]] = {}

    def register(self, *keys: Key) -> Callable[[F], F]:
        """Decorator registering the decorated function for every key given."""
        entry_point = f"register_{self.name.replace('-', '_')}"
        if not keys:
            raise RegistryError(f"register for the {self.name} registry needs at least one type")
        for key in keys:
            check_registry_key(entry_point, key)
        validated = [_validate_key(key, entry_point) for key in keys]

        def decorator(fn: F) -> F:
            check_registration(entry_point, fn)
            for key in validated:
                if key in self._table:
                    raise RegistryError(
                        f"{self.name} registry already has a function for {key!r} "
                        f"({self._table[key].__name__}); unregister it first"
                    )
            for key in validated:
                self._table[key] = fn
            return fn

        return decorator

    def unregister(self, *keys: Key) -> None:
        """Remove the functions registered for ``keys``; a key without one of its own raises
        ``KeyError`` (naming the class whose function it inherits) and nothing is removed."""
        for key in keys:
            if key not in self._table:
                found = resolve_with_owner(self._table, key) if isinstance(key, type) else None
                inherited = "" if found is None else (
                    f"; it inherits the one registered for {qualified_name(found[1])}")
                name = qualified_name(key) if isinstance(key, type) else repr(key)
                raise KeyError(f"the {self.name} registry has no function registered for "
                               f"{name}{inherited}")
        for key in keys:
            del self._table[key]

    def as_map(self) -> FormulaMap:
        """A fresh dict copy of the table (mutating it never affects the registry)."""
        return dict(self._table)

    @property
    def table(self) -> Mapping[Key, Callable[..., Any]]:
        """The live table, read-only: it follows every later registration."""
        return MappingProxyType(self._table)

    def __contains__(self, key: object) -> bool:
        return key in self._table

    def __len__(self) -> int:
        return len(self._table)


_ABSENT = object()


class LiveFormulaMap(MutableMapping[Any, Any]):
    """A profiler's formula map: its own entries over the registry's live table.

    A key is looked up in :attr:`own` first, then in the registry as it is at that moment: a
    formula registered (or unregistered) after the profiler was made counts from then on,
    unless the profiler has an entry of its own for that key. Setting a key writes an own
    entry; deleting one hides the registry's entry too, as deleting from a dict would, and a
    hidden class gives no formula to its subclasses either (:func:`resolve_with_owner`).
    ``dict(live)`` is the merged table, as a pass sees it now.

    With ``layer_classes``, every ``torch.nn`` layer class whose formula comes from a base class
    (``nn.BatchNorm2d`` from ``_BatchNorm``) is a key too, read through to that base as it is
    now (an own entry for the base wins), as :func:`get_default_ops_map` lists it: 0.0.4's maps
    were keyed by the layer classes, and code written for them reads and wraps
    ``ops_fn_map[nn.BatchNorm2d]``.
    """

    __slots__ = ("_defaults", "_factory", "_hidden", "_layers", "own")

    def __init__(self, own: MutableMapping[Any, Any] | None,
                 *defaults: Mapping[Any, Any],
                 factory: Callable[[Any], LiveFormulaMap] | None = None,
                 layer_classes: bool = False) -> None:
        self.own: MutableMapping[Any, Any] = {} if own is None else own
        """This profiler's entries (the map given to its constructor, kept as it is)."""
        self._defaults = defaults
        self._hidden: set[Any] = set()
        self._factory = factory
        self._layers = layer_classes

    def __reduce__(self) -> tuple[Any, ...]:
        # copied or pickled (a profiler passed to copy.deepcopy or to another process): the own
        # entries and hidden keys travel, the registry does not (it is read-only, and live);
        # the copy is rebuilt over the registry by the function that built this map
        if self._factory is None:
            raise TypeError(f"cannot copy a {type(self).__name__} built without a factory")
        return _rebuilt, (self._factory, self.own, tuple(self._hidden))

    def __copy__(self) -> LiveFormulaMap:
        # a copy of its own entries over the same live registry, as ``copy.copy`` of a dict:
        # setting a key in the copy leaves this map (and its profiler) as it was
        twin = LiveFormulaMap(copy.copy(self.own), *self._defaults, factory=self._factory,
                              layer_classes=self._layers)
        twin._hidden.update(self._hidden)
        return twin

    def get(self, key: Any, default: Any = None) -> Any:
        # the one lookup path (``[]`` and ``in`` go through it): lookups are per type per pass
        value = self._direct(key)
        if value is _ABSENT:
            if self._layers and key in _LAYER_CLASSES and key not in self._hidden:
                value = self._inherited(key)
            return default if value is _ABSENT else value
        return value

    def _direct(self, key: Any) -> Any:
        """The entry held for ``key`` itself (own, else the registry's), :data:`_ABSENT` when
        there is none or it is hidden."""
        own = self.own
        if key in own:
            return own[key]
        if self._hidden and key in self._hidden:
            return _ABSENT
        for table in self._defaults:
            if key in table:
                return table[key]
        return _ABSENT

    def _inherited(self, cls: type) -> Any:
        """The formula a ``torch.nn`` layer class gets by its dotted name or from its nearest
        base class with one (as :func:`resolve` finds it), :data:`_ABSENT` when none has one
        or a hidden class stands between."""
        for base in cls.__mro__:
            if self.hides(base):
                return _ABSENT
            fn = self._at_class(base)
            if fn is not None:
                return fn
        return _ABSENT

    def _at_class(self, cls: type) -> Any:
        """The formula held for ``cls`` itself, by the class or by its dotted name: an own
        entry under either wins over the registry's (``None`` when there is none)."""
        keys = (cls, qualified_name(cls))
        own = self.own
        if own:
            for key in keys:
                fn = own.get(key)
                if fn is not None:
                    return fn
        for key in keys:
            fn = self._direct(key)
            if fn is not _ABSENT and fn is not None:
                return fn
        return None

    @property
    def hidden_keys(self) -> frozenset[Any]:
        """The keys deleted from this map (their registered formulas hidden)."""
        return frozenset(self._hidden - self.own.keys())

    def hides(self, key: object) -> bool:
        """Whether ``key`` was deleted from this map (its registered formula hidden)."""
        return bool(self._hidden) and key in self._hidden and key not in self.own

    def __getitem__(self, key: Any) -> Any:
        value = self.get(key, _ABSENT)
        if value is _ABSENT:
            raise KeyError(key)
        return value

    def __contains__(self, key: object) -> bool:
        return self.get(key, _ABSENT) is not _ABSENT

    def __setitem__(self, key: Any, value: Any) -> None:
        self.own[key] = value
        self._hidden.discard(key)

    def __delitem__(self, key: Any) -> None:
        if key not in self:
            raise KeyError(key)
        self.own.pop(key, None)
        if key in self:  # still seen through the registry (or a base class): hide it
            self._hidden.add(key)

    def __iter__(self) -> Iterator[Any]:
        seen = set(self.own)
        yield from list(self.own)
        for table in self._defaults:
            for key in list(table):
                if key not in seen and key not in self._hidden:
                    seen.add(key)
                    yield key
        if self._layers:
            for cls in _LAYER_ORDER:
                if cls not in seen and cls not in self._hidden \
                        and self._inherited(cls) is not _ABSENT:
                    yield cls

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def copy(self) -> FormulaMap:
        """The merged table as a plain dict, as a pass would see it now."""
        return dict(self)

    # dict's merge operators, which 0.0.4's plain-dict maps had (``profiler.ops_fn_map |=
    # {MyType: fn}``): ``|`` gives the merged table as a plain dict, ``|=`` sets own entries
    def __or__(self, other: object) -> FormulaMap:
        if not isinstance(other, Mapping):
            return NotImplemented
        return {**self, **other}

    def __ror__(self, other: object) -> FormulaMap:
        if not isinstance(other, Mapping):
            return NotImplemented
        return {**other, **self}

    # ``|=`` keeps this map (the profiler's, over the live registry) where dict's keeps a dict:
    # mypy wants it to return what ``|`` returns
    def __ior__(self, other: Any) -> LiveFormulaMap:  # type: ignore[misc]
        self.update(other)
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}(own={dict(self.own)!r}, {len(self)} entries in all)"


def _rebuilt(factory: Callable[[Any], LiveFormulaMap], own: MutableMapping[Any, Any],
             hidden: tuple[Any, ...]) -> LiveFormulaMap:
    """A :class:`LiveFormulaMap` copied or unpickled: ``factory(own)`` with ``hidden``."""
    live = factory(own)
    live._hidden.update(hidden)
    return live


def live_map(table: Mapping[Any, Any] | None, *defaults: Mapping[Any, Any],
             factory: Callable[[Any], LiveFormulaMap] | None = None,
             layer_classes: bool = False) -> LiveFormulaMap:
    """``table`` as a profiler's own entries over ``defaults`` (a :class:`LiveFormulaMap` is
    returned as it is; a plain mapping is kept, not copied). ``factory``, the function that
    calls this one, rebuilds the map when it is copied or unpickled; ``layer_classes``: the
    ``torch.nn`` layer classes are keys too (:class:`LiveFormulaMap`)."""
    if isinstance(table, LiveFormulaMap):
        return table
    own = table if table is None or isinstance(table, MutableMapping) else dict(table)
    return LiveFormulaMap(own, *defaults, factory=factory, layer_classes=layer_classes)


def resolve(table: Mapping[Any, Callable[..., Any]], cls: type) -> Callable[..., Any] | None:
    """The function for ``cls`` in ``table``: first match along ``cls.__mro__``.

    At each class of the MRO the class itself is tried, then its dotted qualified name.
    ``None`` when nothing matches (the caller decides what "default" means).
    """
    found = resolve_with_owner(table, cls)
    return None if found is None else found[0]


def resolve_with_owner(table: Mapping[Any, Callable[..., Any]], cls: type
                       ) -> tuple[Callable[..., Any], type] | None:
    """:func:`resolve`, also returning the class of ``cls.__mro__`` the function is
    registered for. In a :class:`LiveFormulaMap`, the profiler's own entry for a class, under
    the class or its dotted name, wins over the registry's for that class, and a class deleted
    from it ends the walk: its subclasses do not get a formula from above it either."""
    if isinstance(table, LiveFormulaMap):
        for base in cls.__mro__:
            if table.hides(base):
                return None
            # a profiler's own entry, under the class or its dotted name, wins over the
            # registry's at the same class
            found = table._at_class(base)
            if found is not None:
                return found, base
        return None
    for base in cls.__mro__:
        fn = table.get(base)
        if fn is not None:
            return fn, base
        fn = table.get(qualified_name(base))
        if fn is not None:
            return fn, base
    return None


def bound_to(formula: Callable[..., Any], table: Mapping[Any, Callable[..., Any]]
             ) -> Callable[..., Any]:
    """``formula`` as it prices its module's parts with the formulas of ``table``
    (:data:`PARTS_BOUND`); a formula without parts of other layer types as it is."""
    bind = getattr(formula, PARTS_BOUND, None)
    return formula if bind is None else bind(table)  # type: ignore[no-any-return]


def formula_fits(cls: type, registered_for: type) -> bool:
    """Whether a formula registered for ``registered_for`` describes ``cls`` (a subclass).

    It does unless a class between them replaces ``forward``: a subclass of ``nn.Linear`` whose
    forward does a grouped ``bmm``, or of ``nn.Conv1d`` that also convolves a mask and returns
    a tuple, does other work than the formula prices. Classes of ``torch`` itself are trusted
    (``nn.Conv2d`` defines its own ``forward`` below a formula registered for a common base).
    """
    if cls is registered_for:
        return True
    for klass in cls.__mro__:
        if klass is registered_for:
            return True
        if "forward" in vars(klass) and not klass.__module__.startswith("torch."):
            return False
    return True


OPS_FORMULAS = FormulaRegistry("ops")
MACS_FORMULAS = FormulaRegistry("macs")


def register_ops(*types: Key) -> Callable[[F], F]:
    """Register an ops formula ``(module, inputs, output) -> int`` for module types.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> from moduleprofiler import ModuleProfiler, register_ops
        >>> class PlusOne(nn.Module):
        ...     def forward(self, x):
        ...         return x + 1
        >>> @register_ops(PlusOne)
        ... def plus_one_ops(module, inputs, output):
        ...     return inputs[0].numel()  # one add per element
        >>> ModuleProfiler().profile(PlusOne(), torch.zeros(2, 3)).total_ops
        6
        >>> unregister_ops(PlusOne)
    """
    return OPS_FORMULAS.register(*types)


def register_macs(*types: Key) -> Callable[[F], F]:
    """Register a multiply-accumulate formula ``(module, inputs, output) -> int``."""
    return MACS_FORMULAS.register(*types)


def unregister_ops(*types: Key) -> None:
    """Remove default ops (and macs, if any) formulas registered for ``types``."""
    OPS_FORMULAS.unregister(*types)
    for key in types:
        if key in MACS_FORMULAS:
            MACS_FORMULAS.unregister(key)


def unknown_ops(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
    """The ``"default"`` ops function: no formula is known, so the count is unknown (``None``)."""
    return None


def excluded_ops(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
    """The ``"excluded"`` ops function: the user asked not to count this module."""
    return None


def get_default_ops_map() -> FormulaMap:
    """A new dict of the default ops formulas, keyed by module class (every ``torch.nn`` layer
    class that has one, also one that inherits it), with the 0.0.4 ``"default"`` and
    ``"excluded"`` keys: what a new profiler's ``ops_fn_map`` holds."""
    return live_ops_map().copy()


def get_default_macs_map() -> FormulaMap:
    """A new dict of the default multiply-accumulate formulas, keyed as
    :func:`get_default_ops_map`."""
    return live_macs_map().copy()


_OPS_KEYS: Mapping[str, Callable[..., Any]] = MappingProxyType(
    {DEFAULT_KEY: unknown_ops, EXCLUDED_KEY: excluded_ops})


def live_ops_map(own: Mapping[Any, Any] | None = None) -> LiveFormulaMap:
    """A profiler's ops map: ``own`` entries over the live ops registry (and the 0.0.4
    ``"default"``/``"excluded"`` keys of :func:`get_default_ops_map`)."""
    return live_map(own, _OPS_KEYS, OPS_FORMULAS.table, factory=live_ops_map,
                    layer_classes=True)


def live_macs_map(own: Mapping[Any, Any] | None = None) -> LiveFormulaMap:
    """A profiler's macs map: ``own`` entries over the live macs registry."""
    return live_map(own, MACS_FORMULAS.table, factory=live_macs_map, layer_classes=True)

