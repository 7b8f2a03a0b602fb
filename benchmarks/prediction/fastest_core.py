"""The CPU core this process runs a tiny operator fastest on: on a lent GPU machine the
cores differ (an H200's host: a launch on two of sixteen cores cost 1.3 times what it cost
on the others), so the measurements a comparison needs pinned to one core are pinned to the
fastest. Prints the core's number.

    taskset -c $(python3 benchmarks/prediction/fastest_core.py) python3 ...
"""

from __future__ import annotations

import os
import sys
import time

import torch


def view_us(x: torch.Tensor, calls: int = 20000) -> float:
    """Host µs of one ``x.view`` (no device work), the fastest of five loops."""
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(calls):
            x.view(8, 2)
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def main() -> None:
    x = torch.randn(2, 8)
    cores = sorted(os.sched_getaffinity(0))
    found = {}
    for core in cores:
        os.sched_setaffinity(0, {core})
        view_us(x, 2000)
        found[core] = view_us(x)
    fastest = min(found, key=found.__getitem__)
    print(" ".join(f"{core}:{us:.3f}" for core, us in found.items()), file=sys.stderr)
    print(fastest)


if __name__ == "__main__":
    main()
