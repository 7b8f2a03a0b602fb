"""The host's in-model factor and module calls by depth measured on a real GPU (skipped without
one)."""

from __future__ import annotations

import pytest
import torch

from moduleprofiler.prediction.calibrate import measure_host
from moduleprofiler.prediction.host_in_model import in_model_samples

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_the_in_model_factor_of_the_synthetic_stacks_is_near_one() -> None:
    cuda = torch.device("cuda")
    costs = measure_host(cuda, calls=100, rounds=5)
    assert costs.us["module_call_depth"] >= 0.0
    samples = in_model_samples(cuda, costs, rounds=1)
    assert set(samples) == {"mlp", "conv", "attention"}
    # host-bound forwards of tiny tensors: within a factor two of the loops' prices (0.87 to
    # 1.08 by stack and round on an H200's host)
    assert all(0.5 < values[0] < 2.0 for values in samples.values())
