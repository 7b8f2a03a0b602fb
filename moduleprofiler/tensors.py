"""Helpers on a module's tensors: a quick parameter or buffer read, element counts, aliases left
out, bytes by dtype. The walk of the module tree is :mod:`moduleprofiler.modules`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from torch import Tensor, nn

from moduleprofiler.shapes import dtype_name
from moduleprofiler.storage import is_lazy, own_nbytes, storage_key, storage_of

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
        if direct:  # the two tables in ``__getattr__``'s order, written out (no loop)
            table = own.get("_parameters")
            if table is not None and name in table:
                return table[name]
            table = own.get("_buffers")
            if table is not None and name in table:
                return table[name]
    return getattr(module, name, None)


def has_tensor(module: nn.Module, name: str) -> bool:
    """Whether ``module.<name>`` is a tensor (not ``None``), found without computing it.

    A tensor parametrized with :func:`torch.nn.utils.parametrize.register_parametrization` is
    computed by its parametrization on every read: reading it after the module's forward would
    run that work (and its modules' hooks) once more, so it is only looked up.
    """
    children = module._modules
    if children:  # most layers have none: one test
        parametrizations = children.get("parametrizations")
        if isinstance(parametrizations, nn.ModuleDict) and name in parametrizations._modules:
            return True
    return module_tensor(module, name) is not None


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
