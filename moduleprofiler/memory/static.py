"""Static memory: parameter and buffer bytes per module, by dtype, trainable vs frozen.

Each module's numbers cover the module and its descendants with every tensor counted once
(tied weights, a submodule registered twice). A tensor's bytes are ``numel * element_size``;
two distinct ``Parameter`` objects that are the same view of one storage count once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import pandas as pd
from torch import Tensor, nn

from moduleprofiler.records import display_path
from moduleprofiler.shapes import dtype_name
from moduleprofiler.storage import is_lazy, own_nbytes, storage_key, storage_of
from moduleprofiler.tensors import module_tensors


@dataclass(frozen=True)
class ModuleBytes:
    """Static bytes of one module (with its descendants, each tensor once)."""

    param_bytes: int
    own_param_bytes: int
    """Of ``param_bytes``, those of parameters registered directly on the module."""
    buffer_bytes: int
    trainable_param_bytes: int
    frozen_param_bytes: int
    param_bytes_by_dtype: dict[str, int] = field(default_factory=dict)
    buffer_bytes_by_dtype: dict[str, int] = field(default_factory=dict)


def _alias_key(tensor: Tensor) -> tuple[object, ...]:
    """Same key for tensors that are the same elements of the same storage."""
    storage = storage_of(tensor)
    if storage is None:
        return ("id", id(tensor))
    return (storage_key(storage), tensor.storage_offset(), tuple(tensor.shape),
            tuple(tensor.stride()), tensor.dtype)


def _unique(tensors: Iterable[Tensor]) -> list[Tensor]:
    seen: dict[tuple[object, ...], Tensor] = {}
    for tensor in tensors:
        seen.setdefault(_alias_key(tensor), tensor)
    return list(seen.values())


def _by_dtype(tensors: Iterable[Tensor]) -> dict[str, int]:
    totals: dict[str, int] = {}
    for tensor in tensors:
        name = dtype_name(tensor.dtype)
        totals[name] = totals.get(name, 0) + own_nbytes(tensor)
    return totals


def module_bytes(module: nn.Module) -> dict[str, ModuleBytes]:
    """:class:`ModuleBytes` for every module path of ``module`` (``named_modules()`` order).

    One traversal: each module's tensor set is its own tensors joined with its children's
    sets, so a tensor shared between submodules is counted once at every level."""
    params, buffers = module_tensors(module)

    result: dict[str, ModuleBytes] = {}
    for path, current in module.named_modules():
        module_params = _unique(params[id(current)].values())
        module_buffers = _unique(buffers[id(current)].values())
        own = _unique(p for p in current._parameters.values() if p is not None)
        trainable = sum(own_nbytes(p) for p in module_params if p.requires_grad)
        total = sum(own_nbytes(p) for p in module_params)
        result[path] = ModuleBytes(
            param_bytes=total,
            own_param_bytes=sum(own_nbytes(p) for p in own),
            buffer_bytes=sum(own_nbytes(b) for b in module_buffers),
            trainable_param_bytes=trainable,
            frozen_param_bytes=total - trainable,
            param_bytes_by_dtype=_by_dtype(module_params),
            buffer_bytes_by_dtype=_by_dtype(module_buffers),
        )
    return result


def parameter_memory(module: nn.Module) -> pd.DataFrame:
    """One row per module (``named_modules()`` order; the root, ``__root__``, is the total).

    Columns: ``module``, ``type``, ``depth``, ``param_bytes``, ``own_param_bytes``,
    ``buffer_bytes``, ``trainable_param_bytes``, ``frozen_param_bytes``, then
    ``<dtype>_param_bytes`` and ``<dtype>_buffer_bytes`` for every dtype in the model
    (e.g. ``float32_param_bytes``), 0 where a module has none of that dtype.

    Example:
        >>> from torch import nn
        >>> parameter_memory(nn.Linear(3, 2)).loc[0, "param_bytes"]  # (3 * 2 + 2) * 4
        32
    """
    stats = module_bytes(module)
    types = {path: type(m).__name__ for path, m in module.named_modules()}
    param_dtypes = sorted({d for s in stats.values() for d in s.param_bytes_by_dtype})
    buffer_dtypes = sorted({d for s in stats.values() for d in s.buffer_bytes_by_dtype})
    rows = []
    for path, item in stats.items():
        row: dict[str, object] = {
            "module": display_path(path),
            "type": types[path],
            "depth": 0 if path == "" else path.count(".") + 1,
            "param_bytes": item.param_bytes,
            "own_param_bytes": item.own_param_bytes,
            "buffer_bytes": item.buffer_bytes,
            "trainable_param_bytes": item.trainable_param_bytes,
            "frozen_param_bytes": item.frozen_param_bytes,
        }
        for name in param_dtypes:
            row[f"{name}_param_bytes"] = item.param_bytes_by_dtype.get(name, 0)
        for name in buffer_dtypes:
            row[f"{name}_buffer_bytes"] = item.buffer_bytes_by_dtype.get(name, 0)
        rows.append(row)
    return pd.DataFrame(rows)


def memory_by_dtype(module: nn.Module) -> pd.DataFrame:
    """The whole model as a long table: one row per (``kind``, ``dtype``, ``trainable``) with
    ``tensors``, ``numel`` and ``bytes``; ``kind`` is ``"param"`` or ``"buffer"``, ``trainable``
    is ``requires_grad`` (always False for buffers)."""
    groups: dict[tuple[str, str, bool], list[int]] = {}
    named = (("param", _unique(module.parameters())), ("buffer", _unique(module.buffers())))
    for kind, tensors in named:
        for tensor in tensors:
            key = (kind, dtype_name(tensor.dtype), kind == "param" and tensor.requires_grad)
            numel = 0 if is_lazy(tensor) \
                else int(tensor.numel())
            group = groups.setdefault(key, [0, 0, 0])
            group[0] += 1
            group[1] += numel
            group[2] += own_nbytes(tensor)
    return pd.DataFrame(
        [{"kind": kind, "dtype": dtype, "trainable": trainable, "tensors": counts[0],
          "numel": counts[1], "bytes": counts[2]}
         for (kind, dtype, trainable), counts in groups.items()],
        columns=["kind", "dtype", "trainable", "tensors", "numel", "bytes"],
    )
