"""FFTs against the 5 N log2 N convention (docs/operators.md, "Fourier transforms")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from moduleprofiler.operators.spectral import fft_ops
from tests.operators.helpers import count, counter_of, fcm_flops, formula_count, on_meta

REAL = torch.randn(2, 8)
COMPLEX = torch.randn(2, 8, dtype=torch.cfloat)
HALF = torch.randn(2, 5, dtype=torch.cfloat)  # a one-sided spectrum of 8 real points
IMAGE = torch.randn(2, 8, 8)
WINDOW = torch.hann_window(16)


def test_one_transform() -> None:
    assert fft_ops(8, real=False) == 120  # 5 * 8 * log2 8
    assert fft_ops(8, real=True) == 60  # half
    assert fft_ops(6, real=True) == 39  # 2.5 * 6 * log2 6 = 38.77, rounded
    assert fft_ops(1, real=False) == 0


Case = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any], int]
CASES: dict[str, Case] = {
    "rfft": (torch.fft.rfft, (REAL,), {}, 120),  # 2 signals * 2.5 * 8 * 3
    "fft_of_real": (torch.fft.fft, (REAL,), {}, 120),  # r2c, two-sided: still half
    "fft": (torch.fft.fft, (COMPLEX,), {}, 240),  # 2 * 5 * 8 * 3
    # the inverse is scaled by 1/n by default: + 2 real multiplies per complex output (16)
    "ifft": (torch.fft.ifft, (COMPLEX,), {}, 240 + 32),
    "fft_ortho": (torch.fft.fft, (COMPLEX,), {"norm": "ortho"}, 240 + 32),
    # (2, 5) complex -> (2, 8) real: 2 * 60, + 1 multiply per real output (16)
    "irfft": (torch.fft.irfft, (HALF,), {}, 120 + 16),
    # 2 signals of N = 64 points: 2 * 5 * 64 * 6 = 3840 (the real input is made complex)
    "fft2": (torch.fft.fft2, (IMAGE,), {}, 3840),
    # real 2-D: 2 * 2.5 * 64 * 6 = 1920, + ortho scaling 2 * (2 * 8 * 5 outputs) = 160
    "rfft2_ortho": (torch.fft.rfft2, (IMAGE,), {"norm": "ortho"}, 1920 + 160),
    # one dim of the image: 2 * 8 signals of 8 points, complex: 16 * 120
    "fft_dim": (torch.fft.fft, (IMAGE.to(torch.cfloat),), {"dim": 1}, 1920),
    # 64 samples, n_fft 16, hop 4, centre-padded to 80: 17 frames; windowing 2 * 17 * 16 =
    # 544 multiplies, then 34 real transforms of 16 points: 34 * 2.5 * 16 * 4 = 5440
    "stft": (torch.stft, (torch.randn(2, 64), 16),
             {"window": WINDOW, "return_complex": True}, 544 + 5440),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("mode", ["no_grad", "grad", "inference_mode"])
def test_fft_counts(name: str, mode: str) -> None:
    fn, args, kwargs, expected = CASES[name]
    assert count(fn, *args, mode=mode, **kwargs) == (expected, 0)


@pytest.mark.parametrize("name", ["rfft", "fft", "ifft", "irfft", "fft2", "rfft2_ortho"])
def test_fft_counts_on_meta(name: str) -> None:
    fn, args, kwargs, expected = CASES[name]
    assert count(fn, *on_meta(args), **kwargs) == (expected, 0)


def test_flopcountermode_counts_no_fft() -> None:
    # no FFT formula in FlopCounterMode: 0 FLOPs where we count 3840 ops (and 0 macs)
    assert fcm_flops(torch.fft.fft2, IMAGE) == 0


def test_windows_and_frequencies_are_free() -> None:
    assert count(torch.hann_window, 16) == (0, 0)
    assert count(torch.kaiser_window, 16) == (0, 0)
    assert count(torch.fft.rfftfreq, 16) == (0, 0)


def test_rfft_backward() -> None:
    x = REAL.clone().requires_grad_()
    loss = torch.fft.rfft(x).abs().sum()
    counter = counter_of(torch.autograd.grad, loss, [x], mode="grad")
    assert not counter.missing, dict(counter.missing)
    # the gradient of a one-sided r2c is a complex transform of the zero-padded full spectrum
    assert counter.calls["aten._fft_c2c.default"] == 1
    spectrum = torch.zeros(2, 8, dtype=torch.cfloat)
    # 2 signals * 5 * 8 * 3
    assert formula_count(torch.ops.aten._fft_c2c.default, spectrum, [1], 0, False) == (240, 0)


def test_irfft_backward_is_known() -> None:
    spectrum = HALF.clone().requires_grad_()
    loss = torch.fft.irfft(spectrum).sum()
    counter = counter_of(torch.autograd.grad, loss, [spectrum], mode="grad")
    assert not counter.missing, dict(counter.missing)
    assert counter.calls["aten._fft_r2c.default"] == 1
