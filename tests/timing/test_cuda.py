"""CUDA timing (skipped without a GPU): events, not CPU clocks around async launches."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from moduleprofiler.devices import resolve_device
from moduleprofiler.timing import benchmark, time_modules, train_step_times
from moduleprofiler.timing.clocks.stamps import make_stamps
from tests.timing.helpers import GpuSleep, gpu_event_ms, module_row

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def test_device_is_resolved_by_type():
    model = nn.Linear(2, 2).cuda()
    device = resolve_device(model)
    assert device.type == "cuda" and device.index is not None
    assert make_stamps(device).kind == "cuda-events"


def test_sleep_modules_timed_with_events():
    x = torch.zeros(1, device="cuda")
    short, long = GpuSleep(200_000), GpuSleep(2_000_000)
    gpu_event_ms(long, x)  # warm the GPU up first: a cold first reading is ~10 % off
    truth = {"0": gpu_event_ms(short, x), "1": gpu_event_ms(long, x)}
    timing = time_modules(nn.Sequential(short, long), x, num_iters=20, drop_first=5,
                          warmup_seconds=0.2, device="cuda", clock="events")
    assert timing.clock == "cuda-events"
    for path, expected in truth.items():
        measured = module_row(timing, path)["time_median_ms"]
        assert abs(measured - expected) / expected < 0.05, (path, measured, expected)
    result = benchmark(nn.Sequential(short, long), x, warmup_seconds=0.1, max_seconds=2)
    assert result.latency_ms >= 0.95 * (truth["0"] + truth["1"])


def test_training_step_on_cuda():
    model = nn.Sequential(nn.Linear(256, 256), nn.ReLU(inplace=True), nn.Linear(256, 10)).cuda()
    timing = train_step_times(model, torch.randn(64, 256, device="cuda"), num_iters=6,
                              drop_first=2, clock="events")
    assert module_row(timing, "0")["backward_time_median_ms"] > 0
    assert timing.clock == "cuda-events"
