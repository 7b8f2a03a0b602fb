"""Special functions and ``logaddexp``: one op per special-function evaluation, the parts of the
functions built from them, and the orthogonal polynomials left unknown."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler
from tests.operators.helpers import count, counter_of, on_meta

X = torch.rand(2, 3) + 0.5  # 6 elements, inside every function's domain
Q = torch.rand(3) + 1.0  # broadcast against X: 6 outputs

ONE_EVALUATION = [
    torch.special.airy_ai, torch.special.bessel_j0, torch.special.bessel_j1,
    torch.special.bessel_y0, torch.special.bessel_y1, torch.special.modified_bessel_i0,
    torch.special.modified_bessel_i1, torch.special.modified_bessel_k0,
    torch.special.modified_bessel_k1, torch.special.scaled_modified_bessel_k0,
    torch.special.scaled_modified_bessel_k1, torch.special.spherical_bessel_j0,
    torch.special.erfcx, torch.special.i0e, torch.special.i1, torch.special.i1e,
    torch.special.log_ndtr, torch.special.ndtri, torch.special.ndtr,
]  # fmt: skip


@pytest.mark.parametrize("fn", ONE_EVALUATION, ids=lambda fn: fn.__name__)
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_a_special_function_is_one_evaluation_per_element(fn: Callable[..., Any],
                                                          mode: str) -> None:
    # 6 elements, 1 op each (as erf, lgamma, digamma, i0)
    expected = 6
    if fn is torch.special.ndtr:
        # ndtr lowers to 0.5 * (1 + erf(x / sqrt 2)): multiply, erf, add, multiply
        expected = 4 * 6
    assert count(fn, X, mode=mode) == (expected, 0)


@pytest.mark.parametrize(
    ("fn", "args", "expected"),
    [
        (torch.special.zeta, (X, Q), 6),  # Hurwitz zeta: one evaluation per output
        (torch.igamma, (X, Q), 6),
        (torch.igammac, (X, Q), 6),
        (torch.polygamma, (2, X), 6),
        (torch.special.polygamma, (1, X), 6),  # an alias of polygamma
        (torch.special.entr, (X,), 12),  # -x * log(x): a log and a multiply per element
        (torch.special.xlog1py, (X, Q), 12),  # x * log1p(y), as xlogy
        (torch.logaddexp, (X, Q), 36),  # max, subtract, abs, exp, log1p, add: 6 x 6
        (torch.logaddexp2, (X, Q), 42),  # and the multiply by 1 / ln 2: 7 x 6
        # p = 3: 3 offsets, 3 log-gammas, 2 adds and the constant per element: 9 x 6
        (torch.mvlgamma, (X + 1, 3), 54),
        (torch.mvlgamma, (X, 1), 18),  # p = 1: 3 x 6
    ],
)
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_functions_built_from_evaluations(fn: Callable[..., Any], args: tuple[Any, ...],
                                          expected: int, mode: str) -> None:
    assert count(fn, *args, mode=mode) == (expected, 0)


def test_the_meta_device_counts_the_same() -> None:
    for fn, args in ((torch.special.bessel_j0, (X,)), (torch.logaddexp, (X, Q)),
                     (torch.mvlgamma, (X + 1, 3))):
        assert count(fn, *on_meta(args)) == count(fn, *args)


@pytest.mark.parametrize("fn", [torch.special.chebyshev_polynomial_t,
                                torch.special.hermite_polynomial_h,
                                torch.special.legendre_polynomial_p])
def test_an_orthogonal_polynomial_is_unknown_not_one_evaluation(fn: Callable[..., Any]) -> None:
    # a recurrence of n steps per element, n read from the data: no formula, listed
    counter = counter_of(fn, X, 4)
    assert dict(counter.missing) == {f"aten.{fn.__name__}": 1}
    assert counter.ops == 0


class Apply(nn.Module):
    def __init__(self, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


@pytest.mark.parametrize(
    ("fn", "backward_ops"),
    [
        # d/dx i0(x) = i1(x): i1 and the multiply by the gradient, 2 x 6
        (torch.special.i0, 12),
        # d/dx i1e(x) = i0e(x) - i1e(x) * (sgn(x) + 1 / x), x = 0 excepted: |x| and its test
        # against eps, reciprocal, sgn, add, multiply, i0e, subtract (the two selections are
        # free) and the multiply by the gradient, 9 x 6
        (torch.special.i1e, 54),
        # d/da logaddexp(a, b) = g / (1 + exp(b - a)): subtract, exp, add, divide per
        # element for each of the two inputs, 8 x 6
        (torch.logaddexp, 48),
    ],
)
def test_gradients_of_special_functions_are_counted(fn: Callable[..., Any],
                                                    backward_ops: int) -> None:
    inputs = (X.clone().requires_grad_(),)
    if fn is torch.logaddexp:
        inputs += (X.flip(0).clone().requires_grad_(),)
    profile = ModuleProfiler().profile(Apply(fn), inputs, backward=True)
    assert profile.complete and profile.backward_unsupported_ops == {}
    assert profile.total_backward_ops == backward_ops


S = torch.special
ALIASES: list[tuple[Callable[..., Any], tuple[Any, ...], int]] = [
    # torch.special's aliases of element-wise functions: (fn, args, ops on X's 6 elements)
    (S.expit, (X,), 18),  # sigmoid: 3 per element
    (S.erf, (X,), 6), (S.erfc, (X,), 6), (S.erfinv, (X / 2,), 6), (S.exp2, (X,), 6),
    (S.expm1, (X,), 6), (S.gammaln, (X,), 6), (S.i0, (X,), 6), (S.log1p, (X,), 6),
    (S.psi, (X,), 6), (S.digamma, (X,), 6), (S.round, (X,), 6), (S.sinc, (X,), 6),
    (S.gammainc, (X, Q), 6), (S.gammaincc, (X, Q), 6),  # one evaluation per output
    (S.xlogy, (X, Q), 12),  # a log and a multiply
    (S.logit, (X / 2,), 18),  # log(x / (1 - x)): 3 per element
    (lambda x: S.logsumexp(x, 1), (X,), 20),  # 2 rows of 3: 2 * (3*3 + 1)
    (lambda x: S.multigammaln(x + 1, 2), (X,), 42),  # the + 1 (6), then 3p = 6 per element
]  # fmt: skip


@pytest.mark.parametrize(("fn", "args", "expected"), ALIASES,
                         ids=lambda v: getattr(v, "__name__", None))
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_special_aliases_count_as_the_functions_they_name(
        fn: Callable[..., Any], args: tuple[Any, ...], expected: int, mode: str) -> None:
    # under inference_mode the alias (aten.special_expit, ...) arrives whole: it was unknown
    assert count(fn, *args, mode=mode) == (expected, 0)
