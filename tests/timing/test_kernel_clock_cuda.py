"""The kernel clock on a real GPU (skipped without one): device time from the kernel records,
host time beside it, the regime, and the edges (a running profiler)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from moduleprofiler.timing import time_modules
from moduleprofiler.timing.clock import TimingWarning
from moduleprofiler.timing.device_trace import KernelClockUnavailable
from tests.timing.helpers import GpuSleep, gpu_event_ms

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

FAST = {"num_iters": 12, "drop_first": 2, "warmup_seconds": 0.1, "progress": False}


class Launches(nn.Module):
    """Many tiny kernels, one after another: the host cannot keep ahead of them."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(50):
            x = x + 1
        return x


def test_device_time_of_known_kernels_nested_and_reused():
    x = torch.zeros(1, device="cuda")
    short, long = GpuSleep(200_000), GpuSleep(2_000_000)
    gpu_event_ms(long, x)  # warm the GPU's clocks up
    truth = {"short": gpu_event_ms(short, x), "long": gpu_event_ms(long, x)}
    # the short spin is called twice (reused), inside a container
    model = nn.Sequential(nn.Sequential(short, long), short)
    timing = time_modules(model, x, **FAST)
    assert timing.clock == "cuda-kernels"
    columns = timing.module_columns()
    assert columns["0.1"]["device_ms"] == pytest.approx(truth["long"], rel=0.03)
    # the shared short spin: two calls per iteration, booked to the one module
    assert columns["0.0"]["device_ms"] == pytest.approx(2 * truth["short"], rel=0.05)
    # the container launches nothing itself: its self device time is 0, its device time
    # its children's (one short + one long)
    assert columns["0"]["self_device_ms"] == 0.0
    assert columns["0"]["device_ms"] == pytest.approx(truth["short"] + truth["long"], rel=0.03)
    assert columns[""]["device_ms"] == pytest.approx(2 * truth["short"] + truth["long"],
                                                     rel=0.03)
    # a long kernel takes the device far longer than the host needs to launch it
    assert columns["0.1"]["time_bound"] == "device"
    assert columns["0.1"]["device_launches"] == 1
    assert timing.to_dict()["time_bound"] == "device"
    # per call: each call of the shared module has its own device time
    calls = {(r.path, r.call_number): r.metrics for r in timing.records}
    assert calls[("0.0", 0)]["device_ms"] == pytest.approx(truth["short"], rel=0.05)
    assert calls[("0.0", 1)]["device_ms"] == pytest.approx(truth["short"], rel=0.05)


def test_tiny_kernels_are_host_bound_and_their_device_time_is_the_kernels():
    model = nn.Sequential(Launches())
    x = torch.zeros(16, device="cuda")
    timing = time_modules(model, x, **FAST)
    columns = timing.module_columns()["0"]
    assert columns["device_launches"] == 50
    assert columns["time_bound"] == "host"
    # 50 one-element adds run a few microseconds each on the device; the host takes longer to
    # launch them, and the device sits idle most of the module's span
    assert columns["device_ms"] < columns["host_ms"]
    assert columns["device_idle_share"] > 0.5
    assert timing.to_dict()["time_bound"] == "host"
    assert "host-bound" in timing.report()


def test_inside_a_running_profiler_the_clock_says_so():
    model = nn.Sequential(GpuSleep(100_000))
    x = torch.zeros(1, device="cuda")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]):
        with pytest.raises(KernelClockUnavailable, match="already running"):
            time_modules(model, x, clock="kernels", **FAST)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            timing = time_modules(model, x, **FAST)
    assert timing.clock == "cuda-events"
    assert any(issubclass(w.category, TimingWarning) for w in caught)
    assert any("kernel records" in note for note in timing.warnings)


def test_the_model_is_left_as_it_was():
    model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8)).cuda().train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    time_modules(model, torch.randn(4, 8, device="cuda"), **FAST)
    assert model.training and model[1].training
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert not model._forward_hooks and not model[0]._forward_pre_hooks


class _SpinBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cycles):  # type: ignore[override]
        ctx.cycles = cycles
        return x.clone()

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        torch.cuda._sleep(ctx.cycles)
        return grad.clone(), None


class SpinBackward(nn.Module):
    """Forward: one copy; backward: one GPU spin of ``cycles`` (and one copy)."""

    def __init__(self, cycles: int) -> None:
        super().__init__()
        self.cycles = cycles

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _SpinBackward.apply(x, self.cycles)


def test_backward_kernels_are_booked_to_the_call_that_created_their_node():
    from moduleprofiler.timing import train_step_times

    x = torch.zeros(4, device="cuda", requires_grad=True)
    truth = {"0": gpu_event_ms(GpuSleep(2_000_000), x.detach()),
             "1": gpu_event_ms(GpuSleep(500_000), x.detach())}
    model = nn.Sequential(SpinBackward(2_000_000), SpinBackward(500_000))
    timing = train_step_times(model, x, num_iters=8, drop_first=2, progress=False)
    assert timing.clock == "cuda-kernels"
    columns = timing.module_columns()
    for path, expected in truth.items():
        # the spin plus one tiny copy kernel (a few microseconds)
        assert columns[path]["backward_device_ms"] == pytest.approx(expected, rel=0.03, abs=0.01)
        assert columns[path]["backward_time_bound"] == "device"
    assert columns[""]["backward_device_ms"] == pytest.approx(sum(truth.values()), rel=0.03,
                                                              abs=0.02)


class _SleepThenSpinBackward(nn.Module):
    """Forward: a GPU sleep of ``forward_cycles``; backward: a spin of ``backward_cycles``."""

    def __init__(self, forward_cycles: int, backward_cycles: int) -> None:
        super().__init__()
        self.sleep, self.spin = GpuSleep(forward_cycles), SpinBackward(backward_cycles)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.spin(self.sleep(x))


class _Checkpointing(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = _SleepThenSpinBackward(1_000_000, 500_000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.utils.checkpoint.checkpoint(self.block, x, use_reentrant=True)


def test_a_reentrant_checkpoints_rerun_and_rebuilt_graph_are_booked_to_their_modules():
    """On CUDA the rebuilt graph runs on the device's autograd thread, whose sequence numbers
    are not the forward's: its kernels still go to the modules that made them."""
    from moduleprofiler.timing import train_step_times

    x = torch.zeros(4, device="cuda", requires_grad=True)
    forward = gpu_event_ms(GpuSleep(1_000_000), x.detach())
    backward = gpu_event_ms(GpuSleep(500_000), x.detach())
    timing = train_step_times(_Checkpointing(), x, num_iters=8, drop_first=2, progress=False)
    assert timing.clock == "cuda-kernels"
    assert [len(timing.calls(p)) for p in ("", "block", "block.sleep", "block.spin")] == [1] * 4
    columns = timing.module_columns()
    # the sleep's forward once in the forward; in the backward its rerun
    assert columns["block.sleep"]["device_ms"] == pytest.approx(forward, rel=0.03, abs=0.01)
    assert columns["block.sleep"]["backward_device_ms"] == pytest.approx(forward, rel=0.03,
                                                                         abs=0.01)
    # the spin's backward kernel, in the rebuilt graph's nested backward (plus its copies)
    assert columns["block.spin"]["backward_device_ms"] == pytest.approx(backward, rel=0.03,
                                                                        abs=0.02)
    assert columns[""]["backward_device_ms"] == pytest.approx(forward + backward, rel=0.03,
                                                              abs=0.03)


def test_a_live_training_loop_gets_device_and_host_times():
    from moduleprofiler.timing import TrainingProfiler

    model = nn.Sequential(SpinBackward(1_000_000), nn.Linear(4, 4)).cuda()
    x = torch.zeros(8, 4, device="cuda", requires_grad=True)
    truth = gpu_event_ms(GpuSleep(1_000_000), x.detach())
    with TrainingProfiler(model, start_step=1, stop_step=10) as prof:
        for _ in range(12):
            model(x).sum().backward()
            prof.step()
    timing = prof.result()
    assert timing.clock == "cuda-kernels"
    columns = timing.module_columns()
    # 9 profiled steps: 3 each with backward hooks, forward hooks, and traced
    assert timing.iterations == 3
    assert columns["0"]["backward_device_ms"] == pytest.approx(truth, rel=0.03, abs=0.01)
    assert columns["0"]["backward_host_ms"] is not None
    assert not model[0]._forward_hooks and not model._forward_pre_hooks
    text = prof.report()  # the tree of device and host times
    assert "self device" in text and "bwd device" in text and text == timing.report()


def test_the_profile_views_show_host_and_device_time():
    from moduleprofiler import ModuleProfiler

    model = nn.Sequential(GpuSleep(1_000_000), nn.Sequential(GpuSleep(200_000)))
    x = torch.zeros(1, device="cuda")
    profiler = ModuleProfiler()
    timed = profiler.profile(model, x).with_timing(time_modules(model, x, **FAST))
    frame = timed.to_df("module").set_index("module")
    for column in ("device_ms", "self_device_ms", "host_ms", "self_host_ms", "time_bound"):
        assert column in frame.columns
    assert frame.loc["1", "device_ms"] == pytest.approx(frame.loc["1.0", "device_ms"])
    text = timed.tree(columns=["self_host_ms", "host_ms", "self_device_ms", "device_ms"])
    assert "self device" in str(text) and "self host" in str(text)


_FRESH_PROCESS = """
import json, warnings, torch
from torch import nn
from moduleprofiler.timing import benchmark, time_modules
warnings.simplefilter("ignore")
torch.manual_seed(0)
model = nn.Sequential(*(nn.Linear(64, 64) for _ in range(40))).cuda()
x = torch.randn(8, 64, device="cuda")
first = time_modules(model, x, num_iters=30, drop_first=5, progress=False)
second = time_modules(model, x, num_iters=30, drop_first=5, progress=False)
latency = benchmark(model, x, num_iters=50, progress=False)
print(json.dumps({"first": first.facts.hook_free.unprofiled,
                  "second": second.facts.hook_free.unprofiled,
                  "benchmark": [w for w in latency.warnings if "kernel-record" in w]}))
"""


def test_the_hook_free_latency_is_the_unprofiled_runs_and_later_timings_say_otherwise():
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", _FRESH_PROCESS], capture_output=True,
                         text=True, check=True, cwd=root,
                         env={**os.environ, "PYTHONPATH": str(root)})
    found = json.loads(out.stdout.strip().splitlines()[-1])
    # a fresh process: the first pass times its hook-free iterations before its first
    # kernel-record session; the second pass comes after the first's sessions, and so does
    # the benchmark, which says so
    assert found["first"] is True and found["second"] is False
    assert len(found["benchmark"]) == 1
    assert found["benchmark"][0].startswith("the latency measured after ")
