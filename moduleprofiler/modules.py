"""The module facts every pass stands on: one walk of a model's module tree (each module's
path, parent, depth, whether it is a leaf, and the parameter and buffer tensors it holds with
its descendants, each tensor once) and the :class:`~moduleprofiler.records.ModuleInfo` of every
module built from it.

This is the base layer: counting, timing, memory and 0.0.4's ``count_params`` read the module
tree and its per-module numbers from here, never from one another's passes.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn
from torch.nn import Parameter

from moduleprofiler.packed import any_packed, packed_weights
from moduleprofiler.records import ModuleInfo, SharedTensor, display_path, new_module_info
from moduleprofiler.storage import is_lazy, own_nbytes


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
    order, then the weights packed in objects the module holds (:mod:`moduleprofiler.packed`:
    a quantized layer's), read as tensors."""
    buffers: Collection[Tensor]
    """Buffers of the module and its descendants, each tensor once."""
    self_params: Collection[Tensor]
    """Parameters registered directly on the module, each tensor once, less those a module
    before it registered (a tied weight is owned by its first holder only), and the weights
    packed in objects it holds."""
    shared_with: tuple[str, ...] = ()
    """Names of the modules owning the parameters and buffers registered here that are not
    its own, each tensor owned by the first module registering it (their paths, the root as
    ``__root__``)."""
    unreadable: bool = False
    """The module holds a packed object whose weights cannot be read: its own parameters
    are unknown (:mod:`moduleprofiler.packed`)."""


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
    parents: list[int]
    """For each place in :attr:`occurrences`, the index of its parent's place (-1 for the
    root)."""


def walk_modules(root: nn.Module) -> ModuleWalk:
    """The :class:`ModuleWalk` of ``root``, from one traversal. Keeping each module's first
    occurrence gives ``named_modules()`` exactly: both walks are the same depth-first order,
    and a subtree ``named_modules()`` skips (its root was seen) was walked in full before."""
    occurrences, parents = _occurrences(root)
    paths = {id(module): path for path, module in occurrences}
    if len(paths) == len(occurrences):
        return ModuleWalk(occurrences, [module for _, module in occurrences], paths, parents)
    paths = {}
    modules: list[nn.Module] = []
    for path, module in occurrences:
        if id(module) not in paths:
            paths[id(module)] = path
            modules.append(module)
    return ModuleWalk(occurrences, modules, paths, parents)


class HeldValues(NamedTuple):
    """What :func:`held_values` found among the modules' attributes, in ``modules()`` order."""

    callables: list[Any]
    """The callable ones (where ``torch.compile`` leaves a compiled method)."""
    generators: list[torch.Generator]
    """The ``torch.Generator`` objects (a module's own random number generator)."""


def held_values(modules: Iterable[nn.Module]) -> HeldValues:
    """The callables and generators that ``modules`` hold as attributes (``vars(module)``),
    from one comprehension over every attribute of every module: the compiled-code check of
    a pass and its state kept each swept them on their own (ResNet-50's 151 modules: 60 and
    55 µs)."""
    generator = torch.Generator
    found = [value for module in modules for value in vars(module).values()
             if callable(value) or type(value) is generator]
    return HeldValues([value for value in found if callable(value)],
                      [value for value in found if type(value) is generator])


def held_tensors(modules: Iterable[nn.Module]) -> list[Tensor]:
    """The tensors that ``modules`` hold as plain attributes (``vars(module)``: a table made in
    ``__init__``, a cache kept between calls), directly or in a list or tuple; not their
    parameters and buffers, which ``nn.Module`` keeps in its own tables."""
    found: list[Tensor] = []
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, Tensor):
                found.append(value)
            elif isinstance(value, (list, tuple)):
                found.extend(item for item in value if isinstance(item, Tensor))
    return found


_NAMED_MODULES = nn.Module.named_modules


def _occurrences(root: nn.Module) -> tuple[list[tuple[str, nn.Module]], list[int]]:
    """``list(root.named_modules(remove_duplicate=False))`` from one loop over a stack, without
    ``named_modules``' generator at every level of the tree (which each path passes through on
    its way up: a third of the walk's cost on ResNet-50), and each place's parent
    (:attr:`ModuleWalk.parents`). ``named_modules`` itself where a class overrides it, or where
    the tree is deeper than Python's recursion limit (a module that holds itself, on which
    ``named_modules`` raises ``RecursionError``)."""
    limit = sys.getrecursionlimit()
    occurrences: list[tuple[str, nn.Module]] = []
    parents: list[int] = []
    stack: list[tuple[str, nn.Module, int, int]] = [("", root, 0, -1)]
    while stack:
        path, module, depth, parent = stack.pop()
        if type(module).named_modules is not _NAMED_MODULES or depth > limit:
            listed = list(root.named_modules(remove_duplicate=False))
            return listed, _parents(listed)
        here = len(occurrences)
        occurrences.append((path, module))
        parents.append(parent)
        children = module._modules
        if children:  # pushed last child first: popped in ``named_modules``' order
            prefix = path + "." if path else ""
            depth += 1
            stack.extend(reversed([(prefix + name, child, depth, here)
                                   for name, child in children.items() if child is not None]))
    return occurrences, parents


def _parents(occurrences: list[tuple[str, nn.Module]]) -> list[int]:
    """:attr:`ModuleWalk.parents` from the paths (a place whose parent path is not listed is
    put under the root, as :func:`module_facts` does)."""
    index = {path: i for i, (path, _) in enumerate(occurrences)}
    return [-1 if i == 0 else index.get(path.rpartition(".")[0], 0)
            for i, (path, _) in enumerate(occurrences)]


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
    packed: dict[int, tuple[tuple[Tensor, ...], bool]] = {}  # by module, those holding any
    for _, module in reversed(occurrences):
        key = id(module)
        if key in params:
            continue
        mine = {id(p): p for p in module._parameters.values() if p is not None}
        held = packed_weights(module)
        if held is not None:
            packed[key] = held
            mine.update((id(p), p) for p in held[0])
        own_buffers = {id(b): b for b in module._buffers.values() if b is not None}
        for child in module._modules.values():
            if child is not None:
                mine.update(params[id(child)])
                own_buffers.update(buffers[id(child)])
        params[key], buffers[key] = mine, own_buffers
    facts: list[ModuleFacts] = []
    index: dict[str, int] = {}
    seen: set[int] = set()
    owner: dict[int, str] = {}  # tensor id -> path of the first module registering it
    for path, module in occurrences:
        if id(module) in seen:  # ``named_modules()`` keeps each module's first occurrence
            continue
        seen.add(id(module))
        index[path] = len(facts)
        own: dict[int, Tensor] = {}
        others: dict[str, None] = {}
        held = packed.get(id(module))
        for tensor in (module._parameters.values() if held is None
                       else [*module._parameters.values(), *held[0]]):
            if tensor is None:
                continue
            first = owner.setdefault(id(tensor), path)
            if first == path:
                own[id(tensor)] = tensor
            else:
                others[display_path(first)] = None
        for tensor in module._buffers.values():  # a shared buffer is named as a tied weight
            if tensor is not None:
                first = owner.setdefault(id(tensor), path)
                if first != path:
                    others[display_path(first)] = None
        facts.append(ModuleFacts(
            path, module, -1 if path == "" else index.get(path.rpartition(".")[0], 0),
            0 if path == "" else path.count(".") + 1,
            not any(child is not None for child in module._modules.values()),
            params[id(module)].values(), buffers[id(module)].values(), own.values(),
            tuple(others), held is not None and held[1]))
    return tuple(facts)


def module_infos(root: nn.Module) -> tuple[ModuleInfo, ...]:
    """Static parameter/buffer facts for every module, in ``named_modules()`` order (a tensor
    shared between submodules counts once in each module holding it, and is owned by the
    first: :attr:`ModuleInfo.self_params`, :attr:`ModuleInfo.shared_with`)."""
    return scan_modules(root)[0]


class ModuleScan(NamedTuple):
    """What :func:`scan_modules` found."""

    infos: tuple[ModuleInfo, ...]
    """:func:`module_infos`."""
    lazy: bool
    """Some parameter or buffer is lazy: its facts are only known after the first forward."""
    plain: bool
    """Every parameter is a plain ``nn.Parameter`` or tensor, none of a subclass (a
    ``DTensor``, a lazy parameter); ``False`` also where the scan did not look at each one."""


def scan_modules(root: nn.Module, walk: ModuleWalk | None = None) -> ModuleScan:
    """:func:`module_infos`, whether some parameter or buffer is lazy and whether every
    parameter is a plain one (:class:`ModuleScan`). Each tensor's size is read once.
    ``walk``: the caller's :func:`~moduleprofiler.modules.walk_modules` of ``root`` (else made
    here).

    The sums are those of the one walk of module facts
    (:func:`~moduleprofiler.modules.module_facts`: each module's tensors with its descendants',
    each tensor once), computed without building each module's set of tensors, which cost
    1 ms per pass on ResNet-50: when every module sits at one place in the tree, a tensor
    registered once is added up the tree with its module's sums, and one registered more than
    once (a tied weight) is added once to each module above any of its registrations. A model
    that registers one module at two places takes the walk itself."""
    if walk is None:
        walk = walk_modules(root)
    occurrences, modules = walk.occurrences, walk.modules
    if len(modules) < len(occurrences):
        return _scan_facts(root)
    # numel, bytes, trainable numel and lazy of each tensor registered more than once, by id
    sizes: dict[int, tuple[int, int, int, bool]] = {}
    count = len(modules)
    parent = walk.parents  # each module's parent, from the walk (one place per module here)
    leaf = [True] * count
    for up in parent:
        if up >= 0:
            leaf[up] = False
    # per module: own sums of the tensors registered once (numel, bytes and trainable numel of
    # parameters; numel and bytes of buffers); a tensor seen again goes to ``shared``, with
    # every module registering it, and leaves its first module's sums. The loop is written
    # out (no helper call per tensor): it reads every tensor of the model on every pass.
    params, param_bytes, trainable = [0] * count, [0] * count, [0] * count
    buffers, buffer_bytes = [0] * count, [0] * count
    first: tuple[dict[int, int], dict[int, int]] = ({}, {})
    shared: tuple[dict[int, list[int]], dict[int, list[int]]] = ({}, {})
    lazy = False
    plain = True
    unreadable: list[int] = []  # modules holding packed weights that cannot be read
    holding = any_packed(modules)  # none, the usual case: no module is asked
    for i, module in enumerate(modules):
        packed = packed_weights(module) if holding else None
        if packed is not None and packed[1]:
            unreadable.append(i)
        for kind, table in ((0, module._parameters), (1, module._buffers)):
            if packed is not None and not kind:
                values: Iterable[Tensor | None] = [*table.values(), *packed[0]]
            elif table:
                values = table.values()
            else:
                continue
            seen = first[kind]
            for tensor in values:
                if tensor is None:
                    continue
                key = id(tensor)
                if key in seen:
                    again = shared[kind]
                    holders = again.get(key)
                    if holders is None:
                        holders = again[key] = [seen[key]]
                        _add(-1, _size(tensor, sizes), kind, seen[key], params, param_bytes,
                             trainable, buffers, buffer_bytes)
                    holders.append(i)
                    continue
                seen[key] = i
                cls = type(tensor)
                if cls is not Parameter and cls is not Tensor:
                    if not kind:
                        plain = False
                    if is_lazy(tensor):
                        lazy = True  # counts 0 until its first forward
                        continue
                    numel = tensor.numel()
                    size = own_nbytes(tensor)  # a DTensor's: the shard this rank holds
                else:
                    numel = tensor.numel()
                    # a sparse tensor holds its indices and values, not its dense shape
                    size = numel * tensor.element_size() if tensor.layout is _STRIDED \
                        else own_nbytes(tensor)
                if kind:
                    buffers[i] += numel
                    buffer_bytes[i] += size
                else:
                    params[i] += numel
                    param_bytes[i] += size
                    if tensor.requires_grad:
                        trainable[i] += numel
    own = params[:]
    for i in range(count - 1, 0, -1):  # children come after their parent
        up = parent[i]
        params[up] += params[i]
        param_bytes[up] += param_bytes[i]
        trainable[up] += trainable[i]
        buffers[up] += buffers[i]
        buffer_bytes[up] += buffer_bytes[i]
    owners: dict[int, dict[str, None]] = {}  # module -> first holders of its tied tensors
    held: dict[int, list[SharedTensor]] = {}  # module -> the shared tensors its sums hold
    number = 0
    for kind in (0, 1):
        for key, holders in shared[kind].items():
            known = sizes[key]
            entry: SharedTensor = (number, kind, known[0], known[1], known[2])
            number += 1
            reached: set[int] = set()
            for i in dict.fromkeys(holders):
                if i == holders[0]:  # owned once, by its first holder
                    if not kind:
                        own[i] += known[0]
                else:  # a buffer as a parameter: its other holders name the first
                    owners.setdefault(i, {})[display_path(occurrences[holders[0]][0])] = None
                while i != -1 and i not in reached:  # each module above, once
                    reached.add(i)
                    held.setdefault(i, []).append(entry)
                    _add(1, known, kind, i, params, param_bytes, trainable, buffers,
                         buffer_bytes)
                    i = parent[i]
    exported = exported_types(root)
    # each class's name and whether it is a container, worked out once per class in this scan
    classes = {cls: (cls.__name__, _is_container_class(cls)) for cls in set(map(type, modules))}
    counts: list[int | None] = [*params]  # None: unknown
    held_bytes: list[int | None] = [*param_bytes]
    if unreadable:
        _unknown_params(counts, unreadable, parent)
        _unknown_params(held_bytes, unreadable, parent)
    infos = []
    for i, (path, module) in enumerate(occurrences):
        name, container = classes[type(module)]
        infos.append(new_module_info(
            path, exported.get(path) or name, 0 if path == "" else path.count(".") + 1,
            counts[i], own[i], trainable[i], buffers[i], leaf[i], held_bytes[i],
            buffer_bytes[i], ", ".join(owners[i]) if i in owners else None, container,
            tuple(held[i]) if i in held else ()))
    return ModuleScan(tuple(infos), lazy, plain)


def _unknown_params(params: list[int | None], unreadable: Iterable[int],
                    parent: Sequence[int]) -> None:
    """Mark, in place, the ``params`` (or their bytes) that packed weights which cannot be
    read make unknown (every module's, indexed as ``parent``; ``unreadable``: the modules
    holding such weights).
    A holder's is unknown (``None``); each module above it keeps the known part, as ``ops``
    does: a lower bound, unknown where that part is 0 (never a 0 standing for weights that are
    there)."""
    for i in unreadable:
        params[i] = None
        i = parent[i]
        while i != -1:
            if params[i] == 0:
                params[i] = None
            i = parent[i]


def exported_types(root: nn.Module) -> dict[str, str]:
    """For a module rebuilt from an exported program (``torch.export.unflatten``), the class
    name of the module each path was in the program's source, by path: its modules are all
    ``InterpreterModule`` (running the exported graph), and the per-type views would show that
    type for every layer. Read from the module stack every exported operator keeps
    (``nn_module_stack``: path -> the dotted name of the module's class). Empty for any other
    model."""
    if type(root).__name__ != "UnflattenedModule":
        return {}
    found: dict[str, str] = {}
    for module in root.modules():
        graph = getattr(module, "graph", None)
        for node in getattr(graph, "nodes", ()):
            stack = node.meta.get("nn_module_stack") if hasattr(node, "meta") else None
            for path, qualified in (stack or {}).values():
                if isinstance(path, str) and path not in found:
                    found[path] = str(getattr(qualified, "__name__", qualified)).rpartition(
                        ".")[2]
    return found


def is_container(module: nn.Module) -> bool:
    """Whether ``module``'s class keeps ``nn.Module``'s unimplemented ``forward`` (looked up
    through its class hierarchy: a ``ModuleList``, a ``ModuleDict``, or a subclass of one that
    adds no ``forward``): :attr:`ModuleInfo.container`."""
    return _is_container_class(type(module))


def _is_container_class(cls: type) -> bool:
    """:func:`is_container` of a module of class ``cls``."""
    # read from the class dictionaries: a scripted module's ``forward`` is a descriptor that
    # fails when read from its class
    for base in cls.__mro__:
        if "forward" in base.__dict__:
            return base.__dict__["forward"] is _UNIMPLEMENTED
    return False


_STRIDED = torch.strided

_UNIMPLEMENTED = nn.Module.__dict__["forward"]
"""``nn.Module``'s own ``forward``, which raises: the class of a container keeps it."""


def _add(sign: int, size: tuple[int, int, int, bool], kind: int, i: int, params: list[int],
         param_bytes: list[int], trainable: list[int], buffers: list[int],
         buffer_bytes: list[int]) -> None:
    """Add (``sign=1``) or take away (``-1``) one tensor's ``size`` in the sums of module
    ``i``: a parameter's (``kind`` 0) or a buffer's (1)."""
    if kind:
        buffers[i] += sign * size[0]
        buffer_bytes[i] += sign * size[1]
    else:
        params[i] += sign * size[0]
        param_bytes[i] += sign * size[1]
        trainable[i] += sign * size[2]


def _scan_facts(root: nn.Module) -> ModuleScan:
    """:func:`scan_modules` from :func:`~moduleprofiler.modules.module_facts` itself."""
    sizes: dict[int, tuple[int, int, int, bool]] = {}
    infos = []
    exported = exported_types(root)
    facts = module_facts(root)
    shared = _shared_entries(facts, sizes)
    counts: list[int | None] = [_sums(fact.params, sizes)[0] for fact in facts]
    held_bytes: list[int | None] = [_sums(fact.params, sizes)[1] for fact in facts]
    unreadable = [i for i, fact in enumerate(facts) if fact.unreadable]
    if unreadable:
        _unknown_params(counts, unreadable, [fact.parent for fact in facts])
        _unknown_params(held_bytes, unreadable, [fact.parent for fact in facts])
    for i, fact in enumerate(facts):
        trainable = _sums(fact.params, sizes)[2]
        buffers, buffer_bytes, _ = _sums(fact.buffers, sizes)
        held = tuple(shared[id(tensor)] for tensors in (fact.params, fact.buffers)
                     for tensor in tensors if id(tensor) in shared) if shared else ()
        infos.append(ModuleInfo(
            fact.path, exported.get(fact.path) or type(fact.module).__name__, fact.depth,
            counts[i], _sums(fact.self_params, sizes)[0] if fact.self_params else 0,
            trainable, buffers, fact.is_leaf, held_bytes[i], buffer_bytes,
            ", ".join(fact.shared_with) or None, is_container(fact.module), held))
    return ModuleScan(tuple(infos), any(size[3] for size in sizes.values()), False)


def _shared_entries(facts: Sequence[ModuleFacts], sizes: dict[int, tuple[int, int, int, bool]]
                    ) -> dict[int, SharedTensor]:
    """The tensors that more than one module registers (a module registered at several places
    counts once), by id, as :attr:`ModuleInfo.shared_tensors` lists them: the entries
    :func:`scan_modules` makes on its fast path."""
    tensors: dict[int, Tensor] = {}
    holders: tuple[dict[int, set[int]], dict[int, set[int]]] = ({}, {})
    for fact in facts:
        for kind, table in ((0, fact.module._parameters), (1, fact.module._buffers)):
            for tensor in table.values():
                if tensor is not None:
                    tensors[id(tensor)] = tensor
                    holders[kind].setdefault(id(tensor), set()).add(id(fact.module))
    found: dict[int, SharedTensor] = {}
    for kind in (0, 1):
        for key, modules in holders[kind].items():
            if len(modules) > 1:
                numel, size, trainable, _ = _size(tensors[key], sizes)
                found[key] = (len(found), kind, numel, size, trainable)
    return found


def _size(tensor: Tensor, sizes: dict[int, tuple[int, int, int, bool]]
          ) -> tuple[int, int, int, bool]:
    """``(numel, bytes, trainable numel, lazy)`` of ``tensor``, read once per pass into
    ``sizes`` (by id); a lazy tensor counts 0 until its first forward."""
    known = sizes.get(id(tensor))
    if known is None:
        cls = type(tensor)
        if cls is not Parameter and cls is not Tensor and is_lazy(tensor):
            known = sizes[id(tensor)] = (0, 0, 0, True)
        else:
            numel = tensor.numel()
            known = sizes[id(tensor)] = (numel, own_nbytes(tensor),
                                         numel if tensor.requires_grad else 0, False)
    return known


def _sums(tensors: Iterable[Tensor], sizes: dict[int, tuple[int, int, int, bool]]
          ) -> tuple[int, int, int]:
    """``(numel, bytes, trainable numel)`` of ``tensors`` (each size read once: :func:`_size`)."""
    count = size = trainable = 0
    for tensor in tensors:
        known = _size(tensor, sizes)
        count += known[0]
        size += known[1]
        trainable += known[2]
    return count, size, trainable
