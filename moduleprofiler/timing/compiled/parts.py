"""Compiled submodules inside an eager model: the program the compiled clock times.

A model whose submodules were compiled (``model.layer3 = torch.compile(model.layer3)``, or
``model.layer3.compile()``) runs its own code eagerly and each compiled submodule's compiled
graphs. The program timed is the same one, built beside the model: a *shadow* of its module
tree (a shallow copy of each eager module, sharing its parameters, buffers and the user's
hooks) in which each compiled submodule is called through a recorded compile of it
(:func:`~.capture.recorded_compile`: its own Inductor options, plus provenance, so that its
kernels can be named by module), and every call is inside a host range named by its module
path. The kernels a compiled graph launched are booked through provenance; the ones an eager
module launched to the innermost range around their launch (:mod:`.booking`).

The user's modules are never written to: the shadows are new objects (their hook tables are
copies), and the user's own compiled code is left as it is. The eager call of the model (its
call tree, and the pass's hooked blocks) runs under ``torch.compiler.set_stance
("force_eager")``, which runs every compiled submodule eagerly for the call's duration.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.autograd.profiler import record_function

from moduleprofiler.timing.compiled.capture import (
    CompileSettings,
    GraphRecorder,
    compiled_original,
    recorded_compile,
)

MODULE_RANGE = "moduleprofiler:module:"
"""Name of the host range around each module call of the timed program, followed by the
module's path."""

_HOOK_TABLES = ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks",
                "_forward_hooks_with_kwargs", "_forward_hooks_always_called")


@dataclass(frozen=True)
class CompiledPart:
    """One compiled submodule of an eager model."""

    path: str
    """Where it is registered: a ``torch.compile`` wrapper's path, or the path of the module
    compiled in place."""
    original: nn.Module
    """The module that was compiled (the wrapper's ``_orig_mod``, or the module itself)."""
    original_path: str
    """``original``'s path in the model (``<path>._orig_mod`` for a wrapper)."""
    settings: CompileSettings
    """Its own ``torch.compile``'s options, which the clock's compile of it repeats."""
    note: str | None


def compiled_parts(model: nn.Module) -> list[CompiledPart]:
    """The outermost compiled submodules of ``model`` (not the root), in ``named_modules()``
    order; empty for a model with none."""
    parts: list[CompiledPart] = []
    for path, module in model.named_modules():
        if not path or any(path.startswith(part.path + ".") for part in parts):
            continue
        found = compiled_original(module)
        if found is None:
            continue
        parts.append(CompiledPart(path, found.original,
                                  path if found.original is module else f"{path}._orig_mod",
                                  found.settings, found.note))
    return parts


class _Part(nn.Module):
    """Stands for a compiled submodule in the shadow tree: calls its recorded compile inside
    the submodule's range; anything else is read from the submodule. A module (with no
    children of its own), so that containers take it (``ModuleList``'s slices build new
    lists)."""

    def __init__(self, slot: nn.Module, call: Callable[..., Any], path: str | None) -> None:
        super().__init__()
        # not registered: the shadow's tree ends here
        object.__setattr__(self, "_slot", slot)
        object.__setattr__(self, "_call", call)
        object.__setattr__(self, "_range", None if path is None else MODULE_RANGE + path)
        object.__setattr__(self, "training", slot.training)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._range is None:
            return self._call(*args, **kwargs)
        with record_function(self._range):
            return self._call(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_slot"], name)


def _ranged(path: str) -> tuple[Callable[..., None], Callable[..., None]]:
    """A pre-hook and an always-called hook that open and close the range of ``path``."""
    open_: list[Any] = []

    def enter(module: nn.Module, args: Any) -> None:
        scope = record_function(MODULE_RANGE + path)
        scope.__enter__()
        open_.append(scope)

    def leave(module: nn.Module, args: Any, output: Any) -> None:
        if open_:
            open_.pop().__exit__(None, None, None)

    return enter, leave


def _shadow(module: nn.Module, path: str, parts: Mapping[str, _Part],
            made: dict[int, Any], ranged: bool = True) -> Any:
    """``module``'s shadow: a shallow copy with copied hook tables plus its range's hooks
    (``ranged``), whose children are their shadows (a compiled part: its :class:`_Part`)."""
    if id(module) in made:  # a module registered twice keeps one shadow
        return made[id(module)]
    if path in parts:
        made[id(module)] = parts[path]
        return parts[path]
    shadow = copy.copy(module)
    for table in _HOOK_TABLES:
        setattr(shadow, table, OrderedDict(getattr(module, table)))
    made[id(module)] = shadow
    shadow._modules = {
        name: None if child is None else _shadow(child, f"{path}.{name}" if path else name,
                                                 parts, made, ranged)
        for name, child in module._modules.items()}
    if not ranged:
        return shadow
    enter, leave = _ranged(path)
    shadow.register_forward_pre_hook(enter, prepend=True)
    shadow.register_forward_hook(leave, always_call=True)
    return shadow


@dataclass
class PartlyCompiled:
    """An eager model with compiled submodules, taken apart to be timed."""

    parts: list[CompiledPart]
    shadow: nn.Module
    """The program timed: the model's shadow tree, each part through its recorded compile."""
    recorder: GraphRecorder
    """Every part's recorded graphs (their kernels' module paths are the model's)."""
    plain: nn.Module
    """The same program with no range: its calls are the model's latency (the user's own
    compiled code is not called, which would compile it for the pass's grad mode)."""

    @classmethod
    def of(cls, model: nn.Module) -> PartlyCompiled | None:
        """``model`` taken apart (``None``: no submodule of it is compiled)."""
        parts = compiled_parts(model)
        if not parts:
            return None
        recorder = GraphRecorder({path for path, _ in model.named_modules()})
        calls: dict[str, _Part] = {}
        plain: dict[str, _Part] = {}
        for part in parts:
            compiled, _ = recorded_compile(part.original, part.settings,
                                           prefix=part.original_path, into=recorder)
            slot = model.get_submodule(part.path)
            calls[part.path] = _Part(slot, compiled, part.path)
            plain[part.path] = _Part(slot, compiled, None)
        recorder.notes.extend(part.note for part in parts if part.note is not None)
        return cls(parts, _shadow(model, "", calls, {}), recorder,
                   _shadow(model, "", plain, {}, ranged=False))

    def note(self) -> str:
        """What the timing of such a model is, said once."""
        where = ", ".join(repr(part.path) for part in self.parts)
        return (f"compiled submodules ({where}) are timed compiled, the rest of the model "
                "eagerly, in one program: a compiled graph's kernels are booked to modules "
                "through Inductor's provenance, an eager module's kernels to the module "
                "that launched them")


def forced_eager(model: Callable[..., Any]) -> Callable[..., Any]:
    """``model``'s call with every compiled submodule run eagerly (the call tree the records
    take, the pass's hooked blocks)."""
    def call(*args: Any, **kwargs: Any) -> Any:
        with torch.compiler.set_stance("force_eager"):
            return model(*args, **kwargs)

    return call
