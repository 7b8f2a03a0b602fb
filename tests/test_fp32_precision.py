"""TF32 settings: read and set through torch's per-backend API, every setting a user made
read back as it was (the setters and getters work without a GPU)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

from moduleprofiler.devices import fp32_precision, tf32_math
from moduleprofiler.efficiency.peaks import device_peaks
from moduleprofiler.efficiency.roofline import compute_dtype
from moduleprofiler.timing.environment import capture_environment

_SETTINGS = ("", "cuda.matmul", "cudnn", "cudnn.conv", "cudnn.rnn", "mkldnn",
             "mkldnn.matmul", "mkldnn.conv")


def _at(path: str) -> Any:
    level: Any = torch.backends
    for part in filter(None, path.split(".")):
        level = getattr(level, part)
    return level


def _read(getter: Callable[[], Any]) -> Any:
    try:
        return getter()
    except RuntimeError:
        return "raises"


def _state() -> dict[str, Any]:
    """Everything a user can read of torch's fp32 precision, a getter that raises as such."""
    state = {path or "torch": _at(path).fp32_precision for path in _SETTINGS}
    state["get_float32_matmul_precision"] = _read(torch.get_float32_matmul_precision)
    state["matmul.allow_tf32"] = _read(lambda: torch.backends.cuda.matmul.allow_tf32)
    return state


@pytest.fixture(autouse=True)
def _torch_defaults() -> Iterator[None]:
    """Each test starts from torch's defaults and leaves them behind."""
    defaults = {path: _at(path).fp32_precision for path in _SETTINGS}
    yield
    torch.set_float32_matmul_precision("highest")
    for path, value in defaults.items():
        _at(path).fp32_precision = value


USER_SETTINGS: dict[str, Callable[[], None]] = {
    "defaults": lambda: None,
    "medium": lambda: torch.set_float32_matmul_precision("medium"),
    "high": lambda: torch.set_float32_matmul_precision("high"),
    "per-backend tf32": lambda: setattr(torch.backends.cuda.matmul, "fp32_precision", "tf32"),
    "torch-wide tf32": lambda: setattr(torch.backends, "fp32_precision", "tf32"),
    "convolutions in ieee": lambda: setattr(torch.backends.cudnn.conv, "fp32_precision",
                                            "ieee"),
}


@pytest.mark.parametrize("enabled", [True, False])
@pytest.mark.parametrize("user", list(USER_SETTINGS))
def test_tf32_math_sets_both_kernels_and_leaves_every_setting_as_it_was(
        user: str, enabled: bool) -> None:
    # the legacy setters it used before: "medium" came back with get_float32_matmul_precision()
    # raising, a per-backend "tf32" made the block raise on entry, the defaults came back with
    # cuda.matmul "ieee" where it was "none"
    USER_SETTINGS[user]()
    before = _state()
    with tf32_math(enabled):
        want = "tf32" if enabled else "ieee"
        assert (fp32_precision("cuda.matmul"), fp32_precision("cudnn.conv")) == (want, want)
    assert _state() == before


def test_the_effective_precision_inherits_an_unset_setting() -> None:
    # unset ("none") up to the top is IEEE; an unset setting follows torch-wide's
    for path in ("", "cuda.matmul", "cudnn", "cudnn.conv"):
        _at(path).fp32_precision = "none"
    assert (fp32_precision("cuda.matmul"), fp32_precision("cudnn.conv")) == ("ieee", "ieee")
    torch.backends.fp32_precision = "tf32"
    assert (fp32_precision("cuda.matmul"), fp32_precision("cudnn.conv")) == ("tf32", "tf32")
    torch.backends.cuda.matmul.fp32_precision = "ieee"  # its own setting wins
    assert (fp32_precision("cuda.matmul"), fp32_precision("cudnn.conv")) == ("ieee", "tf32")


def test_a_per_backend_tf32_user_gets_tf32_peaks_and_timing_facts() -> None:
    # the legacy getter raised for this user: the roofline's dtype, and every CUDA timing's
    # environment facts (which read it), failed with "mix of the legacy and new APIs"
    torch.backends.cuda.matmul.fp32_precision = "tf32"
    assert _read(lambda: torch.backends.cuda.matmul.allow_tf32) == "raises"
    assert compute_dtype(["float32"], 10, device_peaks("H100 SXM")) == "tf32"
    if torch.cuda.is_available():
        facts = capture_environment(torch.device("cuda"))
        assert facts["matmul_allow_tf32"] is True


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_tf32_math_switches_cublas_and_cudnn() -> None:
    # the kernels read the per-backend settings: TF32's 10-bit mantissa errs about 1e-3
    # relative on a 512-deep dot product, IEEE fp32 about 1e-6
    generator = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(512, 512, device="cuda", generator=generator)
    b = torch.randn(512, 512, device="cuda", generator=generator)
    exact = (a.double() @ b.double())
    images = torch.randn(1, 64, 16, 16, device="cuda", generator=generator)
    kernel = torch.randn(64, 64, 3, 3, device="cuda", generator=generator)
    exact_conv = torch.nn.functional.conv2d(images.double(), kernel.double())

    def errors() -> tuple[float, float]:
        matmul = ((a @ b).double() - exact).abs().max() / exact.abs().max()
        conv = ((torch.nn.functional.conv2d(images, kernel).double() - exact_conv).abs().max()
                / exact_conv.abs().max())
        return float(matmul), float(conv)

    for user in ("defaults", "medium", "per-backend tf32"):
        USER_SETTINGS[user]()
        with tf32_math(True):
            tf32 = errors()
        with tf32_math(False):
            ieee = errors()
        assert tf32[0] > 1e-4 > 1e-5 > ieee[0] and tf32[1] > 1e-4 > 1e-5 > ieee[1], (user, tf32,
                                                                                   ieee)
        facts = capture_environment(torch.device("cuda"))  # read the legacy getters: raised
        assert facts["matmul_allow_tf32"] is (fp32_precision("cuda.matmul") == "tf32")
