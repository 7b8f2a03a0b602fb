"""Shape and dtype tracing through arbitrary (nested) inputs and outputs.

A *shape tree* mirrors the structure of a value with every tensor replaced by its shape as a
tuple of ints: tuples stay tuples (namedtuples and ``torch.return_types`` included), lists stay
lists, mappings (``dict``, Hugging Face ``ModelOutput``) and dataclasses become dicts, a
``PackedSequence`` becomes the shape of its packed data, and anything else (``None``, numbers,
cache objects) becomes ``None``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence

ShapeTree = Any
_MAX_DEPTH = 32
_ATOMS = frozenset({type(None), bool, int, float, complex, str, bytes, torch.dtype,
                    torch.device})
"""Types that hold no tensor: their shape tree is ``None`` and they are not walked (a quick
exit for the flags, sizes and ``None`` defaults that keyword arguments are full of)."""


def shape_tree(value: Any, _depth: int = 0) -> ShapeTree:
    """The shape tree of ``value`` (see the module docstring)."""
    if isinstance(value, Tensor):
        if value.is_nested:  # ragged: one shape per component (nested tensors have no .shape)
            return tuple(tuple(component.shape) for component in value.unbind())
        return tuple(value.shape)
    if type(value) in _ATOMS or _depth >= _MAX_DEPTH:
        return None
    if isinstance(value, PackedSequence):
        return tuple(value.data.shape)
    if isinstance(value, tuple):
        return tuple([shape_tree(item, _depth + 1) for item in value])
    if isinstance(value, list):
        return [shape_tree(item, _depth + 1) for item in value]
    if isinstance(value, Mapping):
        return {key: shape_tree(item, _depth + 1) for key, item in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            field.name: shape_tree(getattr(value, field.name, None), _depth + 1)
            for field in dataclasses.fields(value)
        }
    return None


def iter_tensors(value: Any, _depth: int = 0) -> Iterator[Tensor]:
    """Every tensor inside ``value``, depth first, in the order a shape tree lists them."""
    if isinstance(value, Tensor):
        yield value
        return
    if type(value) in _ATOMS or _depth >= _MAX_DEPTH:
        return
    if isinstance(value, PackedSequence):
        yield value.data
        return
    if isinstance(value, (tuple, list)):
        items: Any = value
    elif isinstance(value, Mapping):
        items = value.values()
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        items = [getattr(value, field.name, None) for field in dataclasses.fields(value)]
    else:
        return
    for item in items:
        if isinstance(item, Tensor):  # no generator for a direct tensor
            yield item
        elif type(item) not in _ATOMS:
            yield from iter_tensors(item, _depth + 1)


def map_tensors(value: Any, convert: Callable[[Tensor], Tensor]) -> Any:
    """``value`` with every tensor replaced by ``convert`` of it, in the containers
    :func:`iter_tensors` walks, each rebuilt as its own kind: a namedtuple keeps its class, a
    ``PackedSequence`` its batch sizes (which stay on the CPU, as the class requires), a
    dataclass batch is a copy with its fields replaced (``dataclasses.replace``); a container
    holding no tensor that ``convert`` changes is the same object."""

    def rebuilt(item: Any, depth: int) -> Any:
        if isinstance(item, Tensor):
            return convert(item)
        if type(item) in _ATOMS or depth >= _MAX_DEPTH:
            return item
        if isinstance(item, PackedSequence):
            data = rebuilt(item.data, depth + 1)
            if data is item.data:
                return item
            return PackedSequence(data, item.batch_sizes, rebuilt(item.sorted_indices, depth + 1),
                                  rebuilt(item.unsorted_indices, depth + 1))
        if isinstance(item, Mapping):
            mapped = {key: rebuilt(inner, depth + 1) for key, inner in item.items()}
            return item if all(mapped[key] is inner for key, inner in item.items()) else mapped
        if isinstance(item, (tuple, list)):
            inner = [rebuilt(element, depth + 1) for element in item]
            if all(new is old for new, old in zip(inner, item)):
                return item
            if isinstance(item, list):
                return inner
            if hasattr(item, "_fields"):  # a namedtuple: ``_make`` skips its own ``__new__``
                return type(item)._make(inner) if hasattr(item, "_make") else item
            return tuple(inner)
        if dataclasses.is_dataclass(item) and not isinstance(item, type):
            fields = {field.name: getattr(item, field.name)
                      for field in dataclasses.fields(item) if field.init}
            changed = {name: rebuilt(inner, depth + 1) for name, inner in fields.items()}
            if any(changed[name] is not inner for name, inner in fields.items()):
                return dataclasses.replace(item, **changed)
        return item

    return rebuilt(value, 0)


_DTYPE_NAMES: dict[torch.dtype, tuple[str]] = {}


def dtype_name(dtype: torch.dtype) -> str:
    """``torch.float32`` -> ``"float32"``."""
    return one_dtype(dtype)[0]


def dtype_named(name: str) -> torch.dtype | None:
    """``"float16"`` or ``"torch.float16"`` -> ``torch.float16``; ``None`` for a name of no
    torch dtype."""
    dtype = getattr(torch, name.removeprefix("torch."), None)
    return dtype if isinstance(dtype, torch.dtype) else None


def one_dtype(dtype: torch.dtype) -> tuple[str]:
    """``(dtype_name(dtype),)``, the dtypes of one tensor: one shared tuple per dtype, since it
    is asked for on every module call."""
    names = _DTYPE_NAMES.get(dtype)
    if names is None:
        names = _DTYPE_NAMES[dtype] = (str(dtype).removeprefix("torch."),)
    return names


def dtypes_of(value: Any) -> tuple[str, ...]:
    """Distinct dtypes of the tensors in ``value``, in order of first appearance."""
    if isinstance(value, Tensor):  # the common cases, without walking
        return one_dtype(value.dtype)
    if type(value) is tuple and len(value) == 1 and isinstance(value[0], Tensor):
        return one_dtype(value[0].dtype)
    seen: dict[str, None] = {}
    for tensor in iter_tensors(value):
        seen.setdefault(dtype_name(tensor.dtype), None)
    return tuple(seen)


def call_input_shapes(args: tuple[Any, ...], kwargs: dict[str, Any]
                      ) -> tuple[ShapeTree, tuple[str, ...]]:
    """A call's ``input_shapes`` and ``input_dtypes`` columns: the shape tree of the
    positional arguments, the keyword arguments' as one dict after them, and the distinct
    dtypes of all of them. One form for every pass, so that two passes' inputs compare."""
    shapes = shape_tree(args)
    if kwargs:
        return (*shapes, shape_tree(kwargs)), dtypes_of((args, kwargs))
    return shapes, dtypes_of(args)


def default_io_size(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> tuple[Any, Any]:
    """0.0.4's ``(input_size, output_size)``: the first positional input and the whole output.

    Unlike 0.0.4 it never raises: ``None`` entries, dicts, nested containers and non-tensor
    arguments are all traced (see :func:`shape_tree`).
    """
    first = shape_tree(inputs[0]) if inputs else None
    return first, shape_tree(output)

