"""Activation formulas against hand arithmetic (docs/formulas/activation.md)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from moduleprofiler.formulas.activation import softmax_ops
from tests.conftest import macs_of, ops_of, profile_of

# Every case runs on a (2, 3, 4) input: numel = 24, so expected = 24 * per-element cost.
PER_ELEMENT_CASES = [
    (nn.ReLU(), 24 * 1),  # max(0, x)  (0.0.4: 1)
    (nn.ReLU(inplace=True), 24 * 1),  # in-place is the same arithmetic
    (nn.ReLU6(), 24 * 2),  # min(max(0, x), 6)
    (nn.Hardtanh(), 24 * 2),  # min(max(x, -1), 1)
    (nn.Threshold(0.1, 20.0), 24 * 1),  # one comparison
    (nn.LeakyReLU(), 24 * 4),  # max, min, *slope, +  (0.0.4: 4)
    (nn.PReLU(), 24 * 4),  # (0.0.4: 4)
    (nn.RReLU(), 24 * 4),  # eval: fixed slope (lower+upper)/2, as LeakyReLU
    (nn.ELU(), 24 * 3),  # exp, -1, *alpha  (0.0.4: 3)
    (nn.CELU(), 24 * 7),  # max, x/alpha, exp, -1, *alpha, min, +
    (nn.SELU(), 24 * 7),  # (0.0.4: 7)
    (nn.GELU(), 24 * 5),  # x/sqrt2, erf, +1, *x, *0.5
    (nn.GELU(approximate="tanh"), 24 * 15),  # x^3 (2), *c, +x, *k, tanh (7), +1, *x, *0.5
    (nn.SiLU(), 24 * 4),  # sigmoid (3) + multiply
    (nn.Mish(), 24 * 13),  # softplus (5) + tanh (7) + multiply
    (nn.Hardswish(), 24 * 5),  # +3, max, min, *x, /6
    (nn.Hardsigmoid(), 24 * 4),  # +3, max, min, /6
    (nn.Hardshrink(), 24 * 2),  # x > l, x < -l
    (nn.Softshrink(), 24 * 3),  # two comparisons + one add/subtract
    (nn.Tanhshrink(), 24 * 8),  # tanh (7) + subtract
    (nn.Softplus(), 24 * 5),  # *beta, exp, +1, log, /beta  (0.0.4: 5)
    (nn.Softsign(), 24 * 3),  # abs, +1, divide
    (nn.Sigmoid(), 24 * 3),  # exp, +1, divide  (0.0.4: 3)
    (nn.LogSigmoid(), 24 * 3),  # exp, +1, log
    (nn.Tanh(), 24 * 7),  # 4 exp, -, +, /  (0.0.4: 7)
]


@pytest.mark.parametrize(("module", "expected"), PER_ELEMENT_CASES,
                         ids=[type(m).__name__ for m, _ in PER_ELEMENT_CASES])
def test_per_element_activation(module: nn.Module, expected: int) -> None:
    x = torch.randn(2, 3, 4)
    assert ops_of(module, x) == expected
    assert macs_of(module, x) == 0


def test_unbatched_and_scalar_inputs() -> None:
    # numel 5 * 3 (Sigmoid); a 0-dim tensor has numel 1 -> 7 (Tanh)
    assert ops_of(nn.Sigmoid(), torch.randn(5)) == 15
    assert ops_of(nn.Tanh(), torch.tensor(0.5)) == 7


def test_rrelu_training_draws_slopes() -> None:
    # training: 4 + 3 (draw u, *(upper-lower), +lower) per element: 6 * 7 = 42
    assert profile_of(nn.RReLU(), torch.randn(2, 3), eval=False).records[0].self_ops == 42


def test_glu_halves_the_dim() -> None:
    # (4, 6) split along -1 into two (4, 3): 12 outputs * (sigmoid 3 + multiply 1) = 48
    assert ops_of(nn.GLU(), torch.randn(4, 6)) == 48
    # dim=0 on (4, 6): (2, 6) output = 12 elements -> 48
    assert ops_of(nn.GLU(dim=0), torch.randn(4, 6)) == 48


def test_softmax_helper() -> None:
    # rows * (4D - 1) = 6 * (4*5 - 1) = 114
    assert softmax_ops(6, 5) == 114
    # a softmax over an empty dim computes nothing: 0, not 6 * (4*0 - 1) = -6
    assert softmax_ops(6, 0) == 0


def test_softmax_explicit_dim_keeps_legacy_value() -> None:
    # (2, 3, 5) along -1: rows 6, D = 5: 6 * 19 = 114 (0.0.4: M*(4D-1))
    assert ops_of(nn.Softmax(dim=-1), torch.randn(2, 3, 5)) == 114
    # along 1: rows 2*5 = 10, D = 3: 10 * 11 = 110
    assert ops_of(nn.Softmax(dim=1), torch.randn(2, 3, 5)) == 110


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        ((), 3),  # 0-dim: one row of 1: 4*1 - 1 = 3
        ((5,), 19),  # ndim 1 -> dim 0: 1 row, D = 5: 19
        ((2, 5), 2 * 19),  # ndim 2 -> dim 1: 2 rows of 5: 38
        ((2, 3, 5), 15 * 7),  # ndim 3 -> dim 0: 15 rows, D = 2: 15 * 7 = 105
        ((2, 3, 4, 5), 40 * 11),  # ndim 4 -> dim 1: 40 rows, D = 3: 40 * 11 = 440
    ],
)
def test_softmax_dim_none_uses_torch_implicit_dim(shape: tuple[int, ...], expected: int) -> None:
    # B8: 0.0.4 crashed on dim=None; torch picks dim 0 for ndim 0, 1, 3 and 1 otherwise
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's "Implicit dimension" warning
        assert ops_of(nn.Softmax(), torch.randn(shape)) == expected


def test_softmax_of_a_nested_tensor() -> None:
    # sequences of 3 and 5 rows of 8: 8 rows of 8, softmax 8*(4*8 - 1) = 248
    x = torch.nested.nested_tensor([torch.randn(3, 8), torch.randn(5, 8)])
    assert ops_of(nn.Softmax(dim=-1), x) == 248
    assert ops_of(nn.Softmin(dim=2), x) == 248
    # over the ragged dim of the jagged layout: per sequence and feature, a row of 3 and of 5:
    # 8*(4*3 - 1) + 8*(4*5 - 1) = 88 + 152 = 240
    jagged = torch.nested.nested_tensor(list(x.unbind()), layout=torch.jagged)
    assert ops_of(nn.Softmax(dim=1), jagged) == 240


def test_softmin_is_softmax_of_negated_input() -> None:
    # (4, 3) along 1: 4 rows * 11 = 44
    assert ops_of(nn.Softmin(dim=1), torch.randn(4, 3)) == 44


def test_log_softmax() -> None:
    # (4, 3) along 1: per row 3 subtract max, 3 exp, 2 adds, 1 log, 3 subtract = 12 = 4D -> 48
    assert ops_of(nn.LogSoftmax(dim=1), torch.randn(4, 3)) == 48


def test_softmax2d_over_channels() -> None:
    # (2, 3, 4, 4): D = C = 3, rows 2*16 = 32: 32 * 11 = 352; unbatched (3, 4, 4): 16 * 11 = 176
    assert ops_of(nn.Softmax2d(), torch.randn(2, 3, 4, 4)) == 352
    assert ops_of(nn.Softmax2d(), torch.randn(3, 4, 4)) == 176

