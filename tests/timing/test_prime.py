"""The idle-stream prime: on a GPU, a module's clock starts with its kernels, not with the
CPU's launch of them (skipped without CUDA; the CPU clock has nothing to prime)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from moduleprofiler.timing import time_modules
from moduleprofiler.timing.clocks.stamps import CpuStamps, CudaStamps
from tests.timing.helpers import GpuSleep, gpu_event_ms


def test_the_cpu_clock_has_nothing_to_prime():
    stamps = CpuStamps()
    stamps.prime()
    stamps.reset()
    assert stamps.resolve([stamps.stamp()]).tolist() == [0.0]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_first_module_on_an_idle_gpu_reads_its_kernel_not_the_launch():
    x = torch.zeros(1, device="cuda")
    model = nn.Sequential(GpuSleep(400_000))  # about 0.2-0.3 ms
    truth = gpu_event_ms(model[0], x, reps=15)
    readings = {}
    default = CudaStamps.prime_us
    try:
        for prime in (default, 0.0):
            CudaStamps.prime_us = prime
            timing = time_modules(model, x, num_iters=25, drop_first=5, warmup_seconds=0.1,
                                  clock="events")
            readings[prime] = timing.stats("0").inclusive.median
    finally:
        CudaStamps.prime_us = default
    # primed: the kernel; unprimed the reading also holds the root's hooks and the launch
    assert abs(readings[default] - truth) / truth < 0.02, (readings, truth)
    assert readings[0.0] > readings[default]
