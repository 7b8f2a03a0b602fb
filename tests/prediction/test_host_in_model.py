"""The in-model factor's pieces on the CPU: the host time a pass is priced at, and the stacks'
samples (the factor itself is measured on a GPU: ``test_host_in_model_cuda.py``)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from moduleprofiler.prediction import HostCosts, host_in_model
from moduleprofiler.prediction.host_in_model import (
    MODELS_OVER_STACKS,
    in_model_factor,
    in_model_samples,
    priced_host_us,
)
from moduleprofiler.prediction.host_model import HostModel

COSTS = HostCosts("test cpu", {"view": 1.0, "unary": 4.0, "module_call": 2.0,
                               "module_call_depth": 0.5, "cpu_op": 1.0})


def test_a_pass_is_priced_as_the_prediction_prices_it() -> None:
    model = nn.Sequential(nn.ReLU())
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    # the Sequential at depth 0, 2 us; the ReLU at depth 1, 2 + 0.5 = 2.5 us; its relu, a
    # unary launch, 4 us -> 8.5 us (in_model 1: the loops' costs)
    assert priced_host_us(model, torch.randn(4), HostModel(COSTS, in_model=1.0)) == \
        pytest.approx(8.5)
    assert not model._forward_hooks and not model._forward_pre_hooks
    assert all(torch.equal(before[name], p) for name, p in model.named_parameters())


def test_in_model_samples_give_each_stack_one_factor_a_round() -> None:
    samples = in_model_samples(torch.device("cpu"), COSTS, rounds=1)
    assert set(samples) == {"mlp", "conv", "attention"}
    assert all(len(values) == 1 and values[0] > 0 for values in samples.values())


def test_the_factor_is_the_stacks_median_carried_to_real_models(monkeypatch: Any) -> None:
    measured = {"mlp": [0.9, 0.95], "conv": [1.0, 1.02], "attention": [1.1, 1.2]}
    monkeypatch.setattr(host_in_model, "in_model_samples", lambda *args, **kwargs: measured)
    # the six samples' median (1.0 + 1.02) / 2 = 1.01, times 1.376 = 1.38976 -> 1.3898
    assert MODELS_OVER_STACKS == 1.376
    assert in_model_factor(torch.device("cpu"), COSTS) == 1.3898
