"""GPU check: a layer that runs on some iterations only (data-dependent control flow, as layer
drop does) gets its call record and its times under the kernel clock, for ``time_modules``
and ``train_step_times``; its device median is the median over the iterations that ran it.

    PYTHONPATH=. python3 benchmarks/gpu_data_dependent.py

Prints each result's records and per-module device and host times, and checks the skipped
layer's median against its own kept samples. Needs CUDA.
"""

from __future__ import annotations

import math
import statistics
import warnings

import torch
from torch import nn

from moduleprofiler import ModuleProfiler


class SometimesDeep(nn.Module):
    """``first``, then ``second`` on every third forward only, then ``last``."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.first, self.second, self.last = (nn.Linear(width, width) for _ in range(3))
        self.forwards = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.forwards += 1
        x = self.first(x)
        if self.forwards % 3 == 0:
            x = self.second(x)
        return self.last(x)


def check(name: str, timing: object) -> bool:
    records = timing.records  # type: ignore[attr-defined]
    print(f"{name}: clock {timing.clock}, records "  # type: ignore[attr-defined]
          f"{[(r.path, r.call_number, r.parent) for r in records]}")
    frame = timing.to_df("module").set_index("module")  # type: ignore[attr-defined]
    shown = [c for c in ("device_ms", "host_ms", "backward_device_ms") if c in frame.columns]
    print(frame[shown].to_string())
    second = [r for r in records if r.path == "second"]
    if not second:
        print("  FAIL: no record of 'second'")
        return False
    kept = second[0].metrics.get("device_samples_ms", ())
    samples = [v for v in kept if not math.isnan(v)]
    if not samples:
        print(f"  FAIL: 'second' has no device sample in {len(kept)} traced iterations")
        return False
    expected = statistics.median(samples)
    got = frame.loc["second", "device_ms"]
    ok = abs(got - expected) <= 1e-12 * max(1.0, expected)
    print(f"  'second' ran in {len(samples)} of {len(kept)} traced iterations; device median "
          f"{got:.5f} ms, its samples' median {expected:.5f} ms: {'ok' if ok else 'FAIL'}")
    return ok


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("needs CUDA")
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    model = SometimesDeep(2048).cuda()
    x = torch.randn(256, 2048, device="cuda")
    profiler = ModuleProfiler()
    results = [
        check("time_modules", profiler.time_modules(model, x, num_iters=12, drop_first=3,
                                                    progress=False)),
        check("train_step_times", profiler.train_step_times(
            model, x, loss_fn=lambda out: out.float().pow(2).mean(), num_iters=12,
            drop_first=3, progress=False)),
    ]
    print("all ok" if all(results) else "FAILED")


if __name__ == "__main__":
    main()
