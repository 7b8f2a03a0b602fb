"""Linear algebra and pairwise distances against hand arithmetic (docs/operators.md, "Linear
algebra" and "Pairwise distances")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from moduleprofiler.operators.linalg import cholesky_count, lu_count
from tests.operators.helpers import count, counter_of, fcm_flops, formula_count, on_meta

torch.manual_seed(0)
_M = torch.randn(2, 4, 4)
A = _M @ _M.mT + 4 * torch.eye(4)  # a batch of 2 symmetric positive definite 4x4 matrices
L = torch.linalg.cholesky(A)
U = L.mT.contiguous()
B = torch.randn(2, 4, 3)  # 2 x 3 = 6 right-hand sides
R = torch.randn(2, 5, 3)  # a batch of 2 tall 5x3 matrices
LU, PIVOTS = torch.linalg.lu_factor(A)

aten = torch.ops.aten
pytestmark = pytest.mark.filterwarnings("ignore:torch.triangular_solve is deprecated")


def test_exact_counts_of_one_matrix() -> None:
    # LU of 4x4: macs 3*3 + 2*2 + 1*1 = 14, divisions 3 + 2 + 1 = 6: 2*14 + 6 = 34 ops,
    # = 2n^3/3 - n^2/2 - n/6 = 128/3 - 8 - 2/3
    assert lu_count(4, 4) == (34, 14)
    # LU of 5x3: macs 4*2 + 3*1 + 2*0 = 11, divisions 4 + 3 + 2 = 9: 31 ops
    assert lu_count(5, 3) == (31, 11)
    # Cholesky of 4x4: macs (64 - 4)/6 = 10, divisions 6, square roots 4: 30 ops
    # = n^3/3 + n^2/2 + n/6 = 64/3 + 8 + 2/3
    assert cholesky_count(4) == (30, 10)


Case = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any], tuple[int, int]]
CASES: dict[str, Case] = {
    # 6 columns of n = 4: 6 * (6 multiply-adds + 4 divisions) = 96 ops, 36 macs
    "solve_triangular": (torch.linalg.solve_triangular, (U, B), {"upper": True}, (96, 36)),
    # unit diagonal: no divisions, 6 * 12 = 72 ops
    "solve_triangular_unit": (torch.linalg.solve_triangular, (U, B),
                              {"upper": True, "unitriangular": True}, (72, 36)),
    # X A = B^T: the 6 rows of B^T are the right-hand sides
    "solve_triangular_right": (torch.linalg.solve_triangular, (U, B.mT),
                               {"upper": True, "left": False}, (96, 36)),
    "triangular_solve": (torch.triangular_solve, (B, U), {}, (96, 36)),
    # 2 LUs (2 * (34, 14)) and 6 LU solves of 2*6 multiply-adds + 4 divisions (28, 12)
    "lu_factor": (torch.linalg.lu_factor, (A,), {}, (68, 28)),
    "lu": (torch.linalg.lu, (A,), {}, (68, 28)),
    "lu_factor_tall": (torch.linalg.lu_factor, (R,), {}, (62, 22)),  # 2 * (31, 11)
    "lu_solve": (torch.linalg.lu_solve, (LU, PIVOTS, B), {}, (168, 72)),
    "solve": (torch.linalg.solve, (A, B), {}, (68 + 168, 28 + 72)),
    "solve_vector": (torch.linalg.solve, (A, B[..., 0]), {}, (68 + 56, 28 + 24)),
    # inverse = solve(A, I): 2 * ((34, 14) + 4 columns * (28, 12))
    "inv": (torch.linalg.inv, (A,), {}, (292, 124)),
    # 2 * (30, 10)
    "cholesky": (torch.linalg.cholesky, (A,), {}, (60, 20)),
    # two triangular solves per column: 6 * 2 * (12 + 4) = 192 ops, 6 * 2 * 6 = 72 macs
    "cholesky_solve": (torch.cholesky_solve, (B, L), {}, (192, 72)),
    # n(n+1)(2n+1)/6 = 4*5*9/6 = 30 macs per matrix, ops = 2 * macs
    "cholesky_inverse": (torch.cholesky_inverse, (L,), {}, (120, 60)),
    # LU and the product of the 4 diagonal entries (3 multiplies): 2 * (37, 14)
    "det": (torch.linalg.det, (A,), {}, (74, 28)),
    # LU and 5n - 2 = 18 (sign, abs, log of each entry; sign product; sum of logs)
    "slogdet": (torch.linalg.slogdet, (A,), {}, (104, 28)),
    # 5x3 reduced: geqrf 5*3^2 - 3^3/3 = 36 macs, orgqr(5, 3, 3) 2*45 - 8*9 + 18 = 36 macs
    "qr": (torch.linalg.qr, (R,), {}, (288, 144)),
    # complete: orgqr(5, 5, 3) = 2*75 - 10*9 + 18 = 78 macs: 2 * (36 + 78) = 228
    "qr_complete": (lambda a: torch.linalg.qr(a, mode="complete"), (R,), {}, (456, 228)),
    "qr_r": (lambda a: torch.linalg.qr(a, mode="r"), (R,), {}, (144, 72)),
    # eigenvalues and vectors: 9n^3 flops = 576 per matrix, macs half
    "eigh": (torch.linalg.eigh, (A,), {}, (1152, 576)),
    # thin SVD of 5x3: 14*5*9 + 8*27 = 846 flops per matrix
    "svd": (torch.linalg.svd, (R,), {"full_matrices": False}, (1692, 846)),
    # full: 4*25*3 + 8*5*9 + 9*27 = 903 flops, 451 macs per matrix (rounded down)
    "svd_full": (torch.linalg.svd, (R,), {}, (1804, 902)),
    # thin SVD (846, 423) + tolerance 2 + 3 comparisons + 3 reciprocals + V * s 9 multiplies
    # + (3, 3) @ (3, 5): 15 * 5 = 75 ops and 45 macs: (938, 468) per matrix
    "pinv": (torch.linalg.pinv, (R,), {}, (1876, 936)),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("mode", ["no_grad", "grad", "inference_mode"])
def test_linalg_counts(name: str, mode: str) -> None:
    fn, args, kwargs, expected = CASES[name]
    assert count(fn, *args, mode=mode, **kwargs) == expected


@pytest.mark.parametrize("name", ["solve_triangular", "solve", "cholesky", "inv", "qr", "eigh",
                                  "svd", "det", "slogdet", "lu_factor"])
def test_linalg_counts_on_meta(name: str) -> None:
    fn, args, kwargs, expected = CASES[name]
    assert count(fn, *on_meta(args), **kwargs) == expected


def test_values_only_decompositions() -> None:
    # eigenvalues only: 4n^3/3 flops = 85 per 4x4, macs 2*64/3 = 42 (rounded down)
    assert formula_count(aten._linalg_eigh.default, A, "L", False) == (168, 84)
    # singular values only of 5x3: 4*5*9 - 4*27/3 = 144 flops, 72 macs per matrix
    assert formula_count(aten._linalg_svd.default, R, False, False) == (288, 144)


def test_values_only_functions_compute_vectors_under_a_dispatch_mode() -> None:
    # NB: torch asks _linalg_eigh / _linalg_svd for the vectors whenever a dispatch mode is
    # active (it may be a tensor subclass that needs them for a gradient), so eigvalsh and
    # svdvals run, and are counted, with vectors under any profiler
    counter = counter_of(torch.linalg.eigvalsh, A)
    assert counter.calls["aten._linalg_eigh.default"] == 1
    assert (counter.ops, counter.macs) == CASES["eigh"][3]


def test_flopcountermode_counts_no_linalg() -> None:
    # FlopCounterMode has no formula for any of these: 0 where we count 2 * 36 + ... MACs
    assert fcm_flops(torch.linalg.solve_triangular, U, B, upper=True) == 0
    assert fcm_flops(torch.linalg.solve, A, B) == 0
    assert fcm_flops(torch.linalg.cholesky, A) == 0
    assert count(torch.linalg.solve, A, B)[1] == 100


def _backward(fn: Callable[..., Any], *args: torch.Tensor, **kwargs: Any) -> tuple[int, int]:
    """(ops, macs) of the backward operators alone, all of them known."""
    leaves = [a.detach().clone().requires_grad_() for a in args]
    output = fn(*leaves, **kwargs)
    outputs = output if isinstance(output, tuple) else (output,)
    loss = sum(o.sum() for o in outputs if o.requires_grad)
    counter = counter_of(torch.autograd.grad, loss, leaves, mode="grad")
    assert not counter.missing, dict(counter.missing)
    return counter.ops, counter.macs


def test_solve_triangular_backward() -> None:
    # grad_B: the transposed triangular solve of 6 columns (96, 36); grad_A = -(grad_B X^T),
    # upper part: a (2, 4, 3) @ (2, 3, 4) bmm: 32 outputs * (2*3 - 1) = 160 ops, 96 macs
    assert _backward(torch.linalg.solve_triangular, U, B, upper=True) == (96 + 160, 36 + 96)


@pytest.mark.parametrize("name", ["solve", "lu_factor", "cholesky", "cholesky_solve", "inv",
                                  "qr", "eigh", "svd", "det", "slogdet", "pinv"])
def test_linalg_backward_is_known(name: str) -> None:
    fn, args, kwargs, _ = CASES[name]
    ops, macs = _backward(fn, *args, **kwargs)
    assert ops > 0 and macs > 0


# -- pairwise distances ------------------------------------------------------------------------

X1, X2 = torch.randn(2, 5, 3), torch.randn(2, 4, 3)  # 2 * 5 * 4 = 40 distances over M = 3


@pytest.mark.parametrize(
    ("p", "expected"),
    [
        (2.0, 360),  # 40 * (3 differences + 2*3 for the 2-norm)
        (1.0, 320),  # 40 * (3 + 2*3 - 1)
        (float("inf"), 320),
        (0.0, 320),
        (3.0, 480),  # 40 * (3 + 3*3)
    ],
)
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_cdist_direct(p: float, expected: int, mode: str) -> None:
    assert count(torch.cdist, X1, X2, p=p, mode=mode) == (expected, 0)


def test_cdist_matmul_path() -> None:
    x1, x2 = torch.randn(2, 30, 3), torch.randn(2, 26, 3)  # more than 25 rows: the mm path
    # norms 2 * (30 + 26) * (2*3 - 1) = 560, -2 * x1 2*30*3 = 180; per distance a dot product
    # (5), two adds, a clamp and a sqrt (4): 2*30*26 = 1560 * 9 = 14040. Total 14780 ops;
    # macs 1560 * 3 = 4680. FlopCounterMode sees _euclidean_dist and counts 0.
    for mode in ("no_grad", "inference_mode"):
        assert count(torch.cdist, x1, x2, mode=mode) == (14780, 4680)
    assert count(torch.cdist, *on_meta((x1, x2))) == (14780, 4680)
    assert fcm_flops(torch.cdist, x1, x2) == 0
    # forced direct: 1560 * 9 = 14040 ops, no macs
    assert count(torch.cdist, x1, x2, compute_mode="donot_use_mm_for_euclid_dist") == (14040, 0)


def test_pdist() -> None:
    # 5 rows: 10 pairs * (3 + 6)
    assert count(torch.pdist, X1[0]) == (90, 0)
    assert count(torch.pdist, X1[0], mode="inference_mode") == (90, 0)


@pytest.mark.parametrize(
    ("p", "expected"),
    [
        (2.0, 400),           # 40 pairs * (3*3 + 1): g / d, then difference, multiply, add
        (1.0, 480),           # 40 * 4*3
        (float("inf"), 720),  # 40 * 6*3
        (3.0, 800),           # 40 * (6*3 + 2)
        (0.0, 0),
    ],
)
def test_cdist_backward(p: float, expected: int) -> None:
    dist = torch.cdist(X1, X2, p=p)
    grad = torch.ones_like(dist)
    assert formula_count(aten._cdist_backward.default, grad, X1, X2, p, dist) == (expected, 0)


def test_pdist_backward() -> None:
    x = X1[0]
    dist = torch.pdist(x)
    # 10 pairs * (3*3 + 1 + 3): the p = 2 pair gradient, and the second row's accumulation
    assert formula_count(aten._pdist_backward.default, torch.ones_like(dist), x, 2.0,
                         dist) == (130, 0)


def test_cdist_backward_runs_the_kernel_once_per_input() -> None:
    x1 = X1.clone().requires_grad_()
    x2 = X2.clone().requires_grad_()
    loss = torch.cdist(x1, x2).sum()
    counter = counter_of(torch.autograd.grad, loss, [x1, x2], mode="grad")
    assert not counter.missing
    assert counter.calls["aten._cdist_backward.default"] == 2


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_a_cross_product_is_two_products_and_a_difference_per_component(mode: str) -> None:
    a, b = torch.randn(4, 3), torch.randn(4, 3)
    # 4 vectors x 3 components, each a_y b_z - a_z b_y: 3 ops: 36
    assert count(torch.linalg.cross, a, b, mode=mode) == (36, 0)
    assert count(torch.cross, a, b, dim=1, mode=mode) == (36, 0)
    # broadcast: (2, 1, 3) x (1, 4, 3) gives 2 x 4 vectors: 72
    assert count(torch.linalg.cross, torch.randn(2, 1, 3), b[None], mode=mode) == (72, 0)


def test_a_cross_product_s_gradient_is_two_cross_products() -> None:
    a, b = torch.randn(4, 3, requires_grad=True), torch.randn(4, 3, requires_grad=True)
    counter = counter_of(lambda: torch.autograd.grad(torch.linalg.cross(a, b).sum(), (a, b)),
                         mode="grad")
    # forward 36, the sum 11, the two gradients b x g and g x a: 36 each
    assert not counter.missing and counter.ops == 36 + 11 + 2 * 36


@pytest.mark.parametrize("fn", [torch.linalg.matrix_exp, torch.linalg.eigvals])
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_data_dependent_or_iterative_kernels_without_a_formula_stay_unknown(
        fn: Any, mode: str) -> None:
    # matrix_exp picks its Taylor degree and squarings from the matrix's norm; eig's QR
    # iterations have no formula yet: both listed, whatever path reaches them
    counter = counter_of(fn, torch.randn(3, 3), mode=mode)
    assert counter.missing and counter.ops == 0


def test_ormqr_applies_the_reflectors_without_forming_q() -> None:
    reflectors, tau = torch.geqrf(torch.randn(4, 3))  # 3 reflectors of order 4
    # Q (4 x 4) times C (4 x 2), LAWN 41's leading term 4mpk - 2pk**2: m = 4, p = 2, k = 3:
    # 96 - 36 = 60 ops, 30 macs; Qᵀ the same; C (2 x 4) times Q from the right the same
    assert count(torch.ormqr, reflectors, tau, torch.randn(4, 2)) == (60, 30)
    assert count(torch.ormqr, reflectors, tau, torch.randn(4, 2), transpose=True) == (60, 30)
    assert count(torch.ormqr, reflectors, tau, torch.randn(2, 4), left=False) == (60, 30)
    # a batch of 5 factorisations, each applied to its C: 5 times
    batch, taus = torch.geqrf(torch.randn(5, 4, 3))
    assert count(torch.ormqr, batch, taus, torch.randn(5, 4, 2)) == (300, 150)
