"""Roofline time, achieved rates, labels and the above-peak flag, hand-computed."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler
from moduleprofiler.efficiency import (
    DevicePeaks,
    EfficiencyWarning,
    TrafficListener,
    compute_dtype,
    roofline,
    with_efficiency,
)

# 100 TFLOP/s in fp32, 1000 GB/s, 5 us per launch
PEAKS = DevicePeaks("toy", {"fp32": 100.0, "tf32": 200.0, "bf16": 400.0}, 1000.0,
                    launch_us=5.0)


def test_compute_bound():
    # 1e9 FLOPs / 1e14 = 10 us; 1e6 bytes / 1e12 = 1 us; one launch 5 us: compute roof 10 us
    found = roofline(1e9, 1e6, 1, 0.02, 1e14, PEAKS)
    assert found["self_roofline_ms"] == pytest.approx(0.01)
    assert found["intensity"] == pytest.approx(1000)
    assert found["bound"] == "compute"
    assert found["achieved_tflops"] == pytest.approx(50)  # 1e9 FLOPs in 20 us
    assert found["compute_fraction"] == pytest.approx(0.5)
    assert found["bandwidth_fraction"] == pytest.approx(0.05)  # 1e6 B / 20 us = 50 GB/s
    assert found["above_peak"] is False


def test_memory_bound_and_overhead_bound():
    # 1e6 FLOPs: 0.01 us; 1e8 bytes: 100 us
    assert roofline(1e6, 1e8, 1, 0.2, 1e14, PEAKS)["bound"] == "memory"
    # 30 launches x 5 us = 150 us > the 100 us roof
    assert roofline(1e6, 1e8, 30, 0.2, 1e14, PEAKS)["bound"] == "overhead"
    # the roof (100 us) explains under a quarter of the measured 1 ms
    assert roofline(1e6, 1e8, 1, 1.0, 1e14, PEAKS)["bound"] == "overhead"
    # no work at all, yet time passed: overhead; nothing and no time: no label
    assert roofline(0, 0, 0, 0.01, 1e14, PEAKS)["bound"] == "overhead"
    assert roofline(0, 0, 0, None, 1e14, PEAKS)["bound"] is None


def test_above_peak_is_flagged():
    # 1e9 FLOPs in 5 us = 200 TFLOP/s on a 100 TFLOP/s device
    found = roofline(1e9, 1e6, 1, 0.005, 1e14, PEAKS)
    assert found["compute_fraction"] == pytest.approx(2.0)
    assert found["above_peak"] is True


def test_compute_dtype():
    assert compute_dtype(("bfloat16",), 10, PEAKS) == "bf16"
    assert compute_dtype(("float32",), 10, PEAKS, tf32=True) == "tf32"
    assert compute_dtype(("float32",), 10, PEAKS, tf32=False) == "fp32"
    assert compute_dtype(("float32",), 0, PEAKS, tf32=True) == "fp32"  # no matmul: CUDA cores
    assert compute_dtype(("int64", "float16"), 10, PEAKS) == "fp16"
    assert compute_dtype(("int64",), 10, PEAKS) is None


def _timed(profile, milliseconds: dict[str, float]):
    """The profile with a known self time per call (what Profile.with_timing would attach)."""
    records = tuple(dataclasses.replace(r, metrics={**r.metrics,
                                                    "self_forward_ms": milliseconds[r.path]})
                    for r in profile.records)
    return dataclasses.replace(profile, records=records)


def test_with_efficiency_per_call_and_module_and_the_warning():
    model = nn.Sequential(nn.Linear(4, 8, bias=False), nn.ReLU())
    profile = ModuleProfiler().profile(model, torch.randn(3, 4), listeners=[TrafficListener()])
    # Linear: ops 3 * 8 * (2 * 4 - 1) = 168, bytes 4 * (12 + 32 + 24) = 272
    timed = _timed(profile, {"": 0.001, "0": 1e-9, "1": 1.0})
    with pytest.warns(EfficiencyWarning, match=r"0 \(forward: .* of peak FLOP/s"):
        result = with_efficiency(timed, PEAKS, tf32=False)
    linear = result.calls("0")[0].metrics
    assert linear["intensity"] == pytest.approx(168 / 272)
    # 168 FLOPs in 1e-12 s: 168 TFLOP/s, above the 100 TFLOP/s fp32 peak
    assert linear["achieved_tflops"] == pytest.approx(168)
    assert linear["above_peak"] is True
    relu = result.calls("1")[0].metrics
    # relu: 24 comparisons, 96 + 96 bytes in 1 ms: overhead-bound, far below the peaks
    assert relu["bound"] == "overhead" and relu["above_peak"] is False
    modules = result.to_df("module").set_index("module")
    assert modules.loc["0", "above_peak"]
    assert modules.loc["1", "achieved_gbs"] == pytest.approx(192 / 1e-3 / 1e9)


class _Twice(nn.Module):
    """One Linear called twice, then a ReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4, bias=False)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.lin(self.lin(x)))


def test_a_subtrees_roofline_is_the_sum_of_its_calls_own_bounds():
    profile = ModuleProfiler().profile(_Twice(), torch.randn(3, 4), listeners=[TrafficListener()])
    result = with_efficiency(profile, PEAKS, tf32=False)
    # each lin call: mm reads 4 * (12 + 16) = 112 bytes and writes 4 * 12 = 48: 160 bytes at
    # 1e12 B/s = 1.6e-10 s (its 3 * 4 * 7 = 84 FLOPs take 8.4e-13 s at 1e14): 1.6e-7 ms.
    # relu reads and writes 48 bytes: 96 bytes, 0.96e-7 ms
    modules = result.to_df("module").set_index("module")
    assert modules.loc["lin", "self_roofline_ms"] == pytest.approx(2 * 1.6e-7)
    assert modules.loc["act", "self_roofline_ms"] == pytest.approx(0.96e-7)
    assert modules.loc["__root__", "self_roofline_ms"] == 0  # no work of its own
    # the root's bound: every call at its own roof, 2 * 1.6e-7 + 0.96e-7
    assert modules.loc["__root__", "roofline_ms"] == pytest.approx(4.16e-7)
    assert modules["self_roofline_ms"].sum() == pytest.approx(modules.loc["__root__",
                                                                         "roofline_ms"])


def test_with_efficiency_needs_the_traffic_listener():
    profile = ModuleProfiler().profile(nn.Linear(2, 2), torch.randn(1, 2))
    with pytest.raises(ValueError, match="TrafficListener"):
        with_efficiency(profile, PEAKS)
    with pytest.raises(ValueError, match="dtype"):
        with_efficiency(profile, PEAKS, dtype="fp4")


def test_unknown_flops_give_no_roofline_and_no_label():
    # 1e8 bytes in 0.2 ms: 500 GB/s, half the 1000 GB/s; the FLOPs unknown, so the compute
    # roof is too: neither "memory" (the memory roof alone) nor a roofline time
    found = roofline(None, 1e8, 1, 0.2, 1e14, PEAKS)
    assert found["bound"] is None and found["self_roofline_ms"] is None
    assert found["achieved_gbs"] == pytest.approx(500)
    assert found["bandwidth_fraction"] == pytest.approx(0.5)
    assert found["achieved_tflops"] is None and found["above_peak"] is None
    # 1e9 FLOPs in a dtype the device has no peak for: the same
    found = roofline(1e9, 1e8, 1, 0.2, None, PEAKS)
    assert found["bound"] is None and found["self_roofline_ms"] is None
    assert found["achieved_tflops"] == pytest.approx(5)  # 1e9 FLOPs in 0.2 ms
    # bytes above the bandwidth are flagged all the same: 1e9 bytes in 0.2 ms, 5000 GB/s
    assert roofline(None, 1e9, 1, 0.2, 1e14, PEAKS)["above_peak"] is True


class _WithoutFormula(nn.Module):
    """A Linear, then an operator without a formula (a Chebyshev
    polynomial) and an add: the root's own ops are
    only the add's, a lower bound."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.special.chebyshev_polynomial_t(self.lin(x), 3) + 1


def test_a_lower_bound_of_flops_gives_no_intensity_or_label():
    profile = ModuleProfiler().profile(_WithoutFormula(), torch.randn(3, 4),
                                       listeners=[TrafficListener()])
    root = profile.calls("")[0]
    assert root.ops_source == "mixed" and root.self_ops == 12  # the add's 3 x 4
    result = with_efficiency(_timed(profile, {"": 1.0, "lin": 1.0}), PEAKS, tf32=False)
    own = result.calls("")[0].metrics
    # the polynomial reads and writes 48 bytes, the add 48 and 48: 192 bytes in 1 ms
    assert own["achieved_gbs"] == pytest.approx(192 / 1e-3 / 1e9)
    assert own["intensity"] is None and own["achieved_tflops"] is None
    assert own["bound"] is None and own["self_roofline_ms"] is None
    modules = result.to_df("module").set_index("module")
    assert modules.loc["__root__", "bound"] is None
    # 3 x 4 x (2 x 4 - 1) = 84 FLOPs and 4 x (12 + 16 + 12) = 160 bytes in 1 ms
    assert modules.loc["lin", "bound"] == "overhead"
    assert modules.loc["lin", "self_roofline_ms"] == pytest.approx(1.6e-7)


class _BackwardWithoutFormula(torch.autograd.Function):
    """``2 x`` whose backward multiplies by a Chebyshev polynomial, an operator without a
    formula."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.special.chebyshev_polynomial_t(x, 3)


class _PolynomialGradient(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _BackwardWithoutFormula.apply(x)


def test_a_lower_bound_of_backward_flops_gives_no_backward_rate_or_label():
    model = nn.Sequential(nn.Linear(4, 4, bias=False), _PolynomialGradient())
    profile = ModuleProfiler().profile(model, torch.randn(3, 4), backward=True,
                                       listeners=[TrafficListener()])
    # the second call's backward: the mul's 3 x 4 = 12 ops are known, the polynomial's are not
    assert profile.calls("1")[0].self_backward_ops == 12
    records = tuple(dataclasses.replace(r, metrics={**r.metrics, "self_forward_ms": 1.0,
                                                    "self_backward_ms": 1.0})
                    for r in profile.records)
    result = with_efficiency(dataclasses.replace(profile, records=records), PEAKS, tf32=False)
    unknown = result.calls("1")[0].metrics
    assert unknown["backward_achieved_tflops"] is None and unknown["backward_intensity"] is None
    assert unknown["backward_bound"] is None and unknown["self_backward_roofline_ms"] is None
    # the linear layer's backward is whole: grad_weight only (its input needs none),
    # 4 x 4 dot products of length 3: 16 x (2 x 3 - 1) = 80 FLOPs in 1 ms, 8e-8 TFLOP/s
    known = result.calls("0")[0].metrics
    assert known["backward_achieved_tflops"] == pytest.approx(80 / 1e-3 / 1e12)
