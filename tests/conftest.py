"""Shared test helpers."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler, Profile


def profile_of(module: nn.Module, *inputs: Any, **kwargs: Any) -> Profile:
    """Profile ``module`` on positional ``inputs`` with a default ModuleProfiler."""
    return ModuleProfiler().profile(module, tuple(inputs), **kwargs)


def ops_of(module: nn.Module, *inputs: Any) -> int | float | None:
    """Own ops of the single call of the root module."""
    return profile_of(module, *inputs).records[0].ops


def macs_of(module: nn.Module, *inputs: Any) -> int | float | None:
    """Own macs of the single call of the root module."""
    return profile_of(module, *inputs).records[0].macs


def fcm_flops(module: nn.Module, *inputs: Any) -> int:
    """FLOPs counted by torch.utils.flop_counter.FlopCounterMode (the independent oracle)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter, torch.no_grad():
        module(*inputs)
    return int(counter.get_total_flops())


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)
