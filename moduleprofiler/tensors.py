"""The one walk of a model's module facts: each module's path, parent, depth, whether it is a
leaf, and the parameter and buffer tensors it holds with its descendants, each tensor once.

Counting (:func:`moduleprofiler.counting.module_infos`), static memory
(:func:`moduleprofiler.memory.module_bytes`), 0.0.4's ``count_params`` and the timing layout read
their per-module numbers from this walk; the sums below are the ones they share.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from moduleprofiler.records import display_path
from moduleprofiler.shapes import dtype_name
from moduleprofiler.storage import is_lazy, own_nbytes, storage_key, storage_of


@dataclass(frozen=True, slots=True)
class ModuleFacts:
    """Static facts of one module of the walk (``named_modules()`` order, root first)."""

    path: str
    """Dotted path as in ``named_modules()``; the root is ``""``."""
    module: nn.Module
    parent: int
    """Index of the parent module in the walk (-1 for the root)."""
    depth: int
    is_leaf: bool
    """No child modules."""
    params: Collection[Tensor]
    """Parameters of the module and its descendants, each tensor once, in ``parameters()``
    order."""
    buffers: Collection[Tensor]
    """Buffers of the module and its descendants, each tensor once."""
    own_params: Collection[Tensor]
    """Parameters registered directly on the module, each tensor once, less those a module
    before it registered (a tied weight is owned by its first holder only)."""
    shared_with: tuple[str, ...] = ()
    """Names of the modules owning the parameters registered here that are not its own
    (their paths, the root as ``__root__``)."""


@dataclass(frozen=True, slots=True)
class ModuleWalk:
    """One walk of a model's module tree, shared by what a pass sets up (the module scan, the
    hooks, the state kept): each ``named_modules()`` traversal costs about 70 us on ResNet-50."""

    occurrences: list[tuple[str, nn.Module]]
    """``named_modules(remove_duplicate=False)``: a module registered at several places is
    listed at each."""
    modules: list[nn.Module]
    """Each module once, at its first place: ``modules()`` order."""
    paths: dict[int, str]
    """``id(module)`` -> its ``named_modules()`` path (its first place)."""


def walk_modules(root: nn.Module) -> ModuleWalk:
    """The :class:`ModuleWalk` of ``root``, from one traversal. Keeping each module's first
    occurrence gives ``named_modules()`` exactly: both walks are the same depth-first order,
    and a subtree ``named_modules()`` skips (its root was seen) was walked in full before."""
    occurrences = list(root.named_modules(remove_duplicate=False))
    paths = {id(module): path for path, module in occurrences}
    if len(paths) == len(occurrences):
        return ModuleWalk(occurrences, [module for _, module in occurrences], paths)
    paths = {}
    modules: list[nn.Module] = []
    for path, module in occurrences:
        if id(module) not in paths:
            paths[id(module)] = path
            modules.append(module)
    return ModuleWalk(occurrences, modules, paths)


def module_facts(root: nn.Module) -> tuple[ModuleFacts, ...]:
    """:class:`ModuleFacts` of every module of ``root``, in ``named_modules()`` order.

    One traversal, children before parents: a module's tensors are its own joined with its
    children's (own first, then each child's in order: ``parameters()`` order), so a tensor
    shared between submodules (tied weights, a module registered twice) appears once at every
    level. Iterative on purpose: a recursive closure would be a reference cycle keeping these
    dicts, and so the tensors, alive until the garbage collector runs.
    """
    occurrences = list(root.named_modules(remove_duplicate=False))
    params: dict[int, dict[int, Tensor]] = {}
    buffers: dict[int, dict[int, Tensor]] = {}
    for _, module in reversed(occurrences):
        key = id(module)
        if key in params:
            continue
        mine = {id(p): p for p in module._parameters.values() if p is not None}
        own_buffers = {id(b): b for b in module._buffers.values() if b is not None}
        for child in module._modules.values():
            if child is not None:
                mine.update(params[id(child)])
                own_buffers.update(buffers[id(child)])
        params[key], buffers[key] = mine, own_buffers
    facts: list[ModuleFacts] = []
    index: dict[str, int] = {}
    seen: set[int] = set()
    owner: dict[int, str] = {}  # parameter id -> path of the first module registering it
    for path, module in occurrences:
        if id(module) in seen:  # ``named_modules()`` keeps each module's first occurrence
            continue
        seen.add(id(module))
        index[path] = len(facts)
        own: dict[int, Tensor] = {}
        others: dict[str, None] = {}
        for tensor in module._parameters.values():
            if tensor is None:
                continue
            first = owner.setdefault(id(tensor), path)
            if first == path:
                own[id(tensor)] = tensor
            else:
                others[display_path(first)] = None
        facts.append(ModuleFacts(
            path, module, -1 if path == "" else index.get(path.rpartition(".")[0], 0),
            0 if path == "" else path.count(".") + 1,
            not any(child is not None for child in module._modules.values()),
            params[id(module)].values(), buffers[id(module)].values(), own.values(),
            tuple(others)))
    return tuple(facts)


_MODULE_GETATTR = nn.Module.__getattr__
_TABLE_READS: dict[tuple[type, str], bool] = {}


def module_tensor(module: nn.Module, name: str) -> Any:
    """``getattr(module, name, None)``, quicker for a parameter or buffer (``module.bias``).

    Ordinary attribute lookup never finds those: it falls back to ``nn.Module.__getattr__``,
    which costs about 0.6 us a read, and formulas read them on every call. Where neither the
    instance nor its class defines ``name`` and the class keeps ``nn.Module``'s
    ``__getattr__``, that fallback is what ``getattr`` would run, so the parameter and buffer
    tables are read here directly, in its order (the class is checked once per name); anything
    else is ``getattr`` itself.
    """
    own = module.__dict__
    if name not in own:
        cls = type(module)
        direct = _TABLE_READS.get((cls, name))
        if direct is None:
            direct = _TABLE_READS[(cls, name)] = (
                cls.__getattr__ is _MODULE_GETATTR and not hasattr(cls, name))
        if direct:
            for table_name in ("_parameters", "_buffers"):
                table = own.get(table_name)
                if table is not None and name in table:
                    return table[name]
    return getattr(module, name, None)


def numel(tensor: Tensor) -> int:
    """Elements of a parameter or buffer; 0 for a lazy one not materialised yet (its shape is
    unknown until the module's first forward)."""
    return 0 if is_lazy(tensor) else int(tensor.numel())


def distinct(tensors: Iterable[Tensor]) -> list[Tensor]:
    """``tensors`` with aliases left out: two distinct tensor objects that are the same
    elements of one storage (the same view of it) count once."""
    seen: dict[tuple[object, ...], Tensor] = {}
    for tensor in tensors:
        storage = storage_of(tensor)
        key: tuple[object, ...] = ("id", id(tensor)) if storage is None else (
            storage_key(storage), tensor.storage_offset(), tuple(tensor.shape),
            tuple(tensor.stride()), tensor.dtype)
        seen.setdefault(key, tensor)
    return list(seen.values())


def bytes_by_dtype(tensors: Iterable[Tensor]) -> dict[str, int]:
    """Bytes of ``tensors`` (``numel * element_size`` each) by dtype name."""
    totals: dict[str, int] = {}
    for tensor in tensors:
        name = dtype_name(tensor.dtype)
        totals[name] = totals.get(name, 0) + own_nbytes(tensor)
    return totals
