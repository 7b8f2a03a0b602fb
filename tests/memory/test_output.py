"""The training pass's assumption about the model's output (``keep_output``): its prediction
matches the CPU allocator's peak of the loop it stands for, with the output kept through the
backward and with it freed before."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from moduleprofiler import ModuleProfiler
from moduleprofiler.memory import measure_memory


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32, bias=False), nn.ReLU(), nn.Linear(32, 8, bias=False))


def _allocator_peak(model: nn.Module, x: torch.Tensor, keep: bool) -> int:
    """The CPU allocator's peak above what was allocated before one plain training step: every
    allocation and free of the step in order (``torch.profiler``'s memory events)."""
    model.zero_grad(set_to_none=True)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        if keep:
            out = model(x)
            loss = out.sum()
            loss.backward()
            del loss, out
        else:
            loss = model(x).sum()
            loss.backward()
            del loss
    results = getattr(prof.profiler, "kineto_results", None)
    if results is None:
        pytest.skip("this torch.profiler keeps no memory events")
    events = sorted((e for e in results.events() if e.name() == "[memory]"),
                    key=lambda e: e.start_ns())
    live = peak = 0
    for event in events:
        live += event.nbytes()
        peak = max(peak, live)
    model.zero_grad(set_to_none=True)
    return peak


def test_the_output_kept_through_the_backward_counts_towards_the_peak() -> None:
    model, x = _model(), torch.randn(4, 16)
    kept = measure_memory(model, x, train=True).training
    freed = measure_memory(model, x, train=True, keep_output=False).training
    assert kept is not None and freed is not None
    assert (kept.output_kept, freed.output_kept) == (True, False)
    # Freed (test_peak's hand sum): the peak is in the first Linear's backward, live above the
    # baseline (W1 2048 + W2 1024 + x 256 = 3328): the loss 4, its seed gradient 4, W2's
    # gradient 8*32*4 = 1024, the first Linear's output gradient 4*32*4 = 512 and W1's
    # gradient 32*16*4 = 2048: 3592.
    assert freed.increase_bytes == 4 + 4 + 1024 + 512 + 2048 == 3592
    # Kept: the model's output, 4 x 8 float32 = 128 bytes, is live there too (nothing in the
    # backward of sum() saves it, so only the loop's own reference keeps it).
    assert kept.increase_bytes == 3592 + 4 * 8 * 4 == 3720
    # The CPU allocator agrees, byte for byte, with each loop.
    assert _allocator_peak(model, x, keep=True) == kept.increase_bytes
    assert _allocator_peak(model, x, keep=False) == freed.increase_bytes


def test_the_report_says_which_loop_it_predicts() -> None:
    report = measure_memory(_model(), torch.randn(4, 16), train=True)
    assert "output kept through the backward" in str(report)
    assert report.totals()["training_output_kept"] is True
    assert report.inference.output_kept is None  # no backward: the question does not arise
    freed = measure_memory(_model(), torch.randn(4, 16), train=True, keep_output=False)
    assert "output freed before the backward" in str(freed)
    with pytest.raises(TypeError, match="keep_output must be True or False"):
        measure_memory(_model(), torch.randn(4, 16), train=True, keep_output="no")  # type: ignore[arg-type]


def test_the_profiler_passes_the_choice_on() -> None:
    model, x = _model(), torch.randn(4, 16)
    freed = ModuleProfiler().measure_memory(model, x, train=True, keep_output=False).training
    kept = ModuleProfiler().measure_memory(model, x, train=True).training
    assert freed is not None and kept is not None
    assert kept.peak_bytes - freed.peak_bytes == 4 * 8 * 4  # the 4 x 8 float32 output
