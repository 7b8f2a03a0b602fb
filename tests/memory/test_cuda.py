"""On CUDA the peak comes from the caching allocator (skipped without a GPU)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from moduleprofiler.memory import measure_memory
from tests.fixtures.state import assert_unchanged, snapshot

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_allocator_peak_and_operator_prediction_agree() -> None:
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256)).cuda()
    x = torch.randn(512, 256, device="cuda")
    model(x).sum().backward()  # the first matmul allocates cuBLAS's workspace: not in the pass
    model.zero_grad(set_to_none=True)
    before = snapshot(model)
    report = measure_memory(model, x, train=True)
    assert_unchanged(model, before)
    training = report.training
    assert training is not None and training.method == "allocator"
    assert training.peak_call is not None
    # The allocator rounds every block up to 512 bytes.
    assert training.operator_peak_bytes <= training.peak_bytes
    assert training.increase_bytes == pytest.approx(
        training.operator_peak_bytes - training.operator_baseline_bytes, rel=0.05)


def test_a_cpu_model_measured_on_cuda_is_left_on_the_cpu() -> None:
    model = nn.Linear(64, 64)
    before = snapshot(model)
    report = measure_memory(model, torch.randn(8, 64), train=True, device="cuda")
    assert report.device.startswith("cuda")
    assert model.weight.device.type == "cpu"
    assert_unchanged(model, before)
