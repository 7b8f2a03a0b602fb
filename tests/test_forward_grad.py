"""A forward that takes gradients itself runs in every pass, with them on where the caller's
mode allows them (``moduleprofiler.forward_grad``)."""

from __future__ import annotations

import pytest
import torch

from moduleprofiler import Profiler, ProfilingError, TimingOptions
from moduleprofiler.forward_grad import takes_gradients, without_gradients
from tests.test_core import _ForceField

QUICK = TimingOptions(max_seconds=0.2, warmup_iters=1, warmup_seconds=0.0)


def test_the_timing_passes_run_a_forward_that_takes_gradients() -> None:
    model, x = _ForceField(), torch.randn(10, 3)
    timing = Profiler().time_modules(model, x, QUICK)
    # every kept iteration timed the whole forward, the forces' gradient included
    assert timing.samples("").size > 0 and timing.samples("net.0").size > 0
    latency = Profiler().benchmark(model, x, QUICK)
    assert latency.samples_ms.size > 0
    assert all(p.grad is None for p in model.parameters())


def test_memory_and_sweeps_run_a_forward_that_takes_gradients() -> None:
    model, x = _ForceField(), torch.randn(10, 3)
    report = Profiler().measure_memory(model, x, train=True)
    # the inference pass keeps the energy's graph alive until the forces are taken: its peak
    # holds at least the 10 x 3 float32 forces (120 bytes) besides what it started with
    assert report.inference.peak_bytes >= 10 * 3 * 4
    assert report.training.peak_bytes >= report.inference.peak_bytes
    sweep = Profiler().sweep(model, x, device="H200", batch_sizes=[10]).to_df()
    # one row per default dtype; every tensor of the pass in bf16 takes half its fp32 bytes
    peaks = dict(zip(sweep["dtype"], sweep["predicted_peak_bytes"], strict=True))
    assert set(peaks) == {"bf16", "fp32"} and peaks["fp32"] == 2 * peaks["bf16"]
    assert all(p.grad is None for p in model.parameters())


def test_under_the_callers_no_grad_the_models_own_error_stands() -> None:
    with torch.no_grad(), pytest.raises(ProfilingError, match="does not require grad"):
        Profiler().time_modules(_ForceField(), torch.randn(10, 3), QUICK)


def test_only_a_forwards_own_gradient_is_retried() -> None:
    tries: list[bool] = []

    def fails_otherwise(grad: bool) -> None:
        tries.append(grad)
        raise ProfilingError("forward of module 'x' raised ValueError: a bad input")

    with pytest.raises(ProfilingError, match="a bad input"):
        without_gradients(fails_otherwise)
    assert tries == [False]  # another error is not run again
    error = ProfilingError("forward of module '' raised RuntimeError")
    error.__cause__ = RuntimeError("element 0 of tensors does not require grad and does not "
                                   "have a grad_fn")
    assert takes_gradients(error)
