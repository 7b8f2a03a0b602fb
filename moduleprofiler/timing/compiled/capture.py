"""Compiling a model so that every kernel of its compiled graphs can be named by module.

:class:`GraphRecorder` is a ``torch.compile`` backend: Inductor (``compile_fx``) with the
compile options of the model's own ``torch.compile``, plus Inductor's provenance tracking on, and
a recording inner compiler. For each graph Dynamo traced it keeps the innermost module of every
node (``nn_module_stack``); for each graph Inductor compiled (forward, backward) it keeps the
graph's key, the name its calls carry in the profiler (``## Call CompiledFxGraph <key> ##``), and
its kernels with their modules (:func:`~moduleprofiler.timing.compiled.kernels.graph_kernels`).
A backward graph's kernels are named through the backward graph's own nodes, each the work of
the module of the forward node it differentiates (:func:`backward_nodes`).

Why a compile of its own: provenance is written when a graph is compiled, and a model compiled
without it keeps none. The recorder's graphs are cached apart from the model's own (its
post-grad pass does nothing but give the cache key a name), so a second run finds them in
Inductor's cache with their provenance, and the model's own cache entries are left as they are.
The program is the same: the same graph, options and Inductor.

Nothing is written on the user's modules and torch is not patched: the options are set with
Inductor's and functorch's ``config.patch`` contexts around this backend's own compile.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import re
import types
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import torch
import torch._functorch.config as functorch_config
import torch._inductor.config as inductor_config
import torch._inductor.debug as inductor_debug
from torch import fx, nn
from torch._inductor.compile_fx import compile_fx, compile_fx_inner
from torch._inductor.custom_graph_pass import CustomGraphPass

from moduleprofiler.inputs import orig_mod_of
from moduleprofiler.timing.compiled.kernels import (
    PRODUCT_OPS,
    VIEW_OPS,
    CompiledKernel,
    common_ancestor,
    graph_kernels,
    innermost_spelling,
    module_path,
)

GRAPH_RANGE = "## Call CompiledFxGraph "
"""How the profiler names one call of a compiled graph: this, its key, `` ##``."""


class _CacheName(CustomGraphPass):
    """A post-grad pass that changes nothing: its uuid keeps the recorder's compiled graphs
    (which carry provenance) apart from the model's own in Inductor's cache, and apart from
    each other where the graphs Dynamo traced name their nodes differently (``salt``): a
    cached graph's provenance names the nodes of the graph that wrote it, so two graphs of
    the same code traced in two places (one matrix product after a graph break in each of
    two modules) must not share an entry."""

    def __init__(self, salt: str = "") -> None:
        self.salt = salt

    def __call__(self, graph: fx.Graph) -> None:
        return None

    def uuid(self) -> str:
        return f"moduleprofiler.compiled provenance 3 {self.salt}"


@dataclass
class CompiledGraph:
    """One graph Inductor compiled for the model."""

    key: str
    """Its cache key, which the profiler's range around each of its calls carries."""
    backward: bool
    kernels: list[CompiledKernel]
    """Its kernel calls in order, each with its modules (empty: no provenance was kept)."""
    first: str = ""
    """The module of the first operation of the graph Dynamo traced (``""``: the root)."""
    last: str = ""
    """The module of its last operation: a graph break follows it, when another graph
    does."""
    reason: str | None = None
    """Why Dynamo ended the graph when a graph break did (the first line of its reason);
    ``None``: the traced code ended."""
    at: str | None = None
    """The line of the user's code the graph broke at (``file:line in function``)."""


@dataclass
class GraphRecorder:
    """A ``torch.compile`` backend that compiles with Inductor and records, per compiled graph,
    which modules each kernel comes from."""

    known: Collection[str]
    """The model's module paths (``named_modules()``), to resolve Dynamo's spelling of them."""
    owners: Mapping[int, str] = field(default_factory=dict)
    """The module path of each parameter and buffer of the model, by ``id``: a graph traced
    after a graph break starts in a submodule's frame, whose paths Dynamo spells from that
    submodule; a parameter the graph reads says which submodule it is."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Inductor options (what ``torch.compile``'s ``mode`` and ``options`` set)."""
    graphs: list[CompiledGraph] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    prefix: str = ""
    """The path of the compiled module in the model it is timed in (``""``: it is the
    model): put before every module path the recorder finds."""

    def __call__(self, gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Any:
        spelled = {node.name: innermost_spelling(node.meta.get("nn_module_stack"))
                   for node in gm.graph.nodes}
        frames = self._frames(gm, example_inputs, spelled)

        def resolve(traced: str) -> str:
            """The model's path of the module Dynamo spelled ``traced`` in this frame."""
            return _joined(self.prefix, module_path(_joined(
                frames.get(_local(traced) or "self", frames.get("self", "")),
                module_path(traced)), self.known))

        modules = {name: resolve(traced) for name, traced in spelled.items()}
        views = {node.name for node in gm.graph.nodes if _only_views(node)}
        work = [modules[node.name] for node in gm.graph.nodes
                if node.op in ("call_function", "call_method", "call_module")]
        span = (work[0], work[-1]) if work else ("", "")
        ended = _graph_break(gm)
        salt = hashlib.sha1("\n".join(node.name for node in gm.graph.nodes).encode(),
                            usedforsecurity=False).hexdigest()[:16]

        def inner(graph: fx.GraphModule, inputs: Sequence[Any], **kwargs: Any) -> Any:
            backward = bool(kwargs.get("is_backward", False))
            if backward:  # read before Inductor's post-grad passes rewrite the graph
                nodes = backward_nodes(graph, resolve)
            # again here: a backward graph is compiled at the first backward, after this
            # backend has returned
            with inductor_config.patch(self._patches(salt)), \
                    (_backward_provenance() if backward else nullcontext()):
                compiled = compile_fx_inner(graph, inputs, **kwargs)
            if backward:
                self._record_backward(compiled, nodes)
            else:
                self._record(compiled, modules, views, span, ended)
            return compiled

        # functorch's own cache would hand back a compiled graph without calling ``inner``
        uncached = ({"enable_autograd_cache": False}
                    if hasattr(functorch_config, "enable_autograd_cache") else {})
        with functorch_config.patch(uncached), inductor_config.patch(self._patches(salt)):
            return compile_fx(gm, example_inputs, inner_compile=inner,
                              config_patches=dict(self.options))

    def _frames(self, gm: fx.GraphModule, example_inputs: Sequence[Any],
                spelled: Mapping[str, str]) -> dict[str, str]:
        """The path of the module each of the traced frame's locals is (``self``: the
        module whose frame Dynamo traced ``gm`` from; ``___stack0``: a module a resumed frame
        after a graph break was about to call), as the parameters the graph reads say;
        a local no parameter names is left out (``self`` then: the root's)."""
        frames: dict[str, str] = {}
        placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
        for node, example in zip(placeholders, example_inputs, strict=False):
            owner = self.owners.get(id(example))
            traced = spelled.get(node.name, "")
            local = _local(traced)
            if owner is None or local is None or local in frames:
                continue
            inner = module_path(traced)
            if owner == inner:
                frames[local] = ""
            elif not inner:
                frames[local] = owner
            elif owner.endswith("." + inner):
                frames[local] = owner[: -len(inner) - 1]
        return frames

    def _patches(self, salt: str) -> dict[str, Any]:
        patches: dict[str, Any] = {"cpp.enable_kernel_profile": True}
        if hasattr(inductor_config.trace, "provenance_tracking_level"):
            patches["trace.provenance_tracking_level"] = 1
        else:
            patches["trace.provenance_tracking"] = True
        if inductor_config.post_grad_custom_post_pass is None and \
                "post_grad_custom_post_pass" not in self.options:
            patches["post_grad_custom_post_pass"] = _CacheName(salt)
        return patches

    def _record(self, compiled: Any, modules: Mapping[str, str], views: set[str],
                span: tuple[str, str],
                ended: tuple[str | None, str | None] = (None, None)) -> None:
        key = str(getattr(compiled, "_fx_graph_cache_key", None))
        text = getattr(compiled, "inductor_provenance_mapping_str", None)
        kernels: list[CompiledKernel] = []
        if text:
            kernels = graph_kernels(json.loads(text), modules, self._known(), views)
        else:
            self._unnamed(key)
        self.graphs.append(CompiledGraph(key, False, kernels, *span, *ended))

    def _record_backward(self, compiled: Any, nodes: BackwardNodes) -> None:
        """A backward graph: its kernels named through its own nodes, each the work of the
        module of the forward node it differentiates (Inductor maps its kernels to the
        backward graph's nodes, not to Dynamo's)."""
        key = str(getattr(compiled, "_fx_graph_cache_key", None))
        text = getattr(compiled, "inductor_provenance_mapping_str", None)
        mapping = json.loads(text) if text else {}
        kernels: list[CompiledKernel] = []
        if "cppCodeToPost" in mapping:
            provenance = {"cppCodeToPost": mapping["cppCodeToPost"],
                          "postToPre": {name: [name] for name in nodes.modules}}
            kernels = graph_kernels(provenance, nodes.modules, self._known(), nodes.views,
                                    nodes.products, nodes.ops)
        else:
            self._unnamed(key)
        self.graphs.append(CompiledGraph(key, True, kernels))

    def _known(self) -> Collection[str]:
        return ({_joined(self.prefix, path) for path in self.known} if self.prefix
                else self.known)

    def _unnamed(self, key: str) -> None:
        self.notes.append(f"graph {key}: Inductor kept no provenance for its kernels, "
                          "so its time is not booked to modules")

    def backward_keys(self) -> set[str]:
        """The keys of the backward graphs recorded."""
        return {graph.key for graph in self.graphs if graph.backward}

    def by_key(self) -> dict[str, list[CompiledKernel]]:
        """Each recorded graph's kernels by its key."""
        return {graph.key: graph.kernels for graph in self.graphs}

    def versions(self) -> dict[str, list[list[CompiledKernel]]]:
        """Each key's recorded graphs' kernels, in the order they were compiled (several
        where graphs share a key: the same code traced in several places)."""
        out: dict[str, list[list[CompiledKernel]]] = {}
        for graph in self.graphs:
            out.setdefault(graph.key, []).append(graph.kernels)
        return out


@dataclass
class BackwardNodes:
    """What a backward graph's nodes say, read before Inductor compiles it."""

    modules: dict[str, str]
    """Per node, the model's path of the module of the forward node it comes from."""
    views: set[str]
    """The nodes that name a kernel's module only when it has no other: those that only
    reshape or select, the constants, the nodes named only by what they read."""
    products: list[str]
    """The matrix-product nodes, in graph order."""
    ops: dict[str, str]
    """Each node's ATen operator (``mm``; ``""``: not an operator's node)."""


def _op_name(node: fx.Node) -> str:
    """An ATen node's operator name (``mm`` for ``aten.mm.default``); ``""`` for others."""
    target = node.target
    return str(getattr(target, "_opname", "")) if node.op == "call_function" else ""


def backward_nodes(graph: fx.GraphModule, resolve: Callable[[str], str]) -> BackwardNodes:
    """The module of each node of a backward graph (``resolve``: the model's path of a
    module as Dynamo spells it): that of the forward node it differentiates, which
    AOTAutograd copies onto it (``fwd_nn_module_stack``), or its own (a forward node
    recomputed in the backward); a node with neither that reads nodes with modules, their
    deepest common ancestor: the engine's sum of a tensor's gradients from several consumers
    (a residual block's two branches: the block's work), a node the joint graph's passes
    created (a matrix product padded to a faster shape). A node with none of these (a
    gradient's placeholder) keeps no module. The autograd sequence number is not read: a
    node that differentiates no forward node carries the last forward operator's."""
    modules: dict[str, str] = {}
    read_only: set[str] = set()
    for node in graph.graph.nodes:
        spelling = innermost_spelling(node.meta.get("fwd_nn_module_stack")
                                      or node.meta.get("nn_module_stack"))
        if spelling:
            modules[node.name] = resolve(spelling)
        elif node.op == "call_function":
            # no stack (a sum of gradients, a node a joint-graph pass created): the work of
            # the modules whose nodes it reads
            read = [modules[item.name] for item in node.all_input_nodes
                    if item.name in modules]
            if read:
                modules[node.name] = common_ancestor(read)
                read_only.add(node.name)
    ops = {node.name: _op_name(node) for node in graph.graph.nodes}
    # a constant (a zero that Inductor shares between the ReLUs' gradients), or a node named
    # only by what it reads, is like a view: it names a kernel's module only when the kernel
    # has nothing else (a sum of the gradients a block's input got, fused into the kernel of
    # the block before it, is that kernel's work)
    constants = {node.name for node in graph.graph.nodes
                 if node.op == "call_function" and not node.all_input_nodes}
    return BackwardNodes(modules, constants | read_only | {name for name, op in ops.items()
                                                           if op in VIEW_OPS},
                         [name for name, op in ops.items() if op in PRODUCT_OPS], ops)


def _backward_provenance() -> AbstractContextManager[None]:
    """Inductor writes a graph's kernel-to-node map only while it knows the graph Dynamo
    traced, which a backward graph, compiled at the first backward, has not; inside its
    ``reset_provenance_globals`` (fresh provenance state, the old put back on exit) the map
    is written for the backward graph's own nodes."""
    reset = getattr(inductor_debug, "reset_provenance_globals", None)
    return reset() if reset is not None else nullcontext()


_LOCAL = re.compile(r"^L\[['\"]([^'\"]*)['\"]\]")


def _local(traced: str) -> str | None:
    """The frame's local a spelling starts from (``self``, ``___stack0``), if any."""
    found = _LOCAL.match(traced)
    return found.group(1) if found else None


def _graph_break(gm: fx.GraphModule) -> tuple[str | None, str | None]:
    """Why Dynamo ended ``gm`` where a graph break did (the first line of its reason) and the
    user's line it broke at; ``(None, None)`` where the traced code ended (Dynamo puts its
    ``GraphCompileReason`` on the graph it hands a backend)."""
    reason = getattr(gm, "compile_subgraph_reason", None)
    if reason is None or not getattr(reason, "graph_break", False):
        return None, None
    stack = getattr(reason, "user_stack", None) or []
    at = f"{stack[-1].filename}:{stack[-1].lineno} in {stack[-1].name}" if stack else None
    return str(reason.reason).strip().splitlines()[0], at


def _joined(prefix: str, path: str) -> str:
    """``path`` inside the module at ``prefix`` (``""``: the root)."""
    return ".".join(part for part in (prefix, path) if part)


def _only_views(node: fx.Node) -> bool:
    """Whether Dynamo's ``node`` only reshapes or selects (a method or function named in
    :data:`~moduleprofiler.timing.compiled.kernels.VIEW_OPS`)."""
    if node.op not in ("call_method", "call_function"):
        return False
    target = node.target
    name = target if isinstance(target, str) else getattr(target, "__name__", "")
    return name in VIEW_OPS


def _compile_context(compiled: Any) -> Any:
    """The Dynamo context of a ``torch.compile`` wrapper, or of the compiled call a module
    compiled in place holds (``None``: not found)."""
    context = getattr(compiled, "dynamo_ctx", None)
    if context is None:  # module.compile(): the context is held by the compiled call
        for cell in getattr(compiled, "__closure__", None) or ():
            if hasattr(cell.cell_contents, "callback"):
                context = cell.cell_contents
    return context


def _inductor_options(compiled: Any) -> tuple[dict[str, Any], str | None]:
    """The Inductor options of a ``torch.compile`` wrapper (read, never changed) and a note
    when they cannot be read (then Inductor's defaults are used)."""
    backend = getattr(_compile_context(compiled), "callback", None)
    for _ in range(8):
        if backend is None:
            break
        if getattr(backend, "compiler_name", None) == "inductor":
            return dict(getattr(backend, "config", {}) or {}), None
        if getattr(backend, "compiler_name", None) is not None:
            return {}, (f"the model is compiled with the {backend.compiler_name!r} backend; "
                        "the compiled clock times it as compiled by Inductor")
        backend = (getattr(backend, "_torchdynamo_orig_backend", None)
                   or getattr(backend, "_torchdynamo_orig_callable", None))
    return {}, "the model's compile options could not be read: Inductor's defaults are used"


@dataclass(frozen=True)
class CompileSettings:
    """What a model's own ``torch.compile`` asked for, which every compile of the clock
    repeats (:func:`recorded_compile`): the clock's program is the user's only while its
    options, shape handling and graph-break policy are the user's. Its backend is not kept:
    the clock compiles with Inductor (the note of :class:`CompiledModel` says so)."""

    inductor: Mapping[str, Any] = field(default_factory=dict)
    """Inductor options (what ``torch.compile``'s ``mode`` and ``options`` set)."""
    dynamic: bool | None = None
    """``torch.compile``'s ``dynamic``: ``True`` compiles kernels for any size, so the
    clock's compile does too. ``None`` (Dynamo's default, a size made dynamic when a call
    brings another) starts this compile with no history: static kernels for the timed input,
    even where the model's own compile has gone dynamic (docs/compiled.md, Limits)."""
    fullgraph: bool = False
    """``torch.compile``'s ``fullgraph``: a graph break raises instead of splitting the
    program, in the clock's compile as in the user's."""

    def over(self, options: Mapping[str, Any] | None) -> CompileSettings:
        """These settings with ``options`` over their Inductor options."""
        return replace(self, inductor={**self.inductor, **(options or {})})

    def key(self) -> tuple[str, bool | None, bool]:
        """The settings as a hashable key (two compiles with equal keys are one program)."""
        return repr(sorted(self.inductor.items())), self.dynamic, self.fullgraph


class CompiledModel(NamedTuple):
    """What the clock compiles again of a compiled model, and how."""

    original: nn.Module
    """The module that was compiled (a wrapper's ``_orig_mod``, or the model itself)."""
    settings: CompileSettings
    """Its ``torch.compile``'s options, which the clock's compile repeats."""
    note: str | None
    """Why the clock's compile is not the model's own (another backend...), when it is
    not."""


def compiled_original(module: nn.Module) -> CompiledModel | None:
    """For a compiled model (``torch.compile(model)``, or ``model.compile()``): the module
    that was compiled, its compile settings and a note; ``None`` for a model not compiled."""
    original = orig_mod_of(module)
    compiled = module if original is not None else getattr(module, "_compiled_call_impl", None)
    if compiled is None:
        return None
    options, note = _inductor_options(compiled)
    context = _compile_context(compiled)
    dynamic = getattr(context, "_dynamic", None)
    settings = CompileSettings(options, dynamic if isinstance(dynamic, bool) else None,
                               getattr(context, "fullgraph", False) is True)
    return CompiledModel(original if original is not None else module, settings, note)


def _call(module: nn.Module, *args: Any, **kwargs: Any) -> Any:
    """``module``'s own call (its hooks and forward), past any compiled call it carries."""
    return module._call_impl(*args, **kwargs)


def eager_call(module: nn.Module) -> Any:
    """``module``'s own eager call, past a compiled call it carries (``model.compile()``)."""
    return functools.partial(_call, module)


_compiles = itertools.count()


def recorded_compile(module: nn.Module, settings: CompileSettings | None = None, *,
                     prefix: str = "",
                     into: GraphRecorder | None = None) -> tuple[Any, GraphRecorder]:
    """``module`` compiled by a :class:`GraphRecorder` (compiling happens at the first call,
    as with ``torch.compile``): the callable and its recorder.

    ``settings``: the model's own ``torch.compile`` options (Inductor's defaults for a model
    compiled by none), every one of them given to this compile, so that its program is the
    model's (a model compiled with ``fullgraph=True`` raises at a graph break here too).
    ``prefix``: ``module``'s path in the model it is timed in (a compiled submodule's), put
    before the module paths recorded. ``into``: a recorder whose lists of graphs and notes
    this one appends to (several compiled submodules of one model, recorded as one program).

    What is compiled is a new function object each time, calling ``module``'s own call
    (``_call_impl``, as ``module.compile()`` does, so a model compiled in place is compiled
    afresh rather than through its compiled call): Dynamo keeps compiled code on the code
    object it traced, so each recorder's compiled code goes with its function instead of
    piling up on ``nn.Module``'s (where Dynamo's limit of recompilations per code object would
    soon send the user's own compiled modules back to eager).
    """
    known = {path for path, _ in module.named_modules()}
    owners = {id(tensor): path for path, sub in module.named_modules()
              for tensor in (*sub.parameters(recurse=False), *sub.buffers(recurse=False))}
    settings = settings if settings is not None else CompileSettings()
    recorder = GraphRecorder(known, owners, dict(settings.inductor), prefix=prefix)
    if into is not None:
        recorder.graphs, recorder.notes = into.graphs, into.notes
    code = _call.__code__.replace(co_name=f"moduleprofiler_compiled_{next(_compiles)}")
    fresh = types.FunctionType(code, _call.__globals__, code.co_name)
    compiled = torch.compile(fresh, backend=recorder, dynamic=settings.dynamic,
                             fullgraph=settings.fullgraph)
    return functools.partial(compiled, module), recorder
