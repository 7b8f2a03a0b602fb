"""MFU and HFU arithmetic, and the 6N + 12LHQT estimate."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch.utils.flop_counter import FlopCounterMode

from moduleprofiler import ModuleProfiler
from moduleprofiler.efficiency import (
    DevicePeaks,
    TrafficListener,
    transformer_flops_per_token,
    utilization,
)

PEAKS = DevicePeaks("toy", {"fp32": 1e-6}, 1.0)  # 1e6 FLOP/s


def test_mfu_of_a_training_step_by_hand():
    profile = ModuleProfiler().profile(nn.Linear(4, 8, bias=False), torch.randn(3, 4),
                                       backward=True)
    # forward 3 * 4 * 8 = 96 MACs, backward (weight gradient only) 96 MACs: 2 * 192 = 384 FLOPs
    found = utilization(profile, 1.0, PEAKS)
    assert found.model_flops == 384 and found.hardware_flops == 384
    assert found.mfu == pytest.approx(384 / (1e-3 * 1e6))
    assert found.dtype == "fp32" and found.complete
    forward = ModuleProfiler().profile(nn.Linear(4, 8, bias=False), torch.randn(3, 4))
    assert utilization(forward, 1.0, PEAKS).model_flops == 192


def test_hfu_counts_recomputation():
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(4, 4, bias=False)
            self.b = nn.Linear(4, 4, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return checkpoint(lambda h: self.b(torch.relu(self.a(h))), x, use_reentrant=False)

    profile = ModuleProfiler().profile(Model(), torch.randn(2, 4), backward=True,
                                       listeners=[TrafficListener()])
    found = utilization(profile, 1.0, PEAKS)
    # the recomputation re-runs a's matmul: 2 * 4 * 4 = 32 MACs = 64 FLOPs
    assert found.recompute_flops == 64
    assert found.hardware_flops - found.model_flops == 64
    assert found.hfu > found.mfu


def test_recomputed_work_without_a_formula_makes_the_utilization_incomplete():
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(4, 4, bias=False)
            self.b = nn.Linear(4, 4, bias=False)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return checkpoint(lambda h: self.b(torch.relu(self.a(h))), x, use_reentrant=False)

    def mm(args: tuple, kwargs: dict, out: torch.Tensor) -> tuple[int, int]:
        macs = args[0].shape[0] * args[0].shape[1] * args[1].shape[1]
        return 2 * macs, macs

    # the reruns counted with a table that prices aten.mm only: a's matmul is rerun (known),
    # and so is the relu between a and b (no formula there); the forward and the backward
    # are counted with the registered formulas, complete. complete said True, as if the
    # HFU's recomputed FLOPs were exact
    traffic = TrafficListener({torch.ops.aten.mm: mm})
    x = torch.randn(2, 4)
    profile = ModuleProfiler().profile(Model(), x, backward=True, listeners=[traffic])
    assert profile.complete and traffic.unsupported_recompute == {"aten.relu": 1}
    found = utilization(profile, 1.0, PEAKS)
    assert not found.complete
    # the known part is kept, a lower bound: a's rerun 2 x 4 x 4 = 32 MACs, 64 FLOPs, as
    # FlopCounterMode counts a's forward
    with FlopCounterMode(display=False) as oracle:
        Model().a(x)
    assert found.recompute_flops == oracle.get_total_flops() == 64
    # the relu's rerun is booked to b, whose input it rebuilds: unknown there, never 0
    assert {r.path: r.metrics["self_recompute_macs"] for r in profile.records} == {
        "": 0, "a": 32, "b": None}


def test_bad_arguments():
    profile = ModuleProfiler().profile(nn.Linear(2, 2), torch.randn(1, 2))
    with pytest.raises(ValueError, match="step_ms"):
        utilization(profile, 0, PEAKS)
    # a string, a bool or an endless step; a table name for the peaks (they raised a bare
    # comparison TypeError, gave an MFU of a 1 ms step, an MFU of 0, an AttributeError)
    with pytest.raises(TypeError, match="step_ms must be a time in milliseconds, got str"):
        utilization(profile, "5", PEAKS)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="step_ms"):
        utilization(profile, True, PEAKS)
    with pytest.raises(ValueError, match="step_ms"):
        utilization(profile, float("inf"), PEAKS)
    with pytest.raises(TypeError, match=r"peaks must be a DevicePeaks \(device_peaks"):
        utilization(profile, 5.0, "H100 SXM")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no peak"):
        utilization(profile, 1.0, PEAKS, dtype="bf16")
    # a ReLU has no multiply-accumulates to take the dtype from (it read "no peak for dtype
    # None", as if the device lacked one)
    relu = ModuleProfiler().profile(nn.ReLU(), torch.randn(1, 2))
    with pytest.raises(ValueError, match="no call of the profile has multiply-accumulates"):
        utilization(relu, 1.0, PEAKS)
    assert utilization(relu, 1.0, PEAKS, dtype="fp32").model_flops == 0


def test_transformer_estimate():
    # 6 * 100 + 12 * 2 layers * 3 heads * 4 head size * 5 tokens = 600 + 1440
    assert transformer_flops_per_token(100, 2, 3, 4, 5) == 2040


def test_peak_tflops_is_the_peak_used():
    profile = ModuleProfiler().profile(nn.Linear(4, 8, bias=False), torch.randn(3, 4))
    # the toy device's fp32 peak: 1e-6 TFLOP/s = 1e6 FLOP/s
    assert utilization(profile, 1.0, PEAKS).peak_tflops == pytest.approx(1e-6)


def test_model_tflops_is_the_model_flops_rate():
    profile = ModuleProfiler().profile(nn.Linear(4, 8, bias=False), torch.randn(3, 4),
                                       backward=True)
    found = utilization(profile, 2.0, PEAKS)
    # 384 FLOPs (as above) in 2 ms: 384 / 2e-3 = 192,000 FLOP/s = 1.92e-7 TFLOP/s, which is
    # MFU (0.192) times the 1e-6 TFLOP/s peak
    assert found.model_tflops == pytest.approx(1.92e-7)
    assert found.model_tflops == pytest.approx(found.mfu * found.peak_tflops)


def test_a_pass_that_counted_nothing_has_no_mfu():
    # a memory pass's count totals are unknown: its MFU was 0.0 (model_flops 0.0), as if the
    # device had done nothing in the step
    model, x = nn.Linear(4, 8, bias=False), torch.randn(3, 4)
    memory = ModuleProfiler().measure_memory(model, x)
    with pytest.raises(ValueError, match="profile counts no ops"):
        utilization(memory, 1.0, PEAKS, dtype="fp32")
    # merged into the counts, the same pass has them: 3 * 4 * 8 = 96 MACs, 192 FLOPs
    counts = ModuleProfiler().profile(model, x)
    assert utilization(counts.merge(memory), 1.0, PEAKS).model_flops == 192


class _OnlyUnknownWork(nn.Module):
    """A model whose one operator has no formula (a matrix exponential)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.matrix_exp(x)


def test_a_profile_that_knows_no_flops_has_no_mfu():
    # every FLOP unknown: the known total is 0, a lower bound that says nothing; its MFU was
    # 0.0, as if the device had done nothing in the step
    profile = ModuleProfiler().profile(_OnlyUnknownWork(), torch.randn(3, 3))
    with pytest.raises(ValueError, match=r"no FLOPs of the profile are known.*matrix_exp"):
        utilization(profile, 1.0, PEAKS, dtype="fp32")
    # a model that really does no multiply-accumulates (a ReLU, complete) has an MFU of 0
    relu = ModuleProfiler().profile(nn.ReLU(), torch.randn(3, 3))
    found = utilization(relu, 1.0, PEAKS, dtype="fp32")
    assert (found.mfu, found.complete) == (0.0, True)
