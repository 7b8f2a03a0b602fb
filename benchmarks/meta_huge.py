"""Profiling a 6.7 B-parameter GPT-2-shaped model on the meta device: time and peak RSS.

n_embd 4096, 32 layers, 32 heads, sequence 128 (as in the team's PEERS notes), built under
``torch.device("meta")`` so nothing is allocated. Prints the median of a few runs for a bare
meta forward, FlopCounterMode and ``ModuleProfiler.profile``, each after one warm-up run, and
the growth of peak RSS over the whole measurement.

    python benchmarks/meta_huge.py
"""

from __future__ import annotations

import resource
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from moduleprofiler import ModuleProfiler


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def median_seconds(fn: Callable[[], Any], reps: int = 3) -> float:
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    warnings.filterwarnings("ignore")
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_embd=4096, n_layer=32, n_head=32, n_positions=2048)
    with torch.device("meta"):
        model = GPT2LMHeadModel(config).eval()
    ids = torch.zeros(1, 128, dtype=torch.long, device="meta")
    profiler = ModuleProfiler()

    def bare() -> None:
        with torch.no_grad():
            model(input_ids=ids)

    def fcm() -> int:
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            model(input_ids=ids)
        return int(counter.get_total_flops())

    def ours() -> Any:
        return profiler.profile(model, {"input_ids": ids})

    before = peak_rss_mb()
    results = {name: median_seconds(fn) for name, fn in
               (("bare meta forward", bare), ("FlopCounterMode", fcm), ("moduleprofiler", ours))}
    growth = peak_rss_mb() - before
    profile = ours()
    print(f"params {profile.total_params:,}  flops {profile.total_flops:,}  "
          f"(FlopCounterMode {fcm():,})  complete {profile.complete}")
    for name, seconds in results.items():
        print(f"{name:<18} {seconds:7.3f} s  x bare {seconds / results['bare meta forward']:.2f}")
    print(f"peak RSS growth over all runs: {growth:.1f} MB")


if __name__ == "__main__":
    main()
