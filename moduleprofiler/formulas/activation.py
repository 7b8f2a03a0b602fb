"""Activations: a fixed number of ops per element, and the softmax family per row.

Per-element costs count each comparison, add, multiply, divide and elementary function (exp,
log, erf, pow, abs) as 1 op; negating a value is free (moduleprofiler 0.0.4's Sigmoid,
``1 / (1 + exp(-x))``, is 3). Where 0.0.4 had a number it is kept: ReLU 1, LeakyReLU 4, PReLU 4,
ELU 3, SELU 7, Sigmoid 3, Tanh 7, Softplus 5 and Softmax ``rows * (4D - 1)``. Composite
activations reuse these costs for their parts (a ``tanh`` inside Mish costs 7, like ``nn.Tanh``).
The table with each derivation is in ``docs/formulas/activation.md``.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from moduleprofiler.formulas._common import no_macs, numel_of_first
from moduleprofiler.registry import register_macs, register_ops

SIGMOID = 3  # exp(-x), 1 + ., 1 / .
TANH = 7  # (e^x - e^-x) / (e^x + e^-x): 4 exp, subtract, add, divide
SOFTPLUS = 5  # log(1 + exp(beta * x)) / beta: multiply, exp, add, log, divide

PER_ELEMENT: dict[type[nn.Module], int] = {
    nn.ReLU: 1,  # max(0, x)
    nn.Hardtanh: 2,  # min(max(x, lo), hi); ReLU6 inherits it
    nn.Threshold: 1,  # x > threshold ? x : value
    nn.LeakyReLU: 4,  # max(0, x) + slope * min(0, x)
    nn.PReLU: 4,  # as LeakyReLU with a learned slope
    nn.ELU: 3,  # exp, - 1, * alpha (0.0.4's count; the branch select is not counted)
    nn.CELU: 7,  # max(0, x) + min(0, alpha * (exp(x / alpha) - 1))
    nn.SELU: 7,  # scale * (max(0, x) + min(0, alpha * (exp(x) - 1)))
    nn.Sigmoid: SIGMOID,
    nn.Tanh: TANH,
    nn.Softplus: SOFTPLUS,  # the threshold test that switches to x is not counted
    nn.LogSigmoid: 3,  # -log(1 + exp(-x))
    nn.SiLU: SIGMOID + 1,  # x * sigmoid(x)
    nn.Mish: SOFTPLUS + TANH + 1,  # x * tanh(softplus(x))
    nn.Hardsigmoid: 4,  # min(max(x + 3, 0), 6) / 6
    nn.Hardswish: 5,  # x * min(max(x + 3, 0), 6) / 6
    nn.Hardshrink: 2,  # x > lambda or x < -lambda ? x : 0
    nn.Softshrink: 3,  # two comparisons, then x - lambda or x + lambda
    nn.Tanhshrink: TANH + 1,  # x - tanh(x)
    nn.Softsign: 3,  # x / (1 + |x|)
}

GELU_ERF = 5  # 0.5 * x * (1 + erf(x / sqrt(2))): divide, erf, add, 2 multiplies
# 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))): x^3 is 2 multiplies, then
# * 0.044715, + x, * sqrt(2/pi), tanh (7), + 1, * x, * 0.5
GELU_TANH = 2 + 1 + 1 + 1 + TANH + 1 + 1 + 1
RRELU_SAMPLE = 3  # training only: draw u, (upper - lower) * u, + lower
GLU_PER_OUTPUT = SIGMOID + 1  # a * sigmoid(b)


def per_element_ops(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> int:
    """numel * c, with c the per-element cost of the module's class (see PER_ELEMENT)."""
    for base in type(module).__mro__:
        if base in PER_ELEMENT:
            return numel_of_first(inputs) * PER_ELEMENT[base]
    raise TypeError(f"no per-element cost for {type(module).__name__}")


register_ops(*PER_ELEMENT)(per_element_ops)


@register_ops(nn.GELU)
def gelu_ops(module: nn.GELU, inputs: tuple[Any, ...], output: Any) -> int:
    """numel * 5 (erf form), numel * 15 (approximate='tanh')."""
    per_element = GELU_TANH if module.approximate == "tanh" else GELU_ERF
    return numel_of_first(inputs) * per_element


@register_ops(nn.RReLU)
def rrelu_ops(module: nn.RReLU, inputs: tuple[Any, ...], output: Any) -> int:
    """numel * 4 (as LeakyReLU); numel * 7 in training (slope drawn per element)."""
    per_element = PER_ELEMENT[nn.LeakyReLU] + (RRELU_SAMPLE if module.training else 0)
    return numel_of_first(inputs) * per_element


@register_ops(nn.GLU)
def glu_ops(module: nn.GLU, inputs: tuple[Any, ...], output: Any) -> int:
    """output numel * 4: a * sigmoid(b), with a, b the halves of the input along dim."""
    return int(output.numel()) * GLU_PER_OUTPUT if isinstance(output, Tensor) else 0


def softmax_ops(rows: int, dim_size: int) -> int:
    """rows * (4D - 1): per row D subtracts of the max, D exps, D - 1 adds, D divides (0 for
    D = 0: a softmax over nothing computes nothing)."""
    return rows * (4 * dim_size - 1) if dim_size else 0


def implicit_softmax_dim(ndim: int) -> int:
    """torch's legacy dim for ``dim=None`` (``F._get_softmax_dim``), without its warning."""
    return 0 if ndim in (0, 1, 3) else 1


def rows_along(x: Tensor, dim: int | None) -> tuple[int, int]:
    """``(rows, n)`` of an operation along ``dim`` of ``x``: ``n`` its size there, ``rows =
    numel / n``; ``dim=None`` takes every element as one row, a 0-dim tensor is ``(1, 1)``."""
    if x.dim() == 0:
        return 1, 1
    if dim is None:
        return 1, int(x.numel())
    n = int(x.shape[int(dim)])
    return (int(x.numel()) // n if n else 0), n


def sequences_along(x: Tensor, dim: int) -> list[tuple[int, int]]:
    """:func:`rows_along` of each sequence of a nested tensor, or of ``x`` itself.

    A nested tensor's sequences have sizes of their own (a softmax over attention scores runs
    over each sequence's own length), and it has no ``shape`` to read them from (the strided
    layout) or a symbolic one (the ragged dim of the jagged layout)."""
    if not x.is_nested:
        return [rows_along(x, dim)]
    inner = dim - 1 if dim > 0 else dim  # a sequence lacks the nested tensor's first dim
    return [rows_along(sequence, inner) for sequence in x.unbind()]


def softmax_along(x: Tensor, dim: int | None) -> int:
    """:func:`softmax_ops` of a softmax of ``x`` along ``dim`` (``None``: torch's implicit
    dim), summed over the sequences of a nested tensor."""
    along = implicit_softmax_dim(x.dim()) if dim is None else dim
    return sum(softmax_ops(rows, size) for rows, size in sequences_along(x, along))


def log_softmax_along(x: Tensor, dim: int | None) -> int:
    """rows * 4D of a log-softmax of ``x`` along ``dim`` (``None``: torch's implicit dim),
    summed over the sequences of a nested tensor."""
    along = implicit_softmax_dim(x.dim()) if dim is None else dim
    return sum(rows * 4 * size for rows, size in sequences_along(x, along))


def _softmax_dim(module: nn.Module) -> int | None:
    # ``dim`` is an int or None (torch's __setstate__ gives old pickles dim=None)
    dim = getattr(module, "dim", None)
    return dim if isinstance(dim, int) else None


@register_ops(nn.Softmax, nn.Softmin)
def softmax_module_ops(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> int:
    """rows * (4D - 1), D = size along dim (Softmin: softmax(-x), the negation is free)."""
    return softmax_along(inputs[0], _softmax_dim(module))


@register_ops(nn.LogSoftmax)
def log_softmax_ops(module: nn.LogSoftmax, inputs: tuple[Any, ...], output: Any) -> int:
    """rows * 4D: D subtracts of the max, D exps, D - 1 adds, 1 log, D subtracts of the log-sum."""
    return log_softmax_along(inputs[0], _softmax_dim(module))


@register_ops(nn.Softmax2d)
def softmax2d_ops(module: nn.Softmax2d, inputs: tuple[Any, ...], output: Any) -> int:
    """rows * (4C - 1): softmax over the channel dim (-3) of a (N, C, H, W) or (C, H, W) input."""
    x: Tensor = inputs[0]
    if x.dim() < 3:
        return 0
    return softmax_along(x, x.dim() - 3)


_OWN_FORMULAS: tuple[type[nn.Module], ...] = (
    nn.GELU, nn.RReLU, nn.GLU, nn.Softmax, nn.Softmin, nn.LogSoftmax, nn.Softmax2d,
)
register_macs(*PER_ELEMENT, *_OWN_FORMULAS)(no_macs)

