"""Which modules each kernel of a compiled graph comes from.

Inductor records, for every kernel it calls (its own generated kernels and the extern kernels
it hands to ATen: convolutions, matrix products), the nodes of the graph it was made from
(its *provenance*: kernel -> post-grad nodes -> the nodes of the graph Dynamo traced). Dynamo's
nodes carry the stack of modules they were traced in (``nn_module_stack``). This module joins
the two: plain names and dictionaries in, one :class:`CompiledKernel` per kernel out, so the
rules (path spelling, fusion across modules, the deepest common ancestor) are tested without
compiling anything.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

EXTERN_PREFIX = "extern_kernels."
"""Provenance name of a kernel Inductor hands to ATen (``extern_kernels.convolution``)."""

_ROOT = re.compile(r"^L\[['\"][^'\"]*['\"]\]")
_INDEX = re.compile(r"\[['\"]?([^'\"\]]+)['\"]?\]")
_MODULES = re.compile(r"\._modules\.")
_WRAPPER = "_orig_mod"
"""``torch.compile``'s wrapper's segment: a module name in the model only where a submodule
of it is such a wrapper."""


def module_path(traced: str, known: Collection[str] | None = None) -> str:
    """The ``named_modules()`` path of a module as Dynamo spells it in ``nn_module_stack``
    (``L['self'].layer1.0``, ``L['fn'].__self__.blocks[2]``, ``L['self']._modules['fc']``): the
    root argument and a bound method's ``__self__`` dropped, indexing written with dots. With
    ``known`` (the model's paths), a path that is not one of them is cut back to its longest
    known prefix, and ``torch.compile``'s wrapper segment (``_orig_mod``) is kept where the
    model has it (a compiled submodule inside a compiled model: ``2._orig_mod.fc``), else
    dropped (the wrapper of the model itself)."""
    path = _ROOT.sub("", traced)
    path = _INDEX.sub(r".\1", path)
    parts = [part for part in _MODULES.sub(".", path).split(".")
             if part and part != "__self__"]
    if known is None:
        return ".".join(parts)
    path = ""
    for part in parts:
        longer = f"{path}.{part}" if path else part
        if part != _WRAPPER or longer in known:
            path = longer
    while path and path not in known:
        path = path.rpartition(".")[0]
    return path


def innermost_spelling(stack: Mapping[Any, Any] | None) -> str:
    """Dynamo's spelling of the innermost module of a node's ``nn_module_stack`` (outermost
    first; each value is ``(traced path, type)``): ``L['self'].layer1.0``, or
    ``L['___stack0']`` in a frame resumed after a graph break; ``""`` for none."""
    if not stack:
        return ""
    traced = list(stack.values())[-1]
    return str(traced[0] if isinstance(traced, (tuple, list)) else traced)


def common_ancestor(paths: Iterable[str]) -> str:
    """The deepest module that contains every one of ``paths`` (``""``: the root)."""
    split = [path.split(".") if path else [] for path in paths]
    if not split:
        return ""
    common: list[str] = []
    for parts in zip(*split):
        if any(part != parts[0] for part in parts):
            break
        common.append(parts[0])
    return ".".join(common)


@dataclass(frozen=True)
class CompiledKernel:
    """One kernel call of a compiled graph and the modules it computes for."""

    name: str
    """Inductor's name: a generated kernel's (``triton_poi_fused_add_relu_3``,
    ``cpp_fused_add_relu_1``) or ``extern_kernels.<op>``."""
    position: int
    """Its place in the graph's sequence of kernel calls (provenance numbers them)."""
    modules: tuple[str, ...]
    """The innermost modules of its nodes, sorted."""

    @property
    def module(self) -> str:
        """The module it is booked to: the deepest common ancestor of :attr:`modules`."""
        return common_ancestor(self.modules)

    @property
    def fused_across(self) -> tuple[str, ...]:
        """The modules whose work it fuses when there are several (else empty)."""
        return self.modules if len(self.modules) > 1 else ()

    @property
    def extern_op(self) -> str | None:
        """For an extern kernel, the ATen operator the profiler names it by
        (``aten::convolution``); ``None`` for a generated one."""
        return extern_op(self.name)


def extern_op(name: str) -> str | None:
    """The ATen operator the profiler names the extern kernel ``name`` by
    (``aten::convolution``); ``None`` for a generated kernel."""
    if not _extern(name):
        return None
    if name.startswith(EXTERN_PREFIX):
        return "aten::" + name[len(EXTERN_PREFIX):]
    return "aten::" + name.removeprefix("torch.ops.").split(".")[1]


def _split_position(key: str) -> tuple[str, int | None]:
    name, _, number = key.rpartition(":")
    if name and number.isdigit():
        return name, int(number)
    return key, None


VIEW_OPS = frozenset({
    "view", "view_as", "reshape", "flatten", "unflatten", "transpose", "permute", "t",
    "squeeze", "unsqueeze", "expand", "expand_as", "narrow", "split", "chunk", "unbind",
    "getitem", "contiguous", "size", "dim", "select", "slice"})
"""Names of the operations that only reshape or select (Dynamo's ``call_method`` /
``call_function`` targets): a node of these is not work of its module's own."""


def _extern(name: str) -> bool:
    return name.startswith(EXTERN_PREFIX) or name.removeprefix("torch.ops.").startswith("aten.")


def _deepest(modules: set[str]) -> set[str]:
    """``modules`` less those that contain another of them."""
    return {m for m in modules
            if not any(other != m and (not m or other.startswith(m + ".")) for other in modules)}


PRODUCT_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm"})
"""ATen's matrix products: the operators an extern kernel of a product computes."""


def graph_kernels(provenance: Mapping[str, Any], pre_grad_modules: Mapping[str, str],
                  known: Collection[str] | None = None,
                  views: Collection[str] = (),
                  products: Sequence[str] = (),
                  ops: Mapping[str, str] | None = None) -> list[CompiledKernel]:
    """The kernels of one compiled graph, in call order.

    ``provenance`` is Inductor's node mapping of the graph (``cppCodeToPost``: kernel ->
    post-grad nodes; ``postToPre``: post-grad node -> the nodes Dynamo traced);
    ``pre_grad_modules`` the innermost module path of each of Dynamo's nodes; ``views`` those
    of Dynamo's nodes that only reshape or select (:data:`VIEW_OPS`). A kernel's modules are
    those of its nodes that compute: a convolution that reads a view made in its caller is the
    convolution's module's work, not the caller's too; a kernel of views only keeps their
    modules. An extern kernel is one ATen operator: it is the work of its deepest modules (an
    attention's mask or a product's input made in an enclosing module is an input it reads).
    A post-grad node that Dynamo's graph does not name (one its passes created) keeps no
    module; a kernel none of whose nodes has one is booked to the root, except an extern
    matrix product: ``products`` are the graph's matrix-product nodes in graph order, and
    such a kernel is the next of those no kernel names (Inductor's post-grad passes fuse a
    product and the add after it into one ``addmm`` of new nodes: in a backward, a layer's
    input gradient and the gradient a residual stream adds to it). ``ops``: each node's ATen
    operator, where the nodes are ATen's (a backward graph's): an extern kernel is then the
    work of its operator's own nodes, where it has some (a convolution's gradient is the
    convolution's, whatever fused kernel made its input).
    """
    post_to_pre: Mapping[str, Sequence[str]] = provenance.get("postToPre", {})
    kernels = []
    named: set[str] = set()
    orphans: set[int] = set()
    for order, (key, posts) in enumerate(provenance.get("cppCodeToPost", {}).items()):
        name, position = _split_position(key)
        pres = {pre for post in posts for pre in post_to_pre.get(post, ())
                if pre in pre_grad_modules}
        named.update(pres)
        working = {pre for pre in pres if pre not in views} or pres
        if ops is not None and _extern(name):
            own = extern_op(name)
            working = {pre for pre in working
                       if "aten::" + ops.get(pre, "") == own} or working
        modules = {pre_grad_modules[pre] for pre in working}
        if _extern(name):
            modules = _deepest(modules)
        if known is not None:
            modules = {module_path(m, known) if m not in known else m for m in modules}
        at = order if position is None else position
        if not modules:
            orphans.add(at)
        kernels.append(CompiledKernel(name, at, tuple(sorted(modules)) or ("",)))
    kernels.sort(key=lambda kernel: kernel.position)
    unnamed = [node for node in products if node not in named and node in pre_grad_modules]
    for index, kernel in enumerate(kernels):
        extern = kernel.extern_op
        if unnamed and kernel.position in orphans and extern is not None \
                and extern.removeprefix("aten::") in PRODUCT_OPS:
            kernels[index] = CompiledKernel(kernel.name, kernel.position,
                                            (pre_grad_modules[unnamed.pop(0)],))
    return kernels
