"""Leaving the user's model exactly as we found it: the one snapshot/restore every pass uses.

:func:`preserved_state` restores, even when the pass raises:

* every module's own ``training`` flag (``nn.Module.train(mode)`` would set every descendant to
  one mode and undo a deliberately frozen ``BatchNorm`` inside a training model);
* buffer values (BatchNorm running statistics and ``num_batches_tracked``, a step counter or a
  cache a module writes even in eval mode), so a pass never updates them: a buffer the forward
  replaced (``self.state = new``) gets its own tensor back, one it resized in place (an observer
  going per-channel) its own shape; a lazy module's buffers
  are snapshotted right after they materialise (in the pass), so they too are left as
  initialised, not as the pass's forward updated them (buffers only torch's own eval-mode batch
  and instance norms hold are not copied: those layers only read them);
* the weight that the forward pre-hooks of torch's older reparametrizations (``weight_norm``,
  ``spectral_norm`` and pruning in ``torch.nn.utils``) compute on every call and set as a plain
  attribute of the module (``module.weight``, not a parameter): the module gets its own
  tensor back, not the pass's (computed under ``no_grad``; by a spectral norm in training
  mode, from power-iteration vectors that are themselves restored);
* the cache of ``torch.nn.utils.parametrize.cached()``, when the pass runs inside that block:
  the parametrized tensors the pass computed (under ``no_grad``, so without a graph) are taken
  out of it again, and the model's next forward in the block computes its own;
* with ``grads=True`` (passes that call ``backward()``), every parameter's ``.grad`` (and that
  of the input leaves a real ``loss.backward()`` reaches): set aside before the pass (the pass
  starts like a step after ``zero_grad(set_to_none=True)``) and put back after it; gradients
  the pass created are dropped;
* with ``input`` (the call's input), the tensors in it that the block writes in place (a
  forward's ``x.mul_(2)``): their values come back, so the caller's input is as they gave it
  (a pass that runs the model a thousand times would have doubled it a thousand times) and a
  forward after the pass sees what it would have seen without it; up to
  :data:`INPUT_COPY_BYTES` of input is copied, a write past it is named in a warning;
* the version counter (``tensor._version``) of every tensor written back: autograd checks it
  at ``backward()``, so a graph the user built before the pass (a BatchNorm in training mode
  saves its running statistics) would otherwise raise "modified by an inplace operation",
  though the values it saved are back, bit for bit;
* the random number generators (the CPU's, every initialised CUDA device's and those of another
  accelerator in use, :func:`~moduleprofiler.devices.rng_states`): a Dropout run
  by the pass would otherwise shift every later random draw, and training with a profiling
  pass in it would diverge from training without. A lazy module the pass materialises
  (``nn.LazyLinear``) is the exception: its initial weights were drawn from the generators,
  which are left where the last such initialisation left them, as the model's own first
  forward would have left them. Put back, the next draws (the first Dropout mask, a data
  augmentation) would repeat the numbers the weights were made of. A ``torch.Generator`` the
  model holds as a module attribute (its own noise, ``torch.randn(..., generator=self.gen)``)
  is put back too.

``requires_grad`` is never changed by a pass; parameters are never written by it. The one
parameter torch's own layers write in their forward, the weight of an ``nn.Embedding`` or
``nn.EmbeddingBag`` with ``max_norm`` (its looked-up rows renormalised in place), is restored
like a buffer. A model whose own forward writes other parameters in place (a momentum encoder
updated inside ``forward``, as in MoCo) cannot be put back without copying every parameter
before each pass; such writes are found from the parameters' version counters (one integer read
each) and named in a :class:`ModelStateWarning`, never left silent.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack, contextmanager, nullcontext
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.modules.lazy import LazyModuleMixin
from torch.nn.parameter import UninitializedBuffer, UninitializedParameter, is_lazy
from torch.nn.utils import parametrize
from torch.nn.utils.prune import BasePruningMethod
from torch.nn.utils.spectral_norm import SpectralNorm
from torch.nn.utils.weight_norm import WeightNorm
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from moduleprofiler.devices import rng_states, set_rng_states
from moduleprofiler.errors import ProfilingError
from moduleprofiler.shapes import iter_tensors
from moduleprofiler.warn import warn

_PARAMETER = nn.Parameter
_GENERATOR = torch.Generator

_TORCH_NORM_FORWARDS = frozenset(
    cls.forward for cls in (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm,
                            nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d))


def _reads_only(module: nn.Module) -> bool:
    """Whether ``module`` provably leaves its buffers alone: one of torch's batch or instance
    norms in eval mode (it reads its running statistics and writes nothing), with torch's own
    forward. Snapshotting its buffers would only cost time (ResNet-50 has 159 of them)."""
    return (not module.training and isinstance(module, nn.modules.batchnorm._NormBase)
            and type(module).forward in _TORCH_NORM_FORWARDS)


_Slot = tuple[dict[str, Any], str, Tensor]
"""A module's buffer table, a name in it and the tensor it held before the pass."""

_Saved = tuple[Tensor, Tensor, int | None]
"""A tensor the pass may write, a host copy of its value and its version counter before the
pass (``None`` for an inference tensor, which keeps none)."""

_NOTHING = nullcontext()
"""The context of a write that needs none (reusable: ``nullcontext`` keeps no state)."""

_set_versions: Callable[[tuple[Tensor, ...], tuple[int, ...]], None] | None = getattr(
    torch._C._autograd, "_unsafe_set_version_counter", None)


def _version(tensor: Tensor) -> int | None:
    return None if tensor.is_inference() else tensor._version


def restore_versions(saved: Sequence[tuple[Tensor, int | None]]) -> None:
    """Set each tensor's version counter back to the number saved with it, after its value was
    written back exactly: autograd then accepts a graph that saved the tensor before the pass
    (``torch.autograd.graph._unsafe_preserve_version_counter`` does the same, for the same
    case). Only for values put back bit for bit: a graph that saved the tensor would otherwise
    use the changed value without an error."""
    changed = [(tensor, version) for tensor, version in saved
               if version is not None and tensor._version != version]
    if changed and _set_versions is not None:
        _set_versions(tuple(t for t, _ in changed), tuple(v for _, v in changed))


def _buffers(modules: Sequence[nn.Module]
             ) -> tuple[list[Tensor], list[_Slot], list[nn.Module]]:
    """Every distinct buffer a pass could write: all of them but those only read by eval-mode
    norm layers (a buffer shared with any other module is kept); the table slots holding them
    (a forward may replace a buffer, ``self.state = new``, instead of writing it); and the
    modules holding a lazy buffer not materialised yet. One loop over the modules with
    buffers."""
    unique: dict[int, Tensor] = {}
    slots: list[_Slot] = []
    lazy: list[nn.Module] = []
    for module in modules:
        table = module._buffers
        if not table:
            continue
        kept = not _reads_only(module)
        for name, buffer in table.items():
            if buffer is None:
                continue
            if kept:
                unique.setdefault(id(buffer), buffer)
                slots.append((table, name, buffer))
            if type(buffer) is not Tensor and isinstance(buffer, UninitializedBuffer) and (
                    not lazy or lazy[-1] is not module):
                lazy.append(module)
    return list(unique.values()), slots, lazy


INPUT_COPY_BYTES = 1 << 30
"""How many bytes of the caller's input a pass copies to the host before it runs, so that what
the forward writes in place can be put back: a batch beyond it (each tensor in the order the
input lists them) is not copied, since a second copy of it could exhaust the host's memory,
and a write to it is named in a warning instead."""


def _input_copies(tensors: list[Tensor]) -> tuple[list[_Saved], list[tuple[Tensor, int]]]:
    """Host copies of ``tensors`` up to :data:`INPUT_COPY_BYTES` in all, and the tensors past
    it with their version counters (inference tensors, which keep none, aside)."""
    copied: list[Tensor] = []
    watched: list[tuple[Tensor, int]] = []
    total = 0
    for tensor in tensors:
        size = tensor.numel() * tensor.element_size()
        if total + size <= INPUT_COPY_BYTES:
            copied.append(tensor)
            total += size
        elif (version := _version(tensor)) is not None:
            watched.append((tensor, version))
    return _snapshot(copied), watched


def _warn_written_input(watched: list[tuple[Tensor, int]]) -> None:
    """Name, in a :class:`ModelStateWarning`, the input tensors past the copy budget that the
    pass's forward wrote in place (their version counter moved)."""
    written = [tensor for tensor, version in watched if tensor._version != version]
    if written:
        shapes = ", ".join(str(tuple(tensor.shape)) for tensor in written[:3])
        warn(ModelStateWarning(
            f"the model's forward wrote {len(written)} input tensor(s) in place during the pass "
            f"({shapes}); inputs beyond {INPUT_COPY_BYTES >> 20} MiB are not copied before a "
            "pass, so they keep the values the pass's forward wrote: pass a copy if that "
            "matters"))


def _plain_tensors(input: Any) -> list[Tensor]:
    """The distinct dense tensors of ``input`` whose values a host copy can hold and put back
    (not nested, sparse or wrapper-subclass tensors such as ``DTensor``)."""
    found: dict[int, Tensor] = {}
    for tensor in iter_tensors(input):
        if (tensor.layout == torch.strided and not tensor.is_nested
                and not is_traceable_wrapper_subclass(tensor)):
            found.setdefault(id(tensor), tensor)
    return list(found.values())


def _restore(saved: list[_Saved], slots: list[_Slot]) -> None:
    """Put every slot's own tensor back where the pass replaced it, and every saved value back
    into its tensor, in its saved shape where the pass resized it in place, with its version
    counter as it was."""
    for table, name, buffer in slots:
        # no ``table.get``: a TorchScript module's tables (torch.jit's OrderedDictWrapper)
        # have only ``in``, ``[]`` and ``items``
        if name not in table or table[name] is not buffer:
            table[name] = buffer
    with torch.no_grad():
        for buffer, value, version in saved:
            # an inference tensor (a model built under ``torch.inference_mode()``) takes an
            # in-place write only in inference mode; it keeps no version counter
            with torch.inference_mode() if version is None else _NOTHING:
                if buffer.shape != value.shape:  # the pass resized it in place: resize it back
                    buffer.resize_(value.shape)
                buffer.copy_(value)
    restore_versions([(buffer, version) for buffer, _, version in saved])


def _drop_registered(modules: Sequence[nn.Module], buffer_counts: list[int],
                     parameter_counts: list[int]) -> None:
    """Take out the buffers and parameters registered during the block: the last entries of
    each module's tables beyond the counts it held before."""
    if ([len(module._buffers) for module in modules] == buffer_counts
            and [len(module._parameters) for module in modules] == parameter_counts):
        return  # nothing registered (two list comparisons, cheaper than the loop below)
    for module, buffer_count, parameter_count in zip(modules, buffer_counts, parameter_counts):
        table = module._buffers
        if len(table) > buffer_count:
            for name in list(table)[buffer_count:]:
                del table[name]
                module._non_persistent_buffers_set.discard(name)
        parameters = module._parameters
        if len(parameters) > parameter_count:
            for name in list(parameters)[parameter_count:]:
                del parameters[name]


def _hook_weights(modules: Sequence[nn.Module]) -> list[_Slot]:
    """The plain attributes (``module.weight``) that the forward pre-hooks of torch's older
    reparametrizations set on every call, as slots of the modules' ``__dict__``: a hook of
    ``weight_norm`` or ``spectral_norm`` names it ``name``, a pruning method
    ``_tensor_name``."""
    slots: list[_Slot] = []
    for module in modules:
        hooks = module._forward_pre_hooks
        if not hooks:  # the usual case: one dict read
            continue
        own = module.__dict__
        for hook in hooks.values():
            if isinstance(hook, (WeightNorm, SpectralNorm)):
                name = hook.name
            elif isinstance(hook, BasePruningMethod):
                name = hook._tensor_name
            else:
                continue
            weight = own.get(name)
            if isinstance(weight, Tensor):
                slots.append((own, name, weight))
    return slots


def _written_weights(modules: Sequence[nn.Module]) -> list[Tensor]:
    """The weights of the embeddings with ``max_norm``: their forward renormalises the rows
    it looks up, in place."""
    # the instance attribute read first: half the time of an isinstance test on every module
    return [module.weight for module in modules
            if module.__dict__.get("max_norm") is not None
            and isinstance(module, (nn.Embedding, nn.EmbeddingBag))]


def refuse_stepping_parameters(root: nn.Module, what: str, remedy: str) -> None:
    """A :class:`~moduleprofiler.errors.ProfilingError` when a parameter of ``root`` carries a
    post-accumulate-grad hook (an optimizer stepping inside the backward, torch's "optimizer
    in backward"): the real ``loss.backward()`` of ``what`` would run it, and the steps it
    takes (parameters, the optimizer's own state) cannot be put back."""
    names = [name for name, parameter in root.named_parameters()
             # torch keeps these hooks in a private dict (``register_post_accumulate_grad_hook``)
             if getattr(parameter, "_post_accumulate_grad_hooks", None)]
    if names:
        shown = ", ".join(repr(name) for name in names[:3]) + (", ..." if len(names) > 3 else "")
        raise ProfilingError(
            f"{what} runs a real loss.backward(), which would run the post-accumulate-grad hooks "
            f"of {len(names)} parameter(s) ({shown}): an optimizer stepping inside the "
            f"backward, whose steps cannot be put back; {remedy}")


class ModelStateWarning(UserWarning):
    """A pass's forward changed the model in a way the pass cannot undo (parameters the
    model's own forward wrote in place)."""


def _versions(modules: Sequence[nn.Module], restored: Sequence[Tensor]
              ) -> tuple[list[Tensor], list[int]]:
    """Each distinct parameter and its version counter (bumped by every in-place write), in
    two lists, but those ``restored`` anyway, lazy ones not materialised yet (they have no
    data) and inference tensors (a model built under ``torch.inference_mode()``: they keep no
    version counter)."""
    # one dict comprehension, then one list of reads: half the time of a loop that tests each
    # parameter on the way (ResNet-50: 43 against 97 µs a pass on this machine)
    distinct = {id(parameter): parameter for module in modules
                for parameter in module._parameters.values() if parameter is not None}
    for tensor in restored:
        distinct.pop(id(tensor), None)
    # ``is_lazy`` tests torch's plain mixin class: ``isinstance(parameter,
    # UninitializedParameter)`` runs the Parameter metaclass's Python ``__instancecheck__``;
    # a plain Parameter is never lazy, so torch's function is called only for the others
    parameters: list[Tensor] = [parameter for parameter in distinct.values()
                                if type(parameter) is _PARAMETER or not is_lazy(parameter)]
    try:
        return parameters, [parameter._version for parameter in parameters]
    except RuntimeError:  # an inference tensor keeps no version counter to read
        parameters = [parameter for parameter in parameters if not parameter.is_inference()]
        return parameters, [parameter._version for parameter in parameters]


def _warn_written(root: nn.Module, parameters: list[Tensor], versions: list[int]) -> None:
    """Name, in a :class:`ModelStateWarning`, the parameters the pass's forward wrote in place
    (their version counter moved)."""
    now = [parameter._version for parameter in parameters]
    if now == versions:  # one comparison of two lists: nothing was written, the usual case
        return
    written = {id(parameter) for parameter, before, after in zip(parameters, versions, now)
               if after != before}
    names = [name for name, parameter in root.named_parameters(remove_duplicate=False)
             if id(parameter) in written]
    shown = ", ".join(repr(name) for name in names[:5]) + (", ..." if len(names) > 5 else "")
    warn(ModelStateWarning(
        f"the model's forward wrote {len(written)} parameter(s) in place during the pass "
        f"({shown}); parameters are not copied before a pass, so they keep the values the "
        "pass's forward wrote: reload them (load_state_dict) if that matters"))


def _parametrize_cache() -> set[tuple[int, str]] | None:
    """The keys of torch's parametrization cache when a ``parametrize.cached()`` block is
    open (``None`` otherwise: nothing is cached, and nothing needs taking out)."""
    return set(parametrize._cache) if parametrize._cache_enabled else None


def _uncache(kept: set[tuple[int, str]]) -> None:
    """Take the entries made since :func:`_parametrize_cache` out of torch's parametrization
    cache: a weight the pass computed under ``no_grad`` would otherwise be what the model's
    next forward in the user's ``cached()`` block reads, and no gradient would reach the
    parametrization's original parameters."""
    cache = parametrize._cache
    for key in [key for key in cache if key not in kept]:
        del cache[key]


def _parameters(root: nn.Module) -> list[nn.Parameter]:
    unique: dict[int, nn.Parameter] = {}
    for parameter in root.parameters():
        unique.setdefault(id(parameter), parameter)
    return list(unique.values())


def _snapshot(buffers: list[Tensor]) -> list[_Saved]:
    kept = [buffer for buffer in buffers if buffer.device.type != "meta"
            and not isinstance(buffer, (UninitializedBuffer, UninitializedParameter))]
    try:  # one read each (ResNet-50's 159 buffers: 17 µs, 2 % of their copies)
        versions: list[int | None] = [buffer._version for buffer in kept]
    except RuntimeError:  # an inference tensor keeps no version counter to read
        versions = [_version(buffer) for buffer in kept]
    # host copies: a snapshot must not add to the device memory a pass measures
    return [(buffer, buffer.detach().to("cpu", copy=True), version)
            for buffer, version in zip(kept, versions)]


def _lazy_snapshot(saved: list[_Saved]) -> Callable[[nn.Module, Any], None]:
    """A forward pre-hook that adds a lazy module's just-materialised buffers to ``saved``
    (each buffer once, the first time it is seen initialised)."""
    seen: set[int] = set()

    def hook(module: nn.Module, args: Any) -> None:
        fresh = [b for b in module._buffers.values()
                 if b is not None and id(b) not in seen and not isinstance(b, UninitializedBuffer)]
        seen.update(id(b) for b in fresh)
        saved.extend(_snapshot(fresh))

    return hook


def _after_initialisation(states: list[Any]) -> Callable[[nn.Module, Any], None]:
    """A forward pre-hook, registered after a lazy module's own initialisation pre-hook, that
    appends the generators' states once that initialisation has run (its first call in the
    pass)."""
    done: set[int] = set()

    def hook(module: nn.Module, args: Any) -> None:
        if id(module) not in done:
            done.add(id(module))
            states.append(rng_states())

    return hook


def _switch(root: nn.Module, modules: Sequence[nn.Module], mode: bool) -> None:
    """``root.train()`` or ``root.eval()`` (a model may override either); where the model
    refuses it (the module of a ``torch.export`` program raises ``NotImplementedError``: its
    graph was fixed when it was exported), every module's flag is set as ``nn.Module.train``
    would, and put back after the pass as usual."""
    try:
        if mode:
            root.train()
        else:
            root.eval()
    except NotImplementedError:
        for module in modules:
            module.training = mode


def _set_aside(tensors: Iterable[Tensor]) -> list[tuple[Tensor, Tensor | None]]:
    """Set the ``.grad`` of every leaf in ``tensors`` that requires grad to ``None`` and return
    what it was (:func:`_put_back`)."""
    saved = [(t, t.grad) for t in tensors if t.is_leaf and t.requires_grad]
    for tensor, grad in saved:
        if grad is not None:
            tensor.grad = None
    return saved


def _put_back(saved: list[tuple[Tensor, Tensor | None]]) -> None:
    for tensor, grad in saved:
        if tensor.grad is not grad:
            tensor.grad = grad


def _owned_generators(modules: Sequence[nn.Module]) -> list[tuple[torch.Generator, Tensor]]:
    """Each ``torch.Generator`` a module holds as an attribute, with its state now. One
    comprehension over the modules' attributes (ResNet-50's 151 modules: about 70 µs)."""
    return [(value, value.get_state()) for module in modules
            for value in module.__dict__.values() if type(value) is _GENERATOR]


@contextmanager
def preserved_rng() -> Iterator[None]:
    """Run the block and put the random number generators' states back afterwards, even when
    it raises (what :func:`preserved_state` does for a pass, for a block that is not one: the
    command line builds a model and seeds its inputs)."""
    states = rng_states()
    try:
        yield
    finally:
        set_rng_states(states)


@contextmanager
def grads_set_aside(tensors: Iterable[Tensor]) -> Iterator[None]:
    """Run the block with the ``.grad`` of every leaf in ``tensors`` that requires grad set
    to ``None`` (as after ``zero_grad(set_to_none=True)``), and put each one back afterwards,
    even when the block raises: the gradients the block accumulated are dropped, the user's
    own gradient tensors are never written."""
    saved = _set_aside(tensors)
    try:
        yield
    finally:
        _put_back(saved)


@contextmanager
def preserved_state(root: nn.Module, *, eval: bool = False, train: bool = False,
                    grads: bool = False, buffers: bool | None = None,
                    leaves: Iterable[Tensor] = (),
                    modules: Sequence[nn.Module] | None = None,
                    optimizer_steps: bool = False, rng: bool = True,
                    input: Any = None,
                    generators: Sequence[torch.Generator] | None = None) -> Iterator[None]:
    """Run the block with ``root`` in eval mode (``eval=True``), in training mode
    (``train=True``) or as it is, and restore its state afterwards (see the module docstring).

    Args:
        root: the user's model.
        eval: run the block in eval mode: a model in training mode is switched to it
            (``root.eval()``); one already in eval mode keeps every module's own flag (a
            Dropout it left on stays on).
        train: run the block in training mode: a model in eval mode is switched to it
            (``root.train()``); one already training keeps every module's own flag (a
            BatchNorm it froze stays frozen).
        grads: set every ``.grad`` aside for the block and put it back afterwards.
        leaves: with ``grads``, more tensors whose ``.grad`` is set aside the same way (the
            inputs of a backward that accumulates into every leaf it reaches).
        buffers: restore buffer values afterwards (default); ``False`` leaves them as the
            block left them.
        modules: ``list(root.modules())`` when the caller has walked the tree already (read
            only here).
        optimizer_steps: the block steps an optimizer, so parameter writes are the pass's own
            (no :class:`ModelStateWarning` for them).
        rng: put the random number generators' states back afterwards (default): where the
            block materialised a lazy module, as its last initialisation left them (see the
            module docstring); ``False`` leaves them as the block left them.
        input: the input the block runs the model on: its tensors that the block writes in
            place get their values back afterwards (a host copy of each is kept, up to
            :data:`INPUT_COPY_BYTES`; a write to a tensor past it is warned of).
        generators: the ``torch.Generator`` objects ``modules`` hold as attributes, where the
            caller has swept them already (:func:`~moduleprofiler.modules.held_values`; read
            only here): their states are put back with the others.
    """
    if eval and train:
        raise ValueError("preserved_state: eval and train are exclusive")
    if modules is None:
        modules = list(root.modules())  # one traversal, shared by everything below
    # one bool per module (no tuple each: fewer objects for the garbage collector to count)
    flags = [module.training for module in modules]
    saved_grads: list[tuple[Tensor, Tensor | None]] = []
    saved_buffers: list[_Saved] = []
    saved_inputs: list[_Saved] = []
    watched_inputs: list[tuple[Tensor, int]] = []
    slots: list[_Slot] = []
    # how many buffers and parameters each module holds: a forward that registers one (a
    # cache made on its first call) adds it at the end of its table, and it is taken out
    buffer_counts = [len(module._buffers) for module in modules] if buffers is not False \
        else []
    parameter_counts = [len(module._parameters) for module in modules] if buffer_counts \
        else []
    lazy_hooks = ExitStack()
    versions: tuple[list[Tensor], list[int]] = ([], [])
    cached = _parametrize_cache()
    random_states = rng_states() if rng else None
    owned = [] if not rng else _owned_generators(modules) if generators is None \
        else [(generator, generator.get_state()) for generator in generators]
    initialised: list[Any] = []  # the generators after each lazy initialisation in the block
    try:
        # ``train(mode)`` is called (a module may override it) when the model is in the
        # other mode; a model already in ``mode`` keeps each module's own flag, as the user
        # runs it: a BatchNorm or backbone frozen inside a training model
        # (``model.backbone.eval()``), a Dropout left on inside an eval model (MC dropout)
        if eval and root.training:
            _switch(root, modules, False)
        elif train and not root.training:
            _switch(root, modules, True)
        if buffers is not False:
            written, slots, lazy = _buffers(modules)
            slots += _hook_weights(modules)
            weights = _written_weights(modules)
            saved_buffers = _snapshot([*written, *weights])
            if not optimizer_steps:
                versions = _versions(modules, weights)
            for module in lazy:
                # runs after the module's own lazy-initialisation pre-hook, before its forward
                lazy_hooks.enter_context(module.register_forward_pre_hook(
                    _lazy_snapshot(saved_buffers)))
        if rng:
            for module in modules:
                if isinstance(module, LazyModuleMixin) and module.has_uninitialized_params():
                    # registered after the module's own initialisation pre-hook: runs after it
                    lazy_hooks.enter_context(module.register_forward_pre_hook(
                        _after_initialisation(initialised)))
        if grads:
            saved_grads = _set_aside([*_parameters(root), *leaves])
        if input is not None:
            saved_inputs, watched_inputs = _input_copies(_plain_tensors(input))
        yield
    finally:
        try:
            lazy_hooks.close()
            if cached is not None:
                _uncache(cached)
            _put_back(saved_grads)
            if buffer_counts:  # first: a restored slot the forward deleted comes back last
                _drop_registered(modules, buffer_counts, parameter_counts)
            if saved_buffers or slots:
                _restore(saved_buffers, slots)
            if saved_inputs:
                _restore([saved for saved in saved_inputs
                          if saved[2] is not None and saved[0]._version != saved[2]], [])
        finally:  # the flags and generators come back even if a step above raised
            for module, training in zip(modules, flags):
                if module.training is not training:
                    module.training = training
            if random_states is not None:
                set_rng_states(initialised[-1] if initialised else random_states)
            for generator, state in owned:
                generator.set_state(state)
        if versions[0]:
            _warn_written(root, *versions)
        if watched_inputs:
            _warn_written_input(watched_inputs)


@contextmanager
def preserved_optimizer(optimizer: torch.optim.Optimizer | None) -> Iterator[None]:
    """Run the block (which steps ``optimizer``) and put the optimizer's state back
    afterwards, even when the block raises: each parameter's entries (Adam's moments and step
    count, SGD's momentum buffer) as they were, the same tensors written back in place, and
    entries the block added removed, so the user's next step continues from where their own
    training left it. ``None``: nothing to keep."""
    if optimizer is None:
        yield
        return
    saved = {parameter: {key: value.detach().clone() if isinstance(value, Tensor)
                         else copy.deepcopy(value) for key, value in entries.items()}
             for parameter, entries in optimizer.state.items()}
    try:
        yield
    finally:
        state = optimizer.state
        for parameter in [p for p in state if p not in saved]:
            del state[parameter]
        for parameter, entries in saved.items():
            current = state[parameter]
            for key in [k for k in current if k not in entries]:
                del current[key]
            for key, value in entries.items():
                now = current.get(key)
                if isinstance(value, Tensor) and isinstance(now, Tensor) \
                        and now.shape == value.shape and now.dtype == value.dtype:
                    with torch.no_grad():
                        now.copy_(value)
                else:
                    current[key] = value
