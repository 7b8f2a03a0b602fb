"""Why a bf16 MLP's first backward layers can read slower than their kernels: the same
``train_step_times`` reading in different GPU states, one run.

    PYTHONPATH=. python benchmarks/mlp_backward_probe.py

Setups, each a fresh ``train_step_times`` (20 steps, 4 dropped) on the same model: right after
building it; after an idle-ish phase of long ``_sleep`` spins (low power, as between the
interleaved rounds of ``gpu_efficiency.py``); after a busy phase of back-to-back matmuls; with
a longer prime; and the CUPTI kernel time of each layer's backward in hook-free steps.
"""

from __future__ import annotations

import copy
import gc
import itertools
import sys

import torch
from torch import nn

import benchmarks.gpu_efficiency as ge
from moduleprofiler.timing import train_step_times
from moduleprofiler.timing.clocks.stamps import CudaStamps
from moduleprofiler.timing.overhead import _CACHE


def readings(model: nn.Module, x: torch.Tensor, label: str, drop_first: int = 4) -> None:
    with ge.gpu_clock(label, quiet=True) as clock:
        timing = train_step_times(model, x, num_iters=16 + drop_first, drop_first=drop_first,
                                  progress=False)
    values = [timing.stats(str(i)).backward.inclusive.median for i in range(3)]
    print(f"{label:<44}" + "".join(f"{v:9.4f}" for v in values)
          + f"   {clock.get('mhz', float('nan')):.0f} MHz")


def main() -> int:
    if not torch.cuda.is_available():
        print("needs CUDA")
        return 1
    torch.manual_seed(0)
    sizes = (4096, 4096, 8192, 4096)
    model = nn.Sequential(*[nn.Linear(a, b) for a, b in itertools.pairwise(sizes)]).to(
        "cuda", torch.bfloat16)
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    cycles = torch.cuda.get_device_properties(0).clock_rate  # kHz: cycles per ms
    print(f"{'setup':<44}{'layer 0':>9}{'layer 1':>9}{'layer 2':>9}")
    readings(model, x, "fresh model")
    readings(model, x, "again")
    gc.collect()
    readings(model, x, "after gc.collect()")
    readings(copy.deepcopy(model), x, "a deep copy of the model")
    readings(model, x, "the model again")
    for _ in range(60):
        torch.cuda._sleep(int(2 * cycles))
    torch.cuda.synchronize()
    readings(model, x, "after 120 ms of spins")
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(100):
        a @ a
    torch.cuda.synchronize()
    readings(model, x, "after 100 bf16 8192^3 matmuls")
    default = CudaStamps.prime_us
    for prime in (300.0, 0.0):
        CudaStamps.prime_us = prime
        readings(model, x, f"prime {prime:g} us")
    CudaStamps.prime_us = default
    readings(model, x, "prime back to default")
    readings(model, x, "20 steps dropped", drop_first=20)
    _CACHE.clear()
    readings(model, x, "hook calibration cleared (it runs again)")
    readings(model, x, "again")
    _CACHE.clear()
    readings(model, x, "hook calibration cleared (it runs again)")
    ge.DEVICE = torch.device("cuda")
    situ = ge.in_situ_backward_ms(model, x, 5)
    print(f"{'in situ kernels (hook-free, CUPTI)':<44}"
          + "".join(f"{situ.get(str(i), float('nan')):9.4f}" for i in range(3)))
    return 0


if __name__ == "__main__" and "--timeline" not in sys.argv:
    sys.exit(main())


def timeline() -> None:
    """The GPU's kernel timeline of hooked training steps (CUPTI, CUDA activity only): one
    step's kernels in order with their durations and the idle gap before each."""
    torch.manual_seed(0)
    sizes = (4096, 4096, 8192, 4096)
    model = nn.Sequential(*[nn.Linear(a, b) for a, b in itertools.pairwise(sizes)]).to(
        "cuda", torch.bfloat16)
    x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    train_step_times(model, x, num_iters=6, drop_first=2, progress=False)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        train_step_times(model, x, num_iters=6, drop_first=2, progress=False,
                         measure_overhead=False)
    kernels = sorted((e for e in prof.events() if e.device_type == ge.DeviceType.CUDA),
                     key=lambda e: e.time_range.start)
    # every spin (the clock's prime) and the kernels around it, with the idle gap before each
    names = [event.name for event in kernels]
    spins = [i for i, name in enumerate(names) if "spin" in name.lower() or "sleep" in
             name.lower()]
    print(f"{len(kernels)} kernels traced, {len(spins)} spins; around the last three spins:")
    for i in spins[-3:]:
        for event, before in zip(kernels[i - 2:i + 5], kernels[i - 3:i + 4]):
            start, end = event.time_range.start, event.time_range.end
            gap = start - before.time_range.end
            print(f"  {event.name[:56]:<58}{end - start:9.1f} us  idle before {gap:9.1f} us")
        print()


if __name__ == "__main__" and "--timeline" in sys.argv:
    timeline()
