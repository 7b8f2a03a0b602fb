"""Where does the time of a model go, in inference and in training?

Run from the repository root::

    python examples/training_timing.py
    MODULEPROFILER_FAST=1 python examples/training_timing.py   # a few seconds (used by tests)

1. ``benchmark``: hook-free whole-model latency with a 95 % CI of the median.
2. ``time_modules``: per-module forward times, with the hooks' cost measured.
3. ``TrainingProfiler``: forward and backward per module, around a real training loop.
"""

from __future__ import annotations

import os
import sys

import torch
from torch import nn

from moduleprofiler.timing import TrainingProfiler, benchmark, time_modules

FAST = os.environ.get("MODULEPROFILER_FAST") == "1" or "--fast" in sys.argv


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
        nn.Conv2d(16, 32, 3, padding=1, stride=2), nn.BatchNorm2d(32), nn.ReLU(inplace=True),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
    )


def main() -> None:
    torch.manual_seed(0)
    model = make_model()
    images = torch.randn(8, 3, 32, 32)

    # 1. whole-model latency, no hooks: stops once the median is known to +-1 %.
    #    num_threads pins torch's intra-op threads while timing (restored afterwards).
    latency = benchmark(model, images, warmup_seconds=0.2 if FAST else 1.0,
                        max_seconds=1.0 if FAST else 10.0, num_threads=1)
    print(f"latency: median {latency.latency_ms:.3f} ms, 95% CI "
          f"[{latency.latency_ci_low_ms:.3f}, {latency.latency_ci_high_ms:.3f}] ms after "
          f"{latency.iterations} iterations ({latency.stop_reason}); "
          f"throughput {latency.throughput:.0f} images/s")

    # 2. per-module forward times (inference), hooks' overhead measured alongside
    timing = time_modules(model, images, num_iters=20 if FAST else 200,
                          drop_first=5 if FAST else 20, warmup_seconds=0 if FAST else 0.5,
                          num_threads=1)
    print()
    print(timing.report())

    # 3. a real training loop; steps 2..(stop-1) are profiled, alternating forward-hook and
    #    gradient-hook steps
    steps = 8 if FAST else 40
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    labels = torch.randint(0, 10, (8,))
    with TrainingProfiler(model, start_step=2, stop_step=steps) as prof:
        for _ in range(steps):
            loss = loss_fn(model(images), labels)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            prof.step()
    print()
    print(prof.layerwise_summary())


if __name__ == "__main__":
    main()
