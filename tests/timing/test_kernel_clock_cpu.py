"""The kernel clock end to end on the CPU: the passes run it through the clock protocol like any
clock, with its profiler session replaced by one that reads the real host ranges and makes up
one 1 µs "kernel" launched at the start of each module call's range and of each autograd
node's evaluation. Ranges, booking, readings and the result's columns are the real ones."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch
from torch import nn

from moduleprofiler.timing import time_modules, train_step_times
from moduleprofiler.timing.booking import Activity, Launch
from moduleprofiler.timing.clocks.kernels import KernelClock
from moduleprofiler.timing.device_trace import TraceRecords, records_of

KERNEL_NS = 1000

pytestmark = pytest.mark.filterwarnings("ignore::moduleprofiler.timing.clock.TimingWarning")


@contextmanager
def one_kernel_per_range(device: torch.device) -> Iterator[TraceRecords]:
    """A CPU profiler session whose records get one made-up kernel per forward call range
    (``<iteration>:f<call>``) and per autograd node evaluation (``seq:<n>``)."""
    records = TraceRecords()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as session:
        yield records
    real = records_of(session.profiler.kineto_results.events())  # type: ignore[union-attr]
    records.ranges = real.ranges
    for n, host_range in enumerate(real.ranges):
        if ":f" in host_range.label or host_range.label.startswith("seq:"):
            records.launches.append(Launch(n, host_range.thread, host_range.start + 1))
            records.activities.append(Activity(n, host_range.start + 1,
                                               host_range.start + 1 + KERNEL_NS))


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))


def test_forward_device_times_are_the_kernels_each_call_launched() -> None:
    clock = KernelClock(torch.device("cpu"), trace=one_kernel_per_range)
    timing = time_modules(_model(), torch.randn(4, 8), clock=clock, num_iters=6, drop_first=1,
                          progress=False)
    assert timing.clock == "cuda-kernels"
    modules = timing.to_df("module").set_index("module")
    # each call launched one 1 us kernel: its own device time; the root's holds its three
    # children's too: 4 us, 4 launches
    for path in ("0", "1", "2"):
        assert modules.loc[path, "device_ms"] == KERNEL_NS / 1e6
    assert modules.loc["__root__", "self_device_ms"] == KERNEL_NS / 1e6
    assert modules.loc["__root__", "device_ms"] == 4 * KERNEL_NS / 1e6
    assert modules.loc["__root__", "device_launches"] == 4
    # the host's times beside them, from the CPU's clock: positive, and larger than the
    # made-up microsecond of the model's whole call
    assert modules.loc["__root__", "host_ms"] > 0


def test_backward_device_times_go_to_the_call_that_created_each_node() -> None:
    clock = KernelClock(torch.device("cpu"), backward=True, trace=one_kernel_per_range)
    timing = train_step_times(_model(), torch.randn(4, 8), clock=clock, num_iters=6,
                              drop_first=1, progress=False)
    assert timing.clock == "cuda-kernels"
    modules = timing.to_df("module").set_index("module")
    # one kernel per node a call created: a Linear makes two (its weight's transpose and the
    # addmm), the ReLU one; the root made none of its own: 2 + 1 + 2 = 5 us inclusive
    assert modules.loc["0", "backward_device_ms"] == 2 * KERNEL_NS / 1e6
    assert modules.loc["1", "backward_device_ms"] == KERNEL_NS / 1e6
    assert modules.loc["2", "backward_device_ms"] == 2 * KERNEL_NS / 1e6
    assert modules.loc["__root__", "backward_device_ms"] == 5 * KERNEL_NS / 1e6
    assert modules.loc["__root__", "device_ms"] == 4 * KERNEL_NS / 1e6


def test_the_hooked_and_traced_kinds_share_the_passs_one_runner() -> None:
    clock = KernelClock(torch.device("cpu"), trace=one_kernel_per_range)
    time_modules(_model(), torch.randn(4, 8), clock=clock, num_iters=4, drop_first=1,
                 progress=False)
    # the runner the kernel ranges ran on also holds the hooked iterations' stamping
    # listener: one runner, each kind of iteration telling its own listeners (a kernel
    # clock on a runner of its own held its ranges alone)
    runner = clock.ranges.runner
    assert runner is not None
    assert [type(listener).__name__ for listener in runner.listeners] == [
        "KernelRanges", "ClockListener"]
