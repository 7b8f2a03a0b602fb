"""Formulas for the linear family: ``nn.Linear``, ``nn.Bilinear`` and ``nn.Identity``.

The feature sizes are read from the tensors of the call (the last dim of each input and of the
output), not from ``in_features`` / ``out_features``: those attributes are not what the forward
computes with, and go stale when the weight is replaced by one of another shape (an ``unsafe``
parametrization, a pruned weight); the tensors always match the weight the call used.

Subclasses resolve through the MRO: ``NonDynamicallyQuantizableLinear`` (the ``out_proj`` of
``nn.MultiheadAttention``) and ``LazyLinear`` (which becomes a ``Linear`` once materialised)
get the ``Linear`` formulas.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from moduleprofiler.formulas._common import no_macs
from moduleprofiler.formulas.distance import dot_ops
from moduleprofiler.registry import register_macs, register_ops
from moduleprofiler.tensors import has_tensor


def rows_and_features(x: Tensor) -> tuple[int, int]:
    """``(rows, features)`` of a ``(*, features)`` tensor: the product of all leading dims (1
    for a 1-D input) and the last dim (1 for a 0-dim one).

    The rows are computed as ``numel / features`` so that ragged (nested) tensors, which have
    no ``shape``, count their real rows."""
    width = features(x)
    if width == 0:
        return int(x.shape[:-1].numel()), 0
    return int(x.numel()) // width, width


def leading_rows(x: Tensor) -> int:
    """Rows of a ``(*, features)`` input (:func:`rows_and_features`)."""
    return rows_and_features(x)[0]


def features(x: Tensor) -> int:
    """Size of the last dim of a ``(*, features)`` tensor (1 for a 0-dim one)."""
    return int(x.size(-1)) if x.dim() else 1


def linear_layer_ops(rows: int, in_features: int, out_features: int, bias: bool) -> int:
    """``rows`` rows through a Linear layer: rows * out * (2 * in - 1), plus rows * out with
    bias (the convention of :func:`linear_ops`; an empty dot product costs nothing)."""
    return rows * out_features * (dot_ops(in_features) + int(bias))


@register_ops(nn.Linear)
def linear_ops(module: nn.Linear, inputs: tuple[Any, ...], output: Any) -> int:
    """rows * out * (2 * in - 1), plus rows * out with bias (0 work for ``in == 0``)."""
    # One dot product of length ``in`` per output element: ``in`` multiplies, ``in - 1`` adds;
    # an empty dot product (``in_features=0``) costs nothing.
    rows, in_features = rows_and_features(inputs[0])
    return linear_layer_ops(rows, in_features, features(output), has_tensor(module, "bias"))


@register_macs(nn.Linear)
def linear_macs(module: nn.Linear, inputs: tuple[Any, ...], output: Any) -> int:
    """rows * in * out."""
    rows, in_features = rows_and_features(inputs[0])
    return rows * in_features * features(output)


def _bilinear_per_row_macs(inputs: tuple[Any, ...], output: Tensor) -> int:
    # PyTorch evaluates x1ᵀ A_k x2 as (x1ᵀ A_k) x2 for each output k: a (1, in1) @ (in1, in2)
    # product (in1 * in2 MACs), then a dot product of length in2 with x2 (in2 MACs).
    in1, in2 = features(inputs[0]), features(inputs[1])
    return features(output) * (in1 * in2 + in2)


@register_ops(nn.Bilinear)
def bilinear_ops(module: nn.Bilinear, inputs: tuple[Any, ...], output: Any) -> int:
    """rows * out * (2 * in1 * in2 + in2 - 1), plus rows * out with bias."""
    in1, in2 = features(inputs[0]), features(inputs[1])
    # in2 dot products of length in1 (x1ᵀ A_k), then one of length in2 (with x2); 2n - 1 each.
    per_output = in2 * (2 * in1 - 1) + (2 * in2 - 1)
    if has_tensor(module, "bias"):
        per_output += 1
    return leading_rows(inputs[0]) * features(output) * per_output


@register_macs(nn.Bilinear)
def bilinear_macs(module: nn.Bilinear, inputs: tuple[Any, ...], output: Any) -> int:
    """rows * out * (in1 * in2 + in2)."""
    return leading_rows(inputs[0]) * _bilinear_per_row_macs(inputs, output)


@register_ops(nn.Identity)
def identity_ops(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> int:
    """0: the input is returned unchanged."""
    return 0


register_macs(nn.Identity)(no_macs)
