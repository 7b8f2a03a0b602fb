"""Shared test helpers."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from moduleprofiler import ModuleProfiler, Profile


def profile_of(module: nn.Module, *inputs: Any, **kwargs: Any) -> Profile:
    """Profile ``module`` on positional ``inputs`` with a default ModuleProfiler."""
    return ModuleProfiler().profile(module, tuple(inputs), **kwargs)


def ops_of(module: nn.Module, *inputs: Any) -> int | float | None:
    """Own ops of the single call of the root module."""
    return profile_of(module, *inputs).records[0].self_ops


def macs_of(module: nn.Module, *inputs: Any) -> int | float | None:
    """Own macs of the single call of the root module."""
    return profile_of(module, *inputs).records[0].self_macs


def fcm_flops(module: nn.Module, *inputs: Any) -> int:
    """FLOPs counted by torch.utils.flop_counter.FlopCounterMode (the independent oracle)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter, torch.no_grad():
        module(*inputs)
    return int(counter.get_total_flops())


def decomposed_flops(call: Callable[[], Any]) -> int:
    """FlopCounterMode FLOPs of ``call()`` on the decomposed path.

    With no_grad (as in ``fcm_flops``) CPU PyTorch runs fused kernels FlopCounterMode cannot
    see: ``_native_multi_head_attention``, ``_transformer_encoder_layer_fwd``, the flash SDPA
    kernel and oneDNN's ``mkldnn_rnn_layer`` all count 0. Grad mode disables the MHA/encoder
    fast paths, the math SDPA backend turns attention into ``bmm``, and disabling oneDNN turns
    the LSTM/GRU into ``addmm``, which FlopCounterMode counts.
    """
    with warnings.catch_warnings():
        # Toggling oneDNN warns about TF32 on Intel GPUs, which this build does not have.
        warnings.filterwarnings("ignore", message="TF32 acceleration on top of oneDNN")
        with (
            torch.enable_grad(),
            sdpa_kernel(SDPBackend.MATH),
            torch.backends.mkldnn.flags(enabled=False),
            FlopCounterMode(display=False) as counter,
        ):
            call()
    return int(counter.get_total_flops())


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _terminal_width(monkeypatch: pytest.MonkeyPatch) -> None:
    """Text tables fit the terminal's width: 80 columns in every run, whatever terminal
    runs the tests."""
    monkeypatch.setenv("COLUMNS", "80")
