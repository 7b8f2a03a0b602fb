"""Latency truth over several runs, measured on a CUDA machine: the hook-free eager forward
latency of every forward configuration of the zoo, measured in ``--rounds`` interleaved rounds
(every configuration once per round, the order reversed every other round), so each
configuration has as many runs, apart in time, as there are rounds; then the kernel time of
each, once all the rounds are done. One JSON line per configuration, ``measure.py``'s fields
(``latency`` of the first run, ``kernels_us``) plus ``runs``: each run's latency (median and
minimum over its iterations).

The kernel time comes last because it is read through a profiler session (CUPTI), and after
the first session CUPTI stays attached to the process: every later launch costs the host more
(1.3 to 1.7 times in tight loops on an H200's host, ``cupti_after_effect.py``), while the
latency is that of a user's unprofiled run.

    PYTHONPATH=. python3 benchmarks/prediction/measure_latency_runs.py --out truth.jsonl
        [--rounds 3] [--seconds 0.25] [--budget-s 300] [--only resnet50,gpt2]

A host-bound pass's latency moves between runs far more than its kernels do; a prediction of
the latency at best is held against the minimum over the runs. ``--budget-s`` bounds the
rounds: a round cut short leaves its last configurations with fewer runs, which the rows say;
the kernel times (two traced forwards of each configuration, seconds in all) follow anyway.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import _call, _sync, hook_free_latency
from models import BATCHES, DTYPES, ZOO

from moduleprofiler.timing.device_trace import device_trace


def kernel_us(step: Any, device: torch.device, iterations: int = 2) -> float:
    """Device time per ``step()``, µs: the sum of the device's own activity records."""
    with device_trace(device) as records:
        for _ in range(iterations):
            step()
    return sum(a.duration for a in records.activities) / 1e3 / iterations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=0.25,
                        help="time per latency measurement (at least 10 iterations)")
    parser.add_argument("--budget-s", type=float, default=300.0)
    parser.add_argument("--only", default=None, help="comma-separated model names")
    parser.add_argument("--device", default="cuda", help="cpu: a dry run, latency alone")
    args = parser.parse_args()
    began = time.perf_counter()
    device = torch.device(args.device)
    torch.set_float32_matmul_precision("high")  # fp32 runs in TF32, as the calibration
    zoo = [m for m in ZOO if not args.only or m.name in args.only.split(",")]
    steps: list[tuple[dict[str, Any], Any]] = []
    for entry in zoo:
        with torch.device(device):
            built = entry.build().eval()
        for dtype_name, dtype in DTYPES.items():
            model = copy.deepcopy(built).to(dtype=dtype)
            for batch in BATCHES:
                inputs = entry.make_input(batch, device, dtype)

                def step(model: Any = model, inputs: Any = inputs) -> None:
                    with torch.no_grad():
                        _call(model, inputs)
                row = {"model": entry.name, "family": entry.family, "batch": batch,
                       "dtype": dtype_name, "pass": "forward", "runs": []}
                steps.append((row, step))
        del built
    built_s = time.perf_counter() - began
    print(f"built {len(steps)} configurations in {built_s:.1f} s", flush=True)
    for round_index in range(args.rounds):
        round_began = time.perf_counter()
        order = steps if round_index % 2 == 0 else steps[::-1]
        for row, step in order:
            if time.perf_counter() - began > args.budget_s:
                print(f"budget spent in round {round_index + 1}", flush=True)
                break
            run: dict[str, Any] = {"round": round_index + 1}
            run.update(hook_free_latency(step, device, args.seconds))
            row["runs"].append(run)
        _sync(device)
        print(f"round {round_index + 1}: {time.perf_counter() - round_began:.1f} s", flush=True)
    if device.type == "cuda":  # after every latency run: CUPTI stays attached once it started
        traced_began = time.perf_counter()
        for row, step in steps:
            if row["runs"]:
                row["kernels_us"] = kernel_us(step, device)
        print(f"kernel time: {time.perf_counter() - traced_began:.1f} s", flush=True)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    header = {"device": name, "torch": torch.__version__,
              "rounds": args.rounds, "seconds_per_measurement": args.seconds,
              "built_s": round(built_s, 1), "total_s": round(time.perf_counter() - began, 1),
              "kernel_time": "after every latency run"}
    with Path(args.out).open("w", encoding="utf-8") as sink:
        sink.write(json.dumps({"header": header}) + "\n")
        for row, _ in steps:
            runs = row["runs"]
            if not runs:
                continue
            first = runs[0]
            row["latency"] = {k: first[k] for k in ("median_ms", "min_ms", "iterations")}
            row.setdefault("kernels_us", None)
            sink.write(json.dumps(row) + "\n")
            print(row["model"], row["batch"], row["dtype"],
                  [round(r["median_ms"], 3) for r in runs], flush=True)


if __name__ == "__main__":
    main()
