"""Profiling a 6.7 B-parameter GPT-2-shaped model on the meta device: time and peak RSS, beside
FlopCounterMode in the same run.

n_embd 4096, 32 layers, 32 heads, sequence 128, built under ``torch.device("meta")`` so nothing
is allocated. A bare meta forward, FlopCounterMode and ``ModuleProfiler.profile`` run in
interleaved rounds (a fresh random order each round, after one warm-up round); the script prints
the minimum and the median of each, as seconds and as multiples of the bare forward, the totals
both tools count, and the growth of peak RSS over the whole measurement.

    PYTHONPATH=. python benchmarks/meta_huge.py
    PYTHONPATH=. python benchmarks/meta_huge.py --rounds 9
"""

from __future__ import annotations

import argparse
import gc
import os
import random
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


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
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

    tools: dict[str, Callable[[], Any]] = {
        "bare meta forward": bare, "FlopCounterMode": fcm, "moduleprofiler": ours}
    samples: dict[str, list[float]] = {name: [] for name in tools}
    before = peak_rss_mb()
    rng = random.Random(0)
    order = list(tools)
    for round_index in range(args.rounds + 1):
        rng.shuffle(order)
        for name in order:
            gc.collect()
            start = time.perf_counter()
            tools[name]()
            if round_index:  # round 0 warms every tool up
                samples[name].append(time.perf_counter() - start)
    growth = peak_rss_mb() - before
    profile = ours()
    print(f"torch {torch.__version__}, 1 thread, {os.cpu_count()} CPUs, {args.rounds} "
          f"interleaved rounds after one warm-up round; load average at end "
          f"{'/'.join(f'{value:.2f}' for value in os.getloadavg())}")
    print(f"params {profile.total_params:,}  flops {profile.total_flops:,}  "
          f"(FlopCounterMode {fcm():,})  complete {profile.complete}")
    bare_min = min(samples["bare meta forward"])
    bare_med = statistics.median(samples["bare meta forward"])
    print(f"{'tool':<18} {'min s':>7} {'x bare':>7} {'median s':>9} {'x bare':>7}")
    for name, values in samples.items():
        low, mid = min(values), statistics.median(values)
        print(f"{name:<18} {low:7.3f} {low / bare_min:7.2f} {mid:9.3f} {mid / bare_med:7.2f}")
    print(f"peak RSS growth over all runs: {growth:.1f} MB")


if __name__ == "__main__":
    main()
