"""Fast Fourier transforms: ``_fft_c2c``, ``_fft_r2c``, ``_fft_c2r`` and the ``torch.fft`` /
``stft`` composites that lower to them.

NB: an FFT is counted by the standard convention for radix-2 transforms, in **real** arithmetic
(a complex add is 2 ops, a complex multiply 6): a complex transform of ``N`` points costs
``5 N log2 N``, a transform with real input (``r2c``) or real output (``c2r``) half of that,
``2.5 N log2 N``, rounded to an integer per transformed signal. Over several dims ``N`` is the
product of the transformed sizes (``5 N log2 N`` is then exactly the row-column sum of the
1-D transforms); every other element of the input indexes another signal (the batch). A
normalisation (``norm="ortho"``, or ``"forward"``/``"backward"`` where it scales) multiplies
each real component of the output once (2 ops per complex element). Butterflies are not
multiply-accumulate work: ``macs`` is 0, as ``FlopCounterMode``, which has no FFT formula,
reports 0 FLOPs. The count is the same for every size, including the non-power-of-two sizes
that pocketFFT and cuFFT handle with mixed radices or Bluestein's algorithm, whose real cost
is higher.

Window functions (``hann_window``, ...) and ``fftfreq`` are factories whose values depend only
on their size arguments: like ``arange`` and ``linspace`` they count as allocation (free).
"""

from __future__ import annotations

import math
from typing import Any

from torch import Tensor

from moduleprofiler.operators._common import (
    ZERO,
    Args,
    Count,
    aten,
    by_decomposition,
    first_tensor,
    free,
    numel,
    register,
)

COMPLEX_FFT_PER_POINT_LOG = 5.0
"""A complex ``N``-point FFT costs ``5 N log2 N`` real ops."""


def fft_ops(points: int, real: bool) -> int:
    """One transform of ``points`` points: ``5 N log2 N`` (complex), half for real
    input/output; rounded to the nearest integer."""
    if points <= 1:
        return 0
    cost = COMPLEX_FFT_PER_POINT_LOG * points * math.log2(points)
    return round(cost / 2 if real else cost)


def _transform(shaped: Any, dims: Any, real: bool) -> int:
    """All transforms over ``dims`` of ``shaped``: signals * fft_ops(N)."""
    if not isinstance(shaped, Tensor) or shaped.dim() == 0:
        return 0
    rank = shaped.dim()
    sizes = [int(shaped.shape[int(d) % rank]) for d in (dims or range(rank))]
    points = math.prod(sizes)
    signals = numel(shaped) // points if points else 0
    return signals * fft_ops(points, real)


def _normalisation(args: Args, out: Any, components: int) -> int:
    """One multiply per real component of the output when the transform is normalised."""
    return components * numel(first_tensor(out)) if args.get("normalization") else 0


@register(*aten("_fft_c2c"))
def fft_c2c_ops(args: Args, out: Any) -> Count:
    """signals * 5 N log2 N, + 2 per output element when normalised."""
    return _transform(args.first(), args.get("dim"), real=False) + _normalisation(args, out, 2), 0


@register(*aten("_fft_r2c"))
def fft_r2c_ops(args: Args, out: Any) -> Count:
    """signals * 2.5 N log2 N (N from the real input; a two-sided output's other half is
    filled by conjugation, a sign flip), + 2 per output element when normalised."""
    return _transform(args.first(), args.get("dim"), real=True) + _normalisation(args, out, 2), 0


@register(*aten("_fft_c2r"))
def fft_c2r_ops(args: Args, out: Any) -> Count:
    """signals * 2.5 N log2 N (N from the real output), + 1 per output element when
    normalised."""
    result = first_tensor(out)
    if result is None:
        return ZERO
    return _transform(result, args.get("dim"), real=True) + _normalisation(args, out, 1), 0


# Under ``torch.inference_mode`` these arrive whole; elsewhere their parts (above) do.
by_decomposition(*aten(
    "fft_fft", "fft_ifft", "fft_rfft", "fft_irfft", "fft_hfft", "fft_ihfft",
    "fft_fft2", "fft_ifft2", "fft_rfft2", "fft_irfft2", "fft_hfft2", "fft_ihfft2",
    "fft_fftn", "fft_ifftn", "fft_rfftn", "fft_irfftn", "fft_hfftn", "fft_ihfftn",
    "fft_fftshift", "fft_ifftshift", "stft", "istft",
))  # fmt: skip

free("fft_fftfreq", "fft_rfftfreq", "hann_window", "hamming_window", "blackman_window",
     "bartlett_window", "kaiser_window")
