"""Dense linear algebra (solvers, factorisations, decompositions) and pairwise distances.

``macs`` count the multiply-accumulates of each algorithm, ``ops`` the scalar arithmetic (a
multiply-add is 2 ops; divisions, square roots, logarithms 1 each). Batch dimensions multiply
everything; a right-hand side broadcast against a batch of matrices is solved once per
broadcast batch entry, a matrix is factored once per entry of its own batch.

Direct methods are counted **exactly**, by the textbook algorithm (``docs/operators.md`` gives
each count); their leading terms are LAPACK's (LAWN 41):

* triangular solve, ``n x n``, per right-hand side: ``n(n-1)/2`` multiply-adds and ``n``
  divisions (none for a unit diagonal): ``n**2`` ops;
* LU with partial pivoting of ``m x n`` (``p = min(m, n)``): at step ``j`` ``m - j`` divisions
  and ``(m - j)(n - j)`` multiply-adds; square: ``2n**3/3 - n**2/2 - n/6`` ops;
* Cholesky: ``(n**3 - n)/6`` multiply-adds, ``n(n-1)/2`` divisions and ``n`` square roots:
  ``n**3/3 + n**2/2 + n/6`` ops.

Iterative and orthogonal methods are counted by the **leading term** of the standard tables,
``ops = 2 * macs``: Householder QR (LAWN 41: ``geqrf`` ``2mn**2 - 2n**3/3``, ``orgqr``
``4mqk - 2(m+q)k**2 + 4k**3/3``), the symmetric eigensolver (Golub & Van Loan, *Matrix
Computations*, 4th ed., sec. 8.3: ``4n**3/3`` eigenvalues only, ``9n**3`` with eigenvectors) and
the SVD (Golub-Reinsch column of Golub & Van Loan's sec. 8.6 table, ``m >= n``: ``4mn**2 - 4n**3/3``
singular values only, ``14mn**2 + 8n**3`` thin, ``4m**2 n + 8mn**2 + 9n**3`` full).

NB: these are conventions, not kernel transcripts: pivot searches and row swaps (``O(n**2)``
comparisons and moves) are not counted; an inverse is counted as torch computes it, an LU
solve against the identity (``4n**3/3`` multiply-adds), not LAPACK's ``getri`` (``n**3``); the
iterative methods' real cost depends on the data (sweeps to convergence), which a shape cannot
show. ``FlopCounterMode`` counts 0 for every operator in this file.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from moduleprofiler.formulas.distance import pnorm_ops
from moduleprofiler.operators._common import (
    ZERO,
    Args,
    Count,
    add_counts,
    aten,
    aten_overload,
    by_decomposition,
    first_tensor,
    free,
    numel,
    register,
)

# -- counts of one matrix ----------------------------------------------------------------------


def triangular_solve_count(n: int, columns: int, unit: bool = False) -> Count:
    """``columns`` triangular solves of order ``n``: ``n(n-1)/2`` multiply-adds each, plus ``n``
    divisions unless the diagonal is unit."""
    macs = columns * (n * (n - 1) // 2)
    return 2 * macs + (0 if unit else columns * n), macs


def lu_count(m: int, n: int) -> Count:
    """LU factorisation of one ``m x n`` matrix: sum over steps ``j = 1..min(m, n)`` of ``m - j``
    divisions and ``(m - j)(n - j)`` multiply-adds."""
    p = min(m, n)
    if p <= 0:
        return ZERO
    s1 = p * (p + 1) // 2
    s2 = p * (p + 1) * (2 * p + 1) // 6
    macs = p * m * n - (m + n) * s1 + s2
    divisions = p * m - s1
    return 2 * macs + divisions, macs


def lu_solve_count(n: int, columns: int) -> Count:
    """Solves with an LU factorisation: a unit-lower and an upper triangular solve per column,
    ``n(n-1)`` multiply-adds and ``n`` divisions."""
    return add_counts(triangular_solve_count(n, columns, unit=True),
                      triangular_solve_count(n, columns))


def cholesky_count(n: int) -> Count:
    """Cholesky factorisation of one ``n x n`` matrix: ``(n**3 - n)/6`` multiply-adds,
    ``n(n-1)/2`` divisions, ``n`` square roots."""
    if n <= 0:
        return ZERO
    macs = (n**3 - n) // 6
    return 2 * macs + n * (n - 1) // 2 + n, macs


def cholesky_solve_count(n: int, columns: int) -> Count:
    """Solves with a Cholesky factor: two non-unit triangular solves per column."""
    one = triangular_solve_count(n, columns)
    return 2 * one[0], 2 * one[1]


def cholesky_inverse_count(n: int) -> Count:
    """The inverse from a Cholesky factor (``potri``): the triangular inverse
    (``(n**3 - n)/6`` multiply-adds, ``n(n+1)/2`` divisions) and the product ``L^-H L^-1``
    (``n(n+1)(n+2)/6`` multiply-adds, dot products of ``t`` terms costing ``2t - 1``):
    ``n(n+1)(2n+1)/6`` multiply-adds, ``ops = 2 * macs`` exactly."""
    macs = n * (n + 1) * (2 * n + 1) // 6
    return 2 * macs, macs


def _leading(macs: int) -> Count:
    return 2 * macs, macs


def geqrf_macs(m: int, n: int) -> int:
    """Householder QR of ``m x n`` (LAWN 41 ``geqrf``): ``L*s**2 - s**3/3`` with
    ``L = max(m, n)``, ``s = min(m, n)``."""
    big, small = max(m, n), min(m, n)
    return max(0, (3 * big * small * small - small**3) // 3)


def orgqr_macs(m: int, q: int, k: int) -> int:
    """Forming ``m x q`` orthonormal columns from ``k`` reflectors (LAWN 41 ``orgqr``):
    ``2mqk - (m+q)k**2 + 2k**3/3``."""
    return max(0, (6 * m * q * k - 3 * (m + q) * k * k + 2 * k**3) // 3)


def eigh_macs(n: int, vectors: bool) -> int:
    """Symmetric eigensolver (Golub & Van Loan 8.3): ``2n**3/3`` for eigenvalues, ``9n**3/2``
    with eigenvectors."""
    return (9 * n**3) // 2 if vectors else (2 * n**3) // 3


def svd_macs(m: int, n: int, vectors: bool, full: bool) -> int:
    """Golub-Reinsch SVD (Golub & Van Loan 8.6), ``L = max(m, n)``, ``s = min(m, n)``: half of
    ``4Ls**2 - 4s**3/3`` (values), ``14Ls**2 + 8s**3`` (thin), ``4L**2 s + 8Ls**2 + 9s**3``
    (full)."""
    big, small = max(m, n), min(m, n)
    if small <= 0:
        return 0
    if not vectors:
        flops3 = 12 * big * small**2 - 4 * small**3  # 3 * flops
        return flops3 // 6
    if full:
        return (4 * big**2 * small + 8 * big * small**2 + 9 * small**3) // 2
    return (14 * big * small**2 + 8 * small**3) // 2


# -- shapes ------------------------------------------------------------------------------------


def _matrices(a: Tensor | None) -> tuple[int, int, int]:
    """(batch, rows, columns) of a (batch of) matrices; (0, 0, 0) for anything else."""
    if a is None or a.dim() < 2:
        return 0, 0, 0
    m, n = int(a.shape[-2]), int(a.shape[-1])
    return (int(a.numel()) // (m * n) if m * n else 0), m, n


def _scaled(count: Count, times: int) -> Count:
    return count[0] * times, count[1] * times


def _columns(result: Tensor | None, n: int) -> int:
    """Right-hand sides solved, over the whole batch: each is a length-``n`` line of the
    result (a column for ``left=True``, a row for ``left=False``, a vector for 1-D ``B``)."""
    return numel(result) // n if n else 0


# -- triangular solves -------------------------------------------------------------------------


@register(*aten("linalg_solve_triangular"))
def solve_triangular_ops(args: Args, out: Any) -> Count:
    """columns * n**2 ops (columns * n(n-1) with a unit diagonal), columns * n(n-1)/2 macs."""
    _, _, n = _matrices(args.tensor("self"))
    return triangular_solve_count(n, _columns(first_tensor(out), n),
                                  unit=args.flag("unitriangular"))


@register(*aten("triangular_solve"))
def triangular_solve_ops(args: Args, out: Any) -> Count:
    """As :func:`solve_triangular_ops`; ``triangular_solve(B, A)`` takes the system second."""
    _, _, n = _matrices(args.tensor("A"))
    return triangular_solve_count(n, _columns(first_tensor(out), n),
                                  unit=args.flag("unitriangular"))


# -- LU ----------------------------------------------------------------------------------------


@register(*aten("linalg_lu_factor_ex", "linalg_lu"))
def lu_factor_ops(args: Args, out: Any) -> Count:
    """batch * LU(m, n): ``2n**3/3 - n**2/2 - n/6`` ops for a square matrix (pivoting and the
    unpacking of ``linalg_lu`` are moves: free)."""
    batch, m, n = _matrices(args.first())
    return _scaled(lu_count(m, n), batch)


@register(*aten("linalg_lu_solve"))
def lu_solve_ops(args: Args, out: Any) -> Count:
    """columns * (2n**2 - n) ops, columns * n(n-1) macs (two triangular solves)."""
    _, _, n = _matrices(args.tensor("LU"))
    return lu_solve_count(n, _columns(first_tensor(out), n))


@register(*aten("_linalg_solve_ex"))
def solve_ops(args: Args, out: Any) -> Count:
    """LU of A (per matrix of A's batch) and the LU solve of every right-hand side."""
    batch, _, n = _matrices(args.tensor("A"))
    return add_counts(_scaled(lu_count(n, n), batch),
                      lu_solve_count(n, _columns(first_tensor(out), n)))


@register(*aten("linalg_inv_ex"))
def inv_ops(args: Args, out: Any) -> Count:
    """As torch computes it, ``solve(A, I)``: LU plus ``n`` right-hand sides:
    ``8n**3/3`` ops leading."""
    batch, _, n = _matrices(args.first())
    return _scaled(add_counts(lu_count(n, n), lu_solve_count(n, n)), batch)


@register(*aten("_linalg_det"))
def det_ops(args: Args, out: Any) -> Count:
    """LU plus the product of the diagonal (n - 1 multiplies; the pivot sign is a sign flip)."""
    batch, _, n = _matrices(args.first())
    ops, macs = lu_count(n, n)
    return _scaled((ops + max(n - 1, 0), macs), batch)


@register(*aten("_linalg_slogdet"))
def slogdet_ops(args: Args, out: Any) -> Count:
    """LU plus 5n - 2 per matrix: sign, abs and log of each diagonal entry, the product of
    the signs, the sum of the logs."""
    batch, _, n = _matrices(args.first())
    ops, macs = lu_count(n, n)
    return _scaled((ops + (5 * n - 2 if n else 0), macs), batch)


# -- Cholesky ----------------------------------------------------------------------------------


@register(*aten("linalg_cholesky_ex"))
def cholesky_ops(args: Args, out: Any) -> Count:
    """batch * (n**3/3 + n**2/2 + n/6) ops, batch * (n**3 - n)/6 macs."""
    batch, _, n = _matrices(args.first())
    return _scaled(cholesky_count(n), batch)


@register(*aten("cholesky_solve", "_cholesky_solve_helper"))
def cholesky_solve_ops(args: Args, out: Any) -> Count:
    """columns * 2n**2 ops, columns * n(n-1) macs (two triangular solves)."""
    factor = args.tensor("input2") if args.tensor("input2") is not None else args.tensor("A")
    _, _, n = _matrices(factor)
    return cholesky_solve_count(n, _columns(first_tensor(out), n))


@register(*aten("cholesky_inverse"))
def cholesky_inverse_ops(args: Args, out: Any) -> Count:
    """batch * n(n+1)(2n+1)/3 ops (``2n**3/3`` leading), half as many macs."""
    batch, _, n = _matrices(args.first())
    return _scaled(cholesky_inverse_count(n), batch)


# -- orthogonal factorisations and iterative decompositions ------------------------------------


@register(*aten("linalg_qr"))
def qr_ops(args: Args, out: Any) -> Count:
    """Householder QR (``geqrf``) and, unless ``mode='r'``, forming Q (``orgqr``: ``k``
    columns for ``'reduced'``, ``m`` for ``'complete'``, ``k = min(m, n)``)."""
    batch, m, n = _matrices(args.first())
    mode = args.get("mode", "reduced")
    macs = geqrf_macs(m, n)
    if mode != "r":
        k = min(m, n)
        macs += orgqr_macs(m, m if mode == "complete" else k, k)
    return _scaled(_leading(macs), batch)


@register(*aten("geqrf"))
def geqrf_ops(args: Args, out: Any) -> Count:
    """Householder QR without forming Q: ``2mn**2 - 2n**3/3`` ops (m >= n)."""
    batch, m, n = _matrices(args.first())
    return _scaled(_leading(geqrf_macs(m, n)), batch)


@register(*aten("linalg_householder_product"))
def householder_product_ops(args: Args, out: Any) -> Count:
    """``orgqr``: ``m x q`` orthonormal columns from ``k`` reflectors."""
    batch, m, q = _matrices(args.first())
    tau = args.tensor("tau")
    k = int(tau.shape[-1]) if tau is not None and tau.dim() else 0
    return _scaled(_leading(orgqr_macs(m, q, k)), batch)


def ormqr_macs(order: int, others: int, k: int) -> int:
    """Applying ``k`` reflectors of order ``order`` to a matrix with ``others`` columns (left) or
    rows (right) (LAWN 41 ``ormqr``): ``2 * order * others * k - others * k**2``."""
    return max(0, 2 * order * others * k - others * k * k)


@register(*aten("ormqr"))
def ormqr_ops(args: Args, out: Any) -> Count:
    """``Q C`` (or ``C Q``, ``Qᴴ``) from ``geqrf``'s ``k`` reflectors without forming ``Q``:
    ``4mpk - 2pk**2`` ops, ``m`` the order of ``Q`` (C's rows for ``left``, else its columns)
    and ``p`` C's other dimension."""
    tau, other = args.tensor("input2"), args.tensor("input3")
    batch, rows, columns = _matrices(other)
    k = int(tau.shape[-1]) if tau is not None and tau.dim() else 0
    left = args.get("left", True) is not False
    order, others = (rows, columns) if left else (columns, rows)
    return _scaled(_leading(ormqr_macs(order, others, k)), batch)


@register(*aten("_linalg_eigh"))
def eigh_ops(args: Args, out: Any) -> Count:
    """batch * 4n**3/3 ops for eigenvalues, batch * 9n**3 with eigenvectors."""
    batch, _, n = _matrices(args.first())
    return _scaled(_leading(eigh_macs(n, args.flag("compute_v"))), batch)


@register(*aten("_linalg_svd"))
def svd_ops(args: Args, out: Any) -> Count:
    """Golub-Reinsch SVD: values only, thin (``full_matrices=False``) or full factors."""
    batch, m, n = _matrices(args.first())
    return _scaled(
        _leading(svd_macs(m, n, args.flag("compute_uv"), args.flag("full_matrices"))), batch
    )


@register(aten_overload("linalg_pinv", "atol_rtol_tensor"),
          aten_overload("linalg_pinv", "atol_rtol_tensor_out"))
def pinv_ops(args: Args, out: Any) -> Count:
    """A thin SVD (eigh with ``hermitian``), the tolerance (2 per matrix), ``k`` comparisons
    and ``k`` reciprocals of the singular values (``+ k`` abs for eigenvalues), then
    ``V diag(1/s) U^H``: ``n*k`` multiplies and an ``(n, k) @ (k, m)`` product."""
    batch, m, n = _matrices(args.first())
    k = min(m, n)
    if args.flag("hermitian"):
        ops, macs = _leading(eigh_macs(n, vectors=True))
        ops += k
    else:
        ops, macs = _leading(svd_macs(m, n, vectors=True, full=False))
    product = n * m * k
    ops += 2 + 2 * k + n * k + (2 * product - n * m if k else 0)
    return _scaled((ops, macs + product), batch)


# moves and checks: unpacking LU factors, raising on a failed factorisation
free("lu_unpack", "_linalg_check_errors")


CROSS_PER_OUTPUT = 3
"""Ops per element of a cross product: ``a_y b_z - a_z b_y`` is two multiplies and a subtract."""


@register(*aten("linalg_cross"))
def cross_ops(args: Args, out: Any) -> Count:
    """numel(out) * 3: each component of each 3-vector is two products and a difference."""
    return CROSS_PER_OUTPUT * numel(first_tensor(out)), 0


def _composite(*names: str) -> list[torch._ops.OpOverload]:
    """The overloads of ``names`` that torch decomposes (CompositeImplicitAutograd); kernels
    with their own implementation (``linalg_pinv.atol_rtol_tensor``) are left out."""
    found = []
    for packet in aten(*names):
        for overload_name in packet.overloads():
            overload = getattr(packet, overload_name)
            if torch._C._dispatch_has_kernel_for_dispatch_key(
                overload.name(), "CompositeImplicitAutograd"
            ):
                found.append(overload)
    return found


# Under ``torch.inference_mode`` these arrive whole; elsewhere their parts (above) do.
by_decomposition(*_composite(
    "linalg_solve", "linalg_solve_ex", "linalg_lu_factor", "_lu_with_info", "lu_solve",
    "linalg_cholesky", "linalg_inv", "inverse", "linalg_eigh", "linalg_eigvalsh", "linalg_svd",
    "linalg_svdvals", "linalg_det", "det", "linalg_slogdet", "slogdet", "logdet", "linalg_pinv",
    "pinverse", "linalg_matrix_norm", "linalg_norm", "nuclear_norm", "linalg_cond",
    "linalg_matrix_rank", "linalg_tensorsolve", "linalg_tensorinv", "orgqr", "cdist", "pdist",
    "cross", "svd", "matrix_exp", "linalg_eigvals", "linalg_ldl_factor", "linalg_diagonal",
    "linalg_vander",
))  # fmt: skip


# -- pairwise distances ------------------------------------------------------------------------


def _norm_p(args: Args) -> float:
    return args.number("p", 2.0)


@register(*aten("_cdist_forward", "_pdist_forward"))
def cdist_ops(args: Args, out: Any) -> Count:
    """outputs * (M + pnorm(M)): M differences, then the p-norm of each difference vector
    (p=2: 2M; p in {0, 1, inf}: 2M - 1; else 3M). No matmul: macs 0."""
    x1 = args.first()
    if not isinstance(x1, Tensor) or x1.dim() == 0:
        return ZERO
    size = int(x1.shape[-1])
    return numel(first_tensor(out)) * (size + pnorm_ops(size, _norm_p(args))), 0


@register(*aten("_euclidean_dist"))
def euclidean_dist_ops(args: Args, out: Any) -> Count:
    """``sqrt(clamp(|x|**2 - 2 x.y + |y|**2, 0))`` (``cdist``'s matmul path), x1 (B, P, M),
    x2 (B, R, M): squared norms B(P + R)(2M - 1), ``-2 x1`` B*P*M, the products B*P*R*(2M - 1)
    ops and B*P*R*M macs, two norm adds, a clamp and a sqrt per output (B*P*R*4)."""
    x1, x2 = args.first(), args.tensor("x2")
    result = first_tensor(out)
    if not isinstance(x1, Tensor) or x2 is None or result is None or x1.dim() < 2:
        return ZERO
    size = int(x1.shape[-1])
    outputs = numel(result)
    norms = (numel(x1) // size + numel(x2) // size) * (2 * size - 1) if size else 0
    return norms + numel(x1) + outputs * (2 * size - 1 + 4), outputs * size


def _distance_backward_per_pair(size: int, p: float) -> int:
    """Gradient of one distance with respect to one of its vectors, accumulated: p=1: 4M
    (difference, sign, times g, accumulate); p=2: 3M + 1 (g / d once, then difference,
    multiply, accumulate); p=inf: 6M (difference, abs, test against d, sign, times g,
    accumulate); p=0: 0 (zero gradient); other p: 6M + 2 (difference, abs, power, sign,
    two multiplies and an accumulate per term; d**(p-1) and g / that per pair)."""
    if p == 0:
        return 0
    if p == 1:
        return 4 * size
    if p == 2:
        return 3 * size + 1
    if math.isinf(p):
        return 6 * size
    return 6 * size + 2


@register(*aten("_cdist_backward"))
def cdist_backward_ops(args: Args, out: Any) -> Count:
    """pairs * the per-pair gradient (torch runs one call per input that needs a gradient)."""
    x1, grad = args.tensor("x1"), args.first()
    if x1 is None or x1.dim() == 0:
        return ZERO
    return numel(grad) * _distance_backward_per_pair(int(x1.shape[-1]), _norm_p(args)), 0


@register(*aten("_pdist_backward"))
def pdist_backward_ops(args: Args, out: Any) -> Count:
    """pairs * (the per-pair gradient + M): each pair's gradient lands on both of its rows."""
    x = args.tensor("self")
    if x is None or x.dim() == 0:
        return ZERO
    size = int(x.shape[-1])
    return numel(args.first()) * (_distance_backward_per_pair(size, _norm_p(args)) + size), 0
