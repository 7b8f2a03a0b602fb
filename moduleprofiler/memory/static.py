"""Static memory: parameter and buffer bytes per module, by dtype, trainable vs frozen.

Each module's numbers cover the module and its descendants with every tensor counted once
(tied weights, a submodule registered twice). A tensor's bytes are ``numel * element_size``;
two distinct ``Parameter`` objects that are the same view of one storage count once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
from torch import nn

from moduleprofiler.modules import module_facts
from moduleprofiler.records import display_path
from moduleprofiler.shapes import dtype_name
from moduleprofiler.storage import own_nbytes
from moduleprofiler.tensors import bytes_by_dtype, distinct, numel
from moduleprofiler.validate import check_module


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


def module_bytes(module: nn.Module) -> dict[str, ModuleBytes]:
    """:class:`ModuleBytes` for every module path of ``module`` (``named_modules()`` order),
    from the one walk of module facts (:func:`~moduleprofiler.modules.module_facts`): a tensor
    shared between submodules is counted once at every level, and aliases once."""
    result: dict[str, ModuleBytes] = {}
    for fact in module_facts(module):
        params = distinct(fact.params)
        buffers = distinct(fact.buffers)
        trainable = sum(own_nbytes(p) for p in params if p.requires_grad)
        total = sum(own_nbytes(p) for p in params)
        result[fact.path] = ModuleBytes(
            param_bytes=total,
            own_param_bytes=sum(own_nbytes(p) for p in distinct(fact.self_params)),
            buffer_bytes=sum(own_nbytes(b) for b in buffers),
            trainable_param_bytes=trainable,
            frozen_param_bytes=total - trainable,
            param_bytes_by_dtype=bytes_by_dtype(params),
            buffer_bytes_by_dtype=bytes_by_dtype(buffers),
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
    stats = module_bytes(check_module(module))
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
    named = (("param", distinct(module.parameters())), ("buffer", distinct(module.buffers())))
    for kind, tensors in named:
        for tensor in tensors:
            key = (kind, dtype_name(tensor.dtype), kind == "param" and tensor.requires_grad)
            count = numel(tensor)
            group = groups.setdefault(key, [0, 0, 0])
            group[0] += 1
            group[1] += count
            group[2] += own_nbytes(tensor)
    return pd.DataFrame(
        [{"kind": kind, "dtype": dtype, "trainable": trainable, "tensors": counts[0],
          "numel": counts[1], "bytes": counts[2]}
         for (kind, dtype, trainable), counts in groups.items()],
        columns=["kind", "dtype", "trainable", "tensors", "numel", "bytes"],
    )
