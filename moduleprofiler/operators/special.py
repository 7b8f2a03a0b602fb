"""Special functions (``torch.special``, ``polygamma``, ``igamma``, ``mvlgamma``) and the
log-sum-exp of two tensors (``logaddexp``) and its running form (``logcumsumexp``).

A special function evaluated once per element costs 1 op, as the convention prices every
elementary function (``erf``, ``lgamma``, ``digamma`` and ``i0`` already cost 1 in
``elementwise.py``): a Bessel function, ``erfcx``, ``ndtri``, ``log_ndtr``, the scaled Bessel
functions, Hurwitz's zeta and the regularised incomplete gamma functions are each one
evaluation, whatever series or rational approximation the kernel uses. Functions built from such
evaluations count their parts: ``entr`` and ``xlog1py`` are a log and a multiply (as ``xlogy``),
``mvlgamma`` a sum of ``p`` log-gamma terms. Per output element, so broadcasting counts the work
done; ``macs`` are 0 throughout.

NB: the orthogonal polynomials (``special_chebyshev_polynomial_*``, ``hermite``, ``laguerre``,
``legendre``) have no formula: each element runs a recurrence of ``n`` steps, ``n`` read from a
tensor, or ``cos(n acos x)`` for some ``x`` (Chebyshev), so the work depends on the values; they
are listed as unsupported, never counted as 1.
"""

from __future__ import annotations

from typing import Any

from moduleprofiler.operators._common import (
    Args,
    Count,
    aten,
    by_decomposition,
    out_numel,
    register,
    with_inplace,
)
from moduleprofiler.operators.elementwise import cumulative_steps, per_element

# One special-function evaluation per output element.
_SPECIAL_ONE = (
    "special_airy_ai", "special_bessel_j0", "special_bessel_j1", "special_bessel_y0",
    "special_bessel_y1", "special_modified_bessel_i0", "special_modified_bessel_i1",
    "special_modified_bessel_k0", "special_modified_bessel_k1",
    "special_scaled_modified_bessel_k0", "special_scaled_modified_bessel_k1",
    "special_spherical_bessel_j0", "special_erfcx", "special_i0e", "special_i1",
    "special_i1e", "special_log_ndtr", "special_ndtri", "special_zeta", "igamma", "igammac",
    "polygamma",
)  # fmt: skip
register(*with_inplace(*_SPECIAL_ONE))(per_element(1))
# aliases torch lowers to the operators here and in elementwise.py (whole under
# ``torch.inference_mode``)
by_decomposition(*aten(
    "special_ndtr", "special_polygamma", "special_digamma", "special_psi", "special_erf",
    "special_erfc", "special_erfinv", "special_exp2", "special_expit", "special_expm1",
    "special_gammainc", "special_gammaincc", "special_gammaln", "special_i0", "special_log1p",
    "special_logit", "special_logsumexp", "special_multigammaln", "special_round",
    "special_sinc", "special_xlogy",
))  # fmt: skip

# entr = -x * log(x), xlog1py = x * log1p(y): a log and a multiply, as xlogy (the sign flip is
# free; NB: the tests for x = 0 and NaN that pick the special values are not counted, as in xlogy).
register(*aten("special_entr", "special_xlog1py"))(per_element(2))

# logaddexp(a, b) = max(a, b) + log1p(exp(-|a - b|)): max, subtract, abs, exp, log1p, add; the
# base-2 form takes exp2 and multiplies the log1p by 1 / ln 2. NB: the kernel's test for two
# equal infinities (which returns a) is not counted.
LOGADDEXP = 6
register(*aten("logaddexp"))(per_element(LOGADDEXP))
register(*aten("logaddexp2"))(per_element(LOGADDEXP + 1))


@register(*with_inplace("logcumsumexp"))
def logcumsumexp_ops(args: Args, out: Any) -> Count:
    """6 * (numel - lines): each step of the running result is a ``logaddexp`` of it and the
    next value, as the kernel computes it."""
    return LOGADDEXP * cumulative_steps(args), 0


@register(*with_inplace("mvlgamma"))
def mvlgamma_ops(args: Args, out: Any) -> Count:
    """numel * 3p: per element ``p`` offsets ``x - j / 2`` (adds), ``p`` log-gammas, ``p - 1``
    adds of the sum and the constant's add."""
    p = int(args.get("p") or 1)
    return 3 * p * out_numel(out), 0
