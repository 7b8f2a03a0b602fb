"""A model split over two GPUs is measured where its parts are (skipped without two GPUs)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from moduleprofiler.memory import measure_memory
from tests.fixtures.state import assert_unchanged, snapshot

pytestmark = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")


class Split(nn.Module):
    """``first`` on cuda:0, ``second`` on cuda:1: the activation is copied between them."""

    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(4, 8).to("cuda:0")
        self.second = nn.Linear(8, 2).to("cuda:1")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x).to("cuda:1"))


def test_a_split_model_is_measured_in_place_across_its_devices() -> None:
    model = Split()
    x = torch.randn(3, 4, device="cuda:0")
    before = snapshot(model)
    report = measure_memory(model, x)
    assert_unchanged(model, before)
    assert model.first.weight.device == torch.device("cuda:0")
    assert model.second.weight.device == torch.device("cuda:1")
    assert report.device == "cuda:0, cuda:1"
    inference = report.inference
    assert inference.method == "operator"
    # Live bytes above the baseline, fp32: first(x) is 3*8*4 = 96 bytes on cuda:0; its copy
    # on cuda:1 is another 96 while the original is still referenced: 192; then the original
    # is freed and second's output (3*2*4 = 24) joins the copy: 120. The peak is 192.
    assert inference.increase_bytes == 192
    assert inference.peak_call is not None and inference.peak_call.path == ""


def test_a_split_model_trains_in_place() -> None:
    model = Split()
    x = torch.randn(3, 4, device="cuda:0")
    before = snapshot(model)
    report = measure_memory(model, x, train=True)
    assert_unchanged(model, before)
    training = report.training
    assert training is not None and training.method == "operator"
    # gradients of every parameter, fp32: (4*8 + 8) + (8*2 + 2) = 58 values, 232 bytes
    assert training.grad_bytes == 232
