"""What the caches do to a hook's cost: the same Python work, timed right after a convolution
that evicts little (256 channels, 4 x 4) and one that evicts much (256 channels, 56 x 56, a
ResNet-50 stage-two size), and with nothing before it.

A profiler's hooks run between two convolutions. Their instructions do not depend on the image
size, but their time does: after a large convolution their code and data come back from the
outer caches. This is why ``overhead.py --size 32 224`` shows the cost per module call growing
with the image size, and why fewer instructions per call buy less wall time at 224 px than at
32 px.

    python benchmarks/cold_cache_probe.py            # 300 samples per case, 3 rounds

The work: attribute and dict reads over 400 small objects and 60 tensor metadata reads (shape,
dim, element size), about what a hook pair reads. Printed: minimum and median nanoseconds per
case and round, and the ratio of each case's minimum to the minimum with nothing before it.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn


class _Item:
    __slots__ = ("a", "b", "c")

    def __init__(self, i: int) -> None:
        self.a, self.b, self.c = i, str(i), {"x": i}


_ITEMS = [_Item(i) for i in range(400)]
_TENSOR = torch.randn(3, 4)


def work() -> int:
    """About a hook pair's reads: objects, dicts, tensor metadata."""
    total = 0
    for item in _ITEMS:
        total += item.a + len(item.b) + item.c["x"]
    for _ in range(20):
        total += len(_TENSOR.shape) + _TENSOR.dim() + _TENSOR.element_size()
    return total


def after(before: Callable[[], object], samples: int) -> list[int]:
    """Nanoseconds of :func:`work` right after ``before()``, ``samples`` times."""
    times = []
    with torch.no_grad():
        for _ in range(samples):
            before()
            start = time.perf_counter_ns()
            work()
            times.append(time.perf_counter_ns() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    large, small = nn.Conv2d(256, 256, 3, padding=1).eval(), nn.Conv2d(256, 256, 3, padding=1)
    x_large, x_small = torch.randn(1, 256, 56, 56), torch.randn(1, 256, 4, 4)
    cases: dict[str, Callable[[], object]] = {
        "nothing before": lambda: None,
        "after a 256 x 4 x 4 conv": lambda: small(x_small),
        "after a 256 x 56 x 56 conv": lambda: large(x_large),
    }
    print(f"torch {torch.__version__}, 1 thread, {args.samples} samples per case and round")
    for round_ in range(args.rounds):
        results = {name: after(before, args.samples) for name, before in cases.items()}
        floor = min(results["nothing before"])
        for name, times in results.items():
            print(f"round {round_ + 1}  {name:28s} min {min(times):8d} ns  median "
                  f"{statistics.median(times):10.0f} ns  min x {min(times) / floor:5.2f}")


if __name__ == "__main__":
    main()
