"""moduleprofiler 0.0.4's timing dicts: keys, order, drop_first, never-called modules."""

from __future__ import annotations

import math
import platform

import numpy as np
import pytest
import torch
from torch import nn

from moduleprofiler.legacy_timing import (
    LEGACY_MODULE_KEYS,
    LEGACY_TOTAL_KEYS,
    inference_time_dict,
    total_inference_time_dict,
)
from moduleprofiler.timing import get_hardware_specs
from tests.timing.helpers import Spin, no_hooks_left

HARDWARE = ("host_name", "os", "os_release", "cpu_count", "total_memory", "gpu")


class WithUnused(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.shared = Spin(60)
        self.unused = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.shared(self.shared(x))


def test_per_module_keys_order_and_drop_first():
    model = WithUnused()
    result = inference_time_dict(model, torch.zeros(3), num_iters=12, drop_first=4)
    assert list(result) == ["__root__", "shared", "unused"]  # named_modules order
    for entry in result.values():
        assert tuple(entry)[: len(LEGACY_MODULE_KEYS)] == LEGACY_MODULE_KEYS
        assert tuple(entry)[len(LEGACY_MODULE_KEYS):] == (
            "calls", "self_time_median_ms", "low_confidence", "hook_overhead_ratio")
    root, shared, unused = result["__root__"], result["shared"], result["unused"]
    assert root["type"] == "WithUnused" and len(root["inference_time_ms"]) == 8  # 12 - 4
    # shared runs twice per forward: its per-iteration time is the sum of both calls
    assert shared["calls"] == 2 and len(shared["inference_time_ms"]) == 8
    assert shared["inference_time_median_ms"] >= 0.97 * 0.12
    samples = np.asarray(shared["inference_time_ms"])
    assert shared["inference_time_std_ms"] == pytest.approx(samples.std(ddof=1))
    assert shared["inference_time_mean_ms"] == pytest.approx(samples.mean())
    assert shared["inference_time_min_ms"] == samples.min()
    assert isinstance(shared["inference_time_median_ms"], np.float64)
    # never called (0.0.4 crashed here): empty list, None statistics
    assert unused["inference_time_ms"] == [] and unused["calls"] == 0
    assert unused["inference_time_mean_ms"] is None and unused["low_confidence"] is None
    assert root["intraop_threads"] == torch.get_num_threads()
    assert no_hooks_left(model)


def test_total_keys_order_and_drop_first():
    result = total_inference_time_dict(Spin(100), torch.zeros(2), num_iters=15, drop_first=5)
    assert list(result) == ["__root__"]
    entry = result["__root__"]
    assert tuple(entry)[: len(LEGACY_TOTAL_KEYS)] == LEGACY_TOTAL_KEYS
    assert len(entry["inference_time_ms"]) == 10
    assert entry["inference_time_min_ms"] <= entry["inference_time_median_ms"] \
        <= entry["inference_time_max_ms"]
    assert entry["inference_time_median_ms"] >= 0.097


def test_drop_first_is_validated():
    for bad in (-1, 10, 11):
        with pytest.raises(ValueError, match="drop_first"):
            inference_time_dict(nn.Identity(), torch.zeros(1), num_iters=10, drop_first=bad)
        with pytest.raises(ValueError, match="drop_first"):
            total_inference_time_dict(nn.Identity(), torch.zeros(1), num_iters=10,
                                      drop_first=bad)


def test_one_kept_iteration_has_nan_std_like_pandas():
    result = total_inference_time_dict(nn.Identity(), torch.zeros(1), num_iters=2,
                                       drop_first=1)
    assert math.isnan(result["__root__"]["inference_time_std_ms"])


def test_hardware_specs():
    specs = get_hardware_specs()
    assert tuple(specs) == HARDWARE
    assert specs["os"] == platform.system()
    assert specs["total_memory"].endswith(" MB") and int(specs["total_memory"][:-3]) > 0
    if not torch.cuda.is_available():
        assert specs["gpu"] == "unavailable"
    else:
        assert isinstance(specs["gpu"], list) and specs["gpu"]
