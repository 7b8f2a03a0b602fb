"""The parts of a composite module, priced as the profiler prices their layer types.

A composite formula prices its module as a sum of parts, some of which are the work of other
layer types: ``nn.MultiheadAttention``'s four projections are ``nn.Linear`` work, its softmax
``nn.Softmax``'s and its attention dropout ``nn.Dropout``'s; a recurrent step's two gate
products (and an LSTM's projection) are ``nn.Linear`` work, its gate functions ``nn.Sigmoid``'s,
``nn.Tanh``'s or ``nn.ReLU``'s and its dropout between layers ``nn.Dropout``'s; a transformer
layer's activation function is ``nn.ReLU``'s or ``nn.GELU``'s work.

One rule for all of them: such a part costs what the profiler's map says for its layer type.
Where the map holds the built-in formula of that type (every profiler without entries of its
own for those types), the built-in arithmetic is used and nothing is paid per call; where it
holds another formula, that formula is called as for a call of the layer: on the part's own
module where the part is one (``out_proj``), else on a stand-in layer of that type built on the
meta device (the part's sizes, bias flag and dtype; no values), with meta tensors of the part's
input and output shapes. A part whose type the map removed, or whose formula returns ``None``,
makes the module's count unknown (``None``), never 0.

The parts that are no layer's work (the attention scores and ``A·V`` products, a step's gate
adds and multiplies, the residual adds) keep the built-in arithmetic. A profiler's operator
formulas (``aten.addmm``) never price a module formula's parts, as they never price an
``nn.Linear`` layer: a module formula covers its calls, whose operators are not observed.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import torch
from torch import nn

from moduleprofiler.formulas._common import no_macs
from moduleprofiler.formulas.activation import gelu_ops, per_element_ops, softmax_module_ops
from moduleprofiler.formulas.linear import linear_macs, linear_ops
from moduleprofiler.formulas.zero import dropout_ops
from moduleprofiler.registry import PARTS_BOUND, Count, resolve

F = TypeVar("F", bound=Callable[..., Any])

BUILT_IN_OPS: Mapping[type[nn.Module], Callable[..., Any]] = {
    nn.Linear: linear_ops,
    nn.Softmax: softmax_module_ops,
    nn.Dropout: dropout_ops,
    nn.Sigmoid: per_element_ops,
    nn.Tanh: per_element_ops,
    nn.ReLU: per_element_ops,
    nn.GELU: gelu_ops,
}
"""The layer types composite formulas price parts as, with their built-in ops formulas."""

BUILT_IN_MACS: Mapping[type[nn.Module], Callable[..., Any]] = {
    cls: linear_macs if cls is nn.Linear else no_macs for cls in BUILT_IN_OPS}
"""The same layer types with their built-in MACs formulas."""

_BUILT_IN = object()


class Parts:
    """What a profiler's map holds for the layer types of a composite's parts: for each type
    whose formula is not the built-in one, that formula (``None``: the map has none)."""

    __slots__ = ("_custom", "_stand_ins")

    def __init__(self, table: Mapping[Any, Callable[..., Any]] | None = None,
                 built_in: Mapping[type[nn.Module], Callable[..., Any]] = BUILT_IN_OPS
                 ) -> None:
        self._custom: dict[type, Callable[..., Any] | None] = {}
        if table is not None:
            for cls, formula in built_in.items():
                found = resolve(table, cls)
                if found is not formula:
                    self._custom[cls] = found
        self._stand_ins: dict[tuple[Any, ...], nn.Module] = {}

    def __bool__(self) -> bool:
        """Whether some part type is priced otherwise than by the built-in arithmetic."""
        return bool(self._custom)

    def price(self, cls: type[nn.Module], built_in: Count, make: Callable[[], nn.Module],
              in_shape: tuple[int, ...], out_shape: tuple[int, ...],
              dtype: torch.dtype) -> Count:
        """A part of layer type ``cls``: ``built_in`` (its built-in count) where the map holds
        the built-in formula, else the map's formula called on ``make()`` (the part's module,
        or a stand-in, made once per pass) with meta tensors of ``in_shape`` / ``out_shape``."""
        formula = self._custom.get(cls, _BUILT_IN)
        if formula is _BUILT_IN:
            return built_in
        if formula is None:  # the profiler removed the type's formula: its work is unknown
            return None
        assert callable(formula)
        return formula(make(), (_meta(in_shape, dtype),), _meta(out_shape, dtype))  # type: ignore[no-any-return]

    def stand_in(self, key: tuple[Any, ...], build: Callable[[], nn.Module]) -> nn.Module:
        """The stand-in layer ``build()`` for ``key``, built once per pass."""
        module = self._stand_ins.get(key)
        if module is None:
            module = self._stand_ins[key] = build()
        return module

    def linear(self, rows: tuple[int, ...], in_features: int, out_features: int, bias: bool,
               built_in: Count, dtype: torch.dtype, module: nn.Module | None = None) -> Count:
        """An ``nn.Linear`` part: ``module`` (a real layer), else a stand-in on the meta
        device, from ``(*rows, in_features)`` to ``(*rows, out_features)``."""
        if not self._custom:  # the common case, on every call: the built-in count
            return built_in

        def make() -> nn.Module:
            if module is not None:
                return module
            return self.stand_in(("linear", in_features, out_features, bias, dtype),
                                 lambda: nn.Linear(in_features, out_features, bias=bias,
                                                   device="meta", dtype=dtype))

        return self.price(nn.Linear, built_in, make, (*rows, in_features),
                          (*rows, out_features), dtype)

    def elementwise(self, cls: type[nn.Module], shape: tuple[int, ...], built_in: Count,
                    dtype: torch.dtype, **options: Any) -> Count:
        """A part of layer type ``cls`` (an activation, a softmax, a dropout) on a tensor of
        ``shape``, priced on a stand-in ``cls(**options)`` (a dropout's in training mode: a
        composite prices its dropout only when it is training)."""
        if not self._custom:  # the common case, on every call: the built-in count
            return built_in

        def make() -> nn.Module:
            def build() -> nn.Module:
                layer = cls(**options)
                return layer.train(cls is nn.Dropout)

            return self.stand_in((cls, *sorted(options.items())), build)

        return self.price(cls, built_in, make, shape, shape, dtype)


def _meta(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.empty(shape, dtype=dtype, device="meta")


def float_dtype(*candidates: Any) -> torch.dtype:
    """The dtype of the first floating tensor among ``candidates`` (the default dtype when
    none is): the dtype of a stand-in's tensors."""
    for value in candidates:
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return value.dtype
    return torch.get_default_dtype()


def with_parts(built_in: Mapping[type[nn.Module], Callable[..., Any]],
               build: Callable[[Parts], F]) -> F:
    """The formula ``build(Parts())`` (the built-in arithmetic for every part), which each pass
    binds to the map it counts with (:data:`~moduleprofiler.registry.PARTS_BOUND`): the formula
    itself where the map prices every part type of ``built_in`` with its built-in formula, else
    ``build(Parts(map))``, keeping the formula's name, docstring and attributes."""
    formula = build(Parts())

    def bind(table: Mapping[Any, Callable[..., Any]]) -> F:
        parts = Parts(table, built_in)
        if not parts:
            return formula
        return functools.wraps(formula)(build(parts))  # type: ignore[return-value]

    setattr(formula, PARTS_BOUND, bind)
    return formula


def total(*counts: Count) -> Count:
    """The sum of the parts' counts; ``None`` (unknown) when one of them is."""
    if None in counts:
        return None
    return sum(counts)  # type: ignore[arg-type]
