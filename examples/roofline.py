"""How close does each module get to the device's roofs? A roofline figure, on the CPU.

Run from the repository root::

    python examples/roofline.py                          # prints the table, saves nothing
    python examples/roofline.py docs/img/roofline.png    # the figure of docs/efficiency.md
    MODULEPROFILER_FAST=1 python examples/roofline.py    # a few seconds (used by tests)

1. ``profile(..., listeners=[TrafficListener()])``: FLOPs and bytes moved per module;
2. ``time_modules``: the measured forward time of each module;
3. ``measure_peaks("cpu")``: this machine's matmul rate and copy bandwidth (on a GPU,
   ``device_peaks()`` reads the datasheet table instead);
4. ``plot_roofline``: each module by FLOPs per byte and achieved FLOP/s, under the roofs.
"""

from __future__ import annotations

import os
import sys
import warnings

import torch
from torch import nn

from moduleprofiler import ModuleProfiler
from moduleprofiler.efficiency import (
    EfficiencyWarning,
    TrafficListener,
    measure_peaks,
    plot_roofline,
    with_efficiency,
)

FAST = os.environ.get("MODULEPROFILER_FAST") == "1" or "--fast" in sys.argv


class SmallNet(nn.Module):
    """Convolutions (compute-heavy), normalisation and activations (memory-heavy), a head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(32)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(4)
        self.fc1 = nn.Linear(64 * 16, 512)
        self.gelu = nn.GELU()
        self.fc2 = nn.Linear(512, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(self.relu(self.conv2(self.relu(self.bn1(self.conv1(x))))))
        return self.fc2(self.gelu(self.fc1(x.flatten(1))))


def main() -> None:
    torch.manual_seed(0)
    model = SmallNet().eval()
    x = torch.randn(8 if FAST else 32, 3, 32, 32)
    profiler = ModuleProfiler()
    profile = profiler.profile(model, x, listeners=[TrafficListener()])
    timing = profiler.time_modules(model, x, num_iters=6 if FAST else 40,
                                   drop_first=1 if FAST else 5, warmup_seconds=0.1)
    peaks = measure_peaks("cpu", dtypes=("fp32",), matmul_size=256 if FAST else 1024,
                          copy_bytes=2**22 if FAST else 2**27, reps=2 if FAST else 5)
    timed = profile.with_timing(timing)
    with warnings.catch_warnings():
        # a small layer whose data sits in cache can beat the DRAM copy: flagged, not hidden
        warnings.simplefilter("ignore", EfficiencyWarning)
        print(with_efficiency(timed, peaks).table(
            ["self_ops", "self_moved_bytes", "self_time_median_ms", "intensity", "compute_fraction",
             "bound"]))
        figure = plot_roofline(timed, peaks, path=sys.argv[1] if len(sys.argv) > 1
                               and sys.argv[1].endswith((".png", ".svg", ".pdf")) else None)
    points = sum(len(c.get_offsets()) for c in figure.axes[0].collections)
    print(f"roofline: {points} modules drawn against {peaks.name}")


if __name__ == "__main__":
    main()
