"""A compiled model's recorded compile, kept for the next pass over the same model.

The compiled clock compiles the model's original module once more
(:func:`~moduleprofiler.timing.compiled.capture.recorded_compile`). Compiled anew for every
pass, that program is traced again by Dynamo and AOTAutograd and loaded again from Inductor's
cache: 4 s on ResNet-50; and under ``max-autotune`` (coordinate-descent tuning on), the first
load of its kernels from the cache in a process tunes each of them again when it first runs
(11 s more on ResNet-50, on an H200). So a recorded compile is kept for a later pass, which
calls the code Dynamo already compiled (its guards still decide whether to compile again):

* per module, held weakly: nothing is kept once the model is gone, and nothing is written on
  it;
* for the same compile settings (Inductor options, ``dynamic``, ``fullgraph``), the same
  kind of pass (forward, or training step), an input of the same structure (tensors' shapes,
  dtypes, layouts, devices, strides and ``requires_grad``; other values equal), and the same
  submodules, parameters and buffers (the same objects at the same paths);
* the last :data:`KEPT` such compiles per module.

A compile whose input cannot be described that way (an object of another type) is not kept.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from moduleprofiler.timing.compiled.capture import CompileSettings, GraphRecorder

KEPT = 4
"""Recorded compiles kept per module (the oldest goes first)."""

_PLAIN = (int, float, bool, str, bytes, type(None))


@dataclass
class RecordedCompile:
    """A module's recorded compile: the compiled function (called with the module first) and
    its recorder."""

    function: Callable[..., Any]
    recorder: GraphRecorder
    break_reasons: Counter[str] = field(default_factory=Counter)
    """Why Dynamo broke the graph while compiling it (reason -> times): kept with it, since a
    pass that calls the code already compiled sees no break happen."""


_kept: weakref.WeakKeyDictionary[nn.Module, dict[Hashable, RecordedCompile]] = \
    weakref.WeakKeyDictionary()


def signature(value: Any) -> Hashable | None:
    """What Dynamo's guards read of an input, as a key: a tensor's shape, dtype, layout,
    device, strides and ``requires_grad``; a plain value itself; containers item by item. ``None``
    for anything else (an input that is not kept)."""
    if isinstance(value, torch.Tensor):
        try:
            strides = tuple(value.stride())
        except (RuntimeError, NotImplementedError):  # a tensor without strides (nested)
            return None
        return ("tensor", tuple(value.shape), str(value.dtype), str(value.layout),
                str(value.device), strides, value.requires_grad)
    if isinstance(value, _PLAIN):
        return (type(value).__name__, value)
    if isinstance(value, (tuple, list)):
        items = tuple(signature(item) for item in value)
        return None if None in items else (type(value).__name__, items)
    if isinstance(value, Mapping):
        entries = tuple((key, signature(item)) for key, item in value.items())
        if any(item is None or not isinstance(key, _PLAIN) for key, item in entries):
            return None
        return ("mapping", entries)
    return None


def _structure(module: nn.Module) -> Hashable:
    """The module's submodules, parameters and buffers, as the objects they are now."""
    return (tuple((path, id(sub)) for path, sub in module.named_modules()),
            tuple(id(tensor) for tensor in module.parameters()),
            tuple(id(tensor) for tensor in module.buffers()))


def _key(module: nn.Module, settings: CompileSettings, input: Any,
         backward: bool) -> Hashable | None:
    shape = signature(input)
    if shape is None:
        return None
    return (settings.key(), backward, shape, _structure(module))


def kept_compile(module: nn.Module, settings: CompileSettings, input: Any, backward: bool,
                 compile: Callable[[], RecordedCompile]) -> RecordedCompile:
    """The recorded compile kept for ``module`` with these compile ``settings``, ``input``
    and kind of pass (``backward``: a training step), or a new one from ``compile()``,
    kept."""
    key = _key(module, settings, input, backward)
    if key is None:
        return compile()
    kept = _kept.setdefault(module, {})
    found = kept.pop(key, None)
    if found is None:
        found = compile()
    kept[key] = found  # the newest last
    while len(kept) > KEPT:
        kept.pop(next(iter(kept)))
    return found
