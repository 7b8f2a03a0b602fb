"""Sampling and lookups by value: ``grid_sample``'s kernels (forward and backward), ``polar``,
``isin`` and ``multinomial``.

Grid sampling (``docs/operators.md`` tabulates it): each of the ``P`` grid points (``N`` x the
output's spatial size) computes its source coordinates and interpolation weights once, shared
by the ``C`` channels; then each of the ``P * C`` output elements is a weighted sum of its taps.
Index arithmetic and the zero-padding border masks are address computations and are not
counted (as in the upsampling formulas).

Per grid point, over ``d`` coordinates (``d = 2`` for ``grid_sampler_2d``, 3 for ``_3d``):

* unnormalisation ``[-1, 1] -> pixels``: an affine map, 2 ops per coordinate (multiply, add);
* padding per coordinate: zeros 0; border 2 (a clip: min and max); reflection 9 (abs, divide,
  trunc, multiply, two subtracts, minimum, then the clip's 2), 11 with ``align_corners=False``
  (the half-pixel shift before and after reflecting);
* bilinear: ``d`` floors, ``2d`` differences (distances to the cell's sides) and ``2**d``
  corner weights of ``d - 1`` multiplies each: 10 in 2-D, 25 in 3-D; then per output element
  ``2**d`` multiplies and ``2**d - 1`` adds (7 in 2-D, 15 in 3-D);
* nearest: ``d`` roundings; the output is a copy (0);
* bicubic (2-D): per coordinate a floor, a fraction and the four cubic-convolution
  coefficients (25), padding applied to each of the 4 tap coordinates; per output element the
  separable 4 x 4 weighted sum, 35 (the upsampling formulas' bicubic count).

NB: bilinear costs 7 per output element here, where bilinear *upsampling* costs 9: the grid
kernel forms the four corner weights once per point (counted with the point), upsampling's
separable form interpolates each row and then the column.

The backward recomputes each point's coordinates and weights (the forward's per-point cost),
then, per channel of each point: ``grad_input`` scatters the incoming gradient into every tap
(a multiply and an add each: bilinear 8 / 16 in 3-D, bicubic 32, nearest 1, as the upsampling
backward); ``grad_grid`` differentiates the interpolant along each coordinate (the interpolation
with that coordinate's weights replaced by their derivatives), multiplies by the incoming
gradient and accumulates: bilinear ``d * (2**(d+1) + 1)`` (18 in 2-D, 51 in 3-D), bicubic 74,
nearest 0 (its grid gradient is zero). Per point the grid gradient adds the derivative weights
(bilinear 3-D: 24 multiplies; bicubic: 14 per coordinate) and the chain rule through the
unnormalisation (1 per coordinate) and the padding (1 more per coordinate for border and
reflection).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from moduleprofiler.operators._common import (
    ZERO,
    Args,
    Count,
    aten,
    first_tensor,
    numel,
    register,
)
from moduleprofiler.operators.matmul import product_count
from moduleprofiler.operators.selection import log2_ceil

# -- affine grids ------------------------------------------------------------------------------

@register(*aten("affine_grid_generator"))
def affine_grid_ops(args: Args, out: Any) -> Count:
    """``F.affine_grid``: each of a grid point's ``d`` coordinates is a row of ``theta``
    (``d x (d + 1)``) times the point's homogeneous base coordinates, a dot product of length
    ``d + 1``: ops ``outputs * (2(d + 1) - 1)``, macs ``outputs * (d + 1)`` (``outputs = N x
    points x d``; the decomposition's multiply and sum count the same ops). The base grid is
    filled like ``linspace`` (free)."""
    if not isinstance(out, Tensor) or out.dim() < 2:
        return ZERO
    return product_count(numel(out), int(out.shape[-1]) + 1)


@register(*aten("affine_grid_generator_backward"))
def affine_grid_backward_ops(args: Args, out: Any) -> Count:
    """The gradient of ``theta`` (``N x d x (d + 1)``): each element sums, over the grid
    points, a coordinate's gradient times a base coordinate: a dot product of length
    ``points`` (``torch.bmm`` of the base grid and the gradient, as its decomposition runs)."""
    grad = args.first()
    if not isinstance(out, Tensor) or not isinstance(grad, Tensor) or out.dim() != 3:
        return ZERO
    points = numel(grad) // max(int(out.shape[0]) * int(grad.shape[-1]), 1)
    return product_count(numel(out), points)


# -- grid sampling -----------------------------------------------------------------------------

BILINEAR, NEAREST, BICUBIC = 0, 1, 2
"""``interpolation_mode`` as the aten kernels receive it."""
ZEROS, BORDER, REFLECTION = 0, 1, 2
"""``padding_mode`` as the aten kernels receive it."""

UNNORMALIZE = 2       # a * x + b per coordinate
CLIP = 2              # min and max
REFLECT = 7           # abs, divide, trunc, multiply, subtract, subtract, minimum
HALF_PIXEL_SHIFT = 2  # align_corners=False: shift by half a pixel before reflecting, and back
CUBIC_COEFFICIENTS = 25   # four cubic-convolution weights of one fraction t
CUBIC_DERIVATIVES = 14    # their derivatives with respect to t
CUBIC_PER_OUTPUT = 35     # 4 rows of 4 taps (7 each), then the column (7)


def _padding_ops(padding_mode: int, align_corners: bool) -> int:
    """Ops to bring one coordinate inside the input."""
    if padding_mode == BORDER:
        return CLIP
    if padding_mode == REFLECTION:
        return REFLECT + CLIP + (0 if align_corners else HALF_PIXEL_SHIFT)
    return 0


def _bilinear_weights(dims: int) -> int:
    """floors, distances to the cell's sides, 2**d products of d factors."""
    return dims + 2 * dims + 2**dims * (dims - 1)


def grid_point_ops(dims: int, mode: int, padding: int, align_corners: bool) -> int:
    """Ops per grid point: source coordinates and interpolation weights."""
    pad = _padding_ops(padding, align_corners)
    if mode == BICUBIC:
        return dims * (UNNORMALIZE + 4 * pad + 2 + CUBIC_COEFFICIENTS)
    if mode == NEAREST:
        return dims * (UNNORMALIZE + pad + 1)
    return dims * (UNNORMALIZE + pad) + _bilinear_weights(dims)


def grid_output_ops(dims: int, mode: int) -> int:
    """Ops per output element (per channel of a grid point): the weighted sum of the taps."""
    if mode == BICUBIC:
        return CUBIC_PER_OUTPUT
    if mode == NEAREST:
        return 0
    return 2 ** (dims + 1) - 1


def _grid(input_: Any, grid: Any) -> tuple[int, int, int] | None:
    """(dims, points, channels) of a grid sample, or None."""
    if not isinstance(input_, Tensor) or not isinstance(grid, Tensor) or grid.dim() < 3:
        return None
    dims = int(grid.shape[-1])
    channels = int(input_.shape[1]) if input_.dim() > 1 else 1
    return dims, numel(grid) // dims if dims else 0, channels


def _options(args: Args) -> tuple[int, int, bool]:
    return (int(args.get("interpolation_mode", BILINEAR)), int(args.get("padding_mode", ZEROS)),
            args.flag("align_corners"))


def grid_sample_count(input_: Any, grid: Any, mode: int, padding: int,
                      align_corners: bool) -> Count:
    """points * per-point ops + points * channels * per-output ops."""
    shape = _grid(input_, grid)
    if shape is None:
        return ZERO
    dims, points, channels = shape
    per_point = grid_point_ops(dims, mode, padding, align_corners)
    return points * per_point + points * channels * grid_output_ops(dims, mode), 0


@register(*aten("grid_sampler_2d", "grid_sampler_3d", "grid_sampler",
                "_grid_sampler_2d_cpu_fallback"))
def grid_sampler_ops(args: Args, out: Any) -> Count:
    """P * (coordinates + weights) + P * C * (weighted sum); see the module docstring."""
    return grid_sample_count(args.first(), args.tensor("grid"), *_options(args))


@register(*aten("cudnn_grid_sampler"))
def cudnn_grid_sampler_ops(args: Args, out: Any) -> Count:
    """cuDNN's sampler: bilinear, zero padding, ``align_corners=True``."""
    return grid_sample_count(args.first(), args.tensor("grid"), BILINEAR, ZEROS, True)


def _scatter_ops(dims: int, mode: int) -> int:
    """grad_input per output element: a multiply and an add per tap (nearest: an add)."""
    if mode == NEAREST:
        return 1
    taps = 4**dims if mode == BICUBIC else 2**dims
    return 2 * taps


def _coordinate_gradient(dims: int, mode: int, padding: int) -> tuple[int, int]:
    """(per output element, per grid point) ops of the grid gradient."""
    if mode == NEAREST:
        return 0, 0
    chain = 1 + (1 if padding != ZEROS else 0)
    if mode == BICUBIC:
        return dims * (CUBIC_PER_OUTPUT + 2), dims * (CUBIC_DERIVATIVES + chain)
    derivative_weights = dims * 2**dims * max(dims - 2, 0)
    return dims * (2 ** (dims + 1) + 1), derivative_weights + dims * chain


def grid_sample_backward_count(input_: Any, grid: Any, mode: int, padding: int,
                               align_corners: bool, want_input: bool, want_grid: bool
                               ) -> Count:
    """Recomputed coordinates and weights, then grad_input's scatter and grad_grid."""
    shape = _grid(input_, grid)
    if shape is None or not (want_input or want_grid):
        return ZERO
    dims, points, channels = shape
    ops = points * grid_point_ops(dims, mode, padding, align_corners)
    if want_input:
        ops += points * channels * _scatter_ops(dims, mode)
    if want_grid:
        per_output, per_point = _coordinate_gradient(dims, mode, padding)
        ops += points * channels * per_output + points * per_point
    return ops, 0


@register(*aten("grid_sampler_2d_backward", "grid_sampler_3d_backward"))
def grid_sampler_backward_ops(args: Args, out: Any) -> Count:
    """Per point the forward's coordinates and weights; per output element the input
    gradient's scatter and the grid gradient, as ``output_mask`` asks."""
    mask = args.get("output_mask") or (True, True)
    return grid_sample_backward_count(args.tensor("input"), args.tensor("grid"),
                                      *_options(args), bool(mask[0]), bool(mask[1]))


@register(*aten("_grid_sampler_2d_cpu_fallback_backward"))
def grid_sampler_fallback_backward_ops(args: Args, out: Any) -> Count:
    """As :func:`grid_sampler_backward_ops`, both gradients."""
    return grid_sample_backward_count(args.tensor("input"), args.tensor("grid"),
                                      *_options(args), True, True)


@register(*aten("cudnn_grid_sampler_backward"))
def cudnn_grid_sampler_backward_ops(args: Args, out: Any) -> Count:
    """As :func:`grid_sampler_backward_ops` for cuDNN's bilinear, zero-padded sampler."""
    return grid_sample_backward_count(args.first(), args.tensor("grid"), BILINEAR, ZEROS, True,
                                      True, True)


# -- complex numbers from polar coordinates ----------------------------------------------------

POLAR = 4
"""``abs * cos(angle) + i * abs * sin(angle)``: a cosine, a sine, two multiplies."""


@register(*aten("polar"))
def polar_ops(args: Args, out: Any) -> Count:
    """4 per output element: cos, sin and two multiplies."""
    return POLAR * numel(first_tensor(out)), 0


# -- membership --------------------------------------------------------------------------------


def _sort_ops(n: int) -> int:
    """A merge sort of ``n`` values (the selection family's convention)."""
    return n * log2_ceil(n)


def isin_uses_sorting(elements: int, tests: int) -> bool:
    """torch's choice (numpy's heuristic): sort when ``tests >= int(10 * elements**0.145)``."""
    return tests >= int(10.0 * float(elements) ** 0.145)


def isin_count(elements: int, tests: int, assume_unique: bool) -> int:
    """Ops of ``isin`` over ``elements`` values and ``tests`` test values."""
    if elements == 0:
        return 0
    if not isin_uses_sorting(elements, tests):
        return elements * tests  # every element compared with every test value
    ops = _sort_ops(elements + tests) + max(elements + tests - 1, 0)
    if not assume_unique:  # ``unique`` of each input first (priced as the selection family does)
        ops += _sort_ops(elements) + elements + _sort_ops(tests) + tests
    return ops


@register(*aten("isin"))
def isin_ops(args: Args, out: Any) -> Count:
    """Brute force ``n * m`` comparisons, or, past torch's size threshold, a sort of the
    ``n + m`` values and ``n + m - 1`` neighbour comparisons (with ``unique`` of each input
    unless ``assume_unique``). A scalar test value: ``n`` comparisons."""
    elements = args.tensor("elements")
    tests = args.tensor("test_elements")
    n = numel(elements) if elements is not None else 1
    m = numel(tests) if tests is not None else 1
    if tests is None:  # isin.Tensor_Scalar redispatches to eq / ne
        return n, 0
    return isin_count(n, m, args.flag("assume_unique")), 0


# -- sampling from a distribution --------------------------------------------------------------


@register(*aten("multinomial"))
def multinomial_ops(args: Args, out: Any) -> Count:
    """Per row of ``n`` weights drawing ``k`` samples, as torch draws them (random draws are
    free): with replacement, a cumulative sum (n - 1), a normalisation (n divides) and a binary
    search per sample (k * ceil(log2(n + 1))); without replacement or for one sample, the
    exponential race ``argmax(w / q)``: n divides and a top-k (n - 1 comparisons for k = 1,
    else n * ceil(log2(k + 1)))."""
    weights = args.first()
    if not isinstance(weights, Tensor) or weights.dim() == 0:
        return ZERO
    n = int(weights.shape[-1])
    rows = numel(weights) // n if n else 0
    k = int(args.get("num_samples", 1))
    if args.flag("replacement") and k > 1:
        per_row = (n - 1) + n + k * max(1, log2_ceil(n + 1))
    elif k == 1:
        per_row = n + (n - 1)
    else:
        per_row = n + n * max(1, log2_ceil(k + 1))
    return rows * per_row, 0
