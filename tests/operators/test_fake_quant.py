"""Fake quantization (quantization-aware training): a quantize-dequantize round trip per
element, its gradient mask, and the fused observer's minimum, maximum and moving averages."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler
from tests.operators.helpers import count, on_meta

X = torch.randn(3, 4)  # 12 elements, 3 channels along dim 0
MODES = ["no_grad", "inference_mode"]


def _fused(x: torch.Tensor, observer: int = 1, fake_quant: int = 1,
           per_row: bool = False) -> torch.Tensor:
    sets = x.shape[0] if per_row else 1
    running_min = torch.full((sets,), float("inf"), device=x.device)
    running_max = torch.full((sets,), float("-inf"), device=x.device)
    return torch.fused_moving_avg_obs_fake_quant(
        x, torch.tensor([observer], device=x.device), torch.tensor([fake_quant], device=x.device),
        running_min, running_max, torch.ones(sets, device=x.device),
        torch.zeros(sets, dtype=torch.int32, device=x.device), 0.01, -128, 127, 0, per_row,
        per_row)


@pytest.mark.parametrize("mode", MODES)
def test_a_fake_quantized_tensor_costs_its_round_trips_and_mask(mode: str) -> None:
    # 12 elements x (7 for the round trip + 3 for the gradient mask) = 120
    assert count(torch.fake_quantize_per_tensor_affine, X, 0.1, 0, -128, 127,
                 mode=mode) == (120, 0)
    scale, zero = torch.tensor(0.1), torch.tensor(0)
    assert count(torch.fake_quantize_per_tensor_affine, X, scale, zero, -128, 127,
                 mode=mode) == (120, 0)
    # the learnable fake quantizer returns no mask: 12 x 7 = 84
    assert count(torch._fake_quantize_learnable_per_tensor_affine, X, torch.tensor([0.1]),
                 torch.tensor([0.0]), -128, 127, mode=mode) == (84, 0)


@pytest.mark.parametrize("mode", MODES)
def test_the_fused_observer_counts_min_max_averages_and_fake_quantization(mode: str) -> None:
    # min and max of 12 values: 2 x 11 = 22; two moving averages of 3: 6; 12 x 10 = 120: 148
    assert count(_fused, X, mode=mode) == (148, 0)
    # per row (3 channels): 2 x (12 - 3) = 18, 3 x 6 = 18 averages, 120: 156
    assert count(_fused, X, per_row=True, mode=mode) == (156, 0)
    # both switches off: the input passes through
    assert count(_fused, X, 0, 0, mode=mode) == (0, 0)
    # observer off, fake quantization on: 120
    assert count(_fused, X, 0, 1, mode=mode) == (120, 0)


def test_the_fused_observer_on_meta_takes_its_switches_as_on() -> None:
    assert count(_fused, on_meta(X), 0, 0) == (148, 0)


def test_a_qat_model_is_counted_completely() -> None:
    quant = torch.ao.quantization
    model = nn.Sequential(quant.QuantStub(), nn.Linear(4, 3), quant.DeQuantStub()).train()
    model.qconfig = quant.get_default_qat_qconfig("x86")
    prepared = quant.prepare_qat(copy.deepcopy(model))
    profile = ModuleProfiler().profile(prepared, torch.randn(2, 4), eval=False)
    # before: every fake quantizer was unknown (aten._fused_moving_avg_obs_fq_helper, 3 calls)
    assert profile.complete and profile.unsupported_ops == {}
    # input (2 x 4 = 8 values): 2 x 7 + 6 + 80 = 100; weight, per channel (3 rows of 4):
    # 2 x (12 - 3) + 18 + 120 = 156; output (2 x 3 = 6): 2 x 5 + 6 + 60 = 76; the Linear:
    # 6 outputs x (2 x 4) = 48
    assert profile.total_ops == 100 + 156 + 76 + 48
