"""The hook-free latency ``time_modules`` reports on a GPU against the user's unprofiled run.

    PYTHONPATH=. python3 benchmarks/gpu_hook_free_unprofiled.py [--rounds 2] [--first N]

Once a process has run a kernel-record (CUPTI) session, every later launch costs the host more.
For each configuration and round, three fresh processes, one after another:

* ``benchmark``: ``benchmark()`` alone, no profiler ever: the unprofiled latency (median);
* ``time_modules``: one ``time_modules`` pass (the kernel clock). Its reported hook-free
  latency (``facts.hook_free.latency_ms``, timed before the pass's first session) and the
  median of the hook-free iterations interleaved with its traced blocks (``hook_free_ms``,
  what the report used before);
* ``after``: ``benchmark()`` after one ``time_modules`` pass in the same process.

Printed per configuration: the medians over rounds of each, and their ratios to the
unprofiled latency.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = """
import json, sys, warnings
import torch, torchvision
from moduleprofiler.timing import benchmark, time_modules
warnings.simplefilter("ignore")
name, batch, dtype, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
torch.manual_seed(0)
if name == "mlp40":
    model = torch.nn.Sequential(*(torch.nn.Linear(256, 256) for _ in range(40)))
    x = torch.randn(batch, 256)
else:
    model = getattr(torchvision.models, name)(weights=None)
    x = torch.randn(batch, 3, 224, 224)
model = model.cuda().eval().to(getattr(torch, dtype))
x = x.cuda().to(getattr(torch, dtype))
found = {}
if kind == "benchmark":
    found["latency_ms"] = benchmark(model, x, max_seconds=2.0, progress=False).latency_ms
else:
    timing = time_modules(model, x, max_seconds=3.0, progress=False)
    found["reported_ms"] = timing.facts.hook_free.latency_ms
    found["unprofiled"] = timing.facts.hook_free.unprofiled
    spans = sorted(timing.facts.hook_free_ms)
    found["interleaved_ms"] = spans[len(spans) // 2]
    if kind == "after":
        found["latency_ms"] = benchmark(model, x, max_seconds=2.0, progress=False).latency_ms
print(json.dumps(found))
"""

CONFIGS = [("resnet18", 1, "float32"), ("resnet50", 1, "bfloat16"), ("mlp40", 8, "float32"),
           ("resnet50", 64, "bfloat16")]


def child(config: tuple[str, int, str], kind: str) -> dict[str, float]:
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", CHILD, *map(str, config), kind],
                         capture_output=True, text=True, check=True, cwd=root,
                         env={**os.environ, "PYTHONPATH": str(root)})
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--first", type=int, default=len(CONFIGS),
                        help="measure only the first N configurations")
    args = parser.parse_args()
    print("config                   unprofiled  reported (x)       interleaved (x)    "
          "benchmark after a pass (x)   reported timed unprofiled")
    for config in CONFIGS[:args.first]:
        rows: dict[str, list[float]] = {"fresh": [], "reported": [], "interleaved": [],
                                        "after": []}
        unprofiled = []
        for _ in range(args.rounds):
            rows["fresh"].append(child(config, "benchmark")["latency_ms"])
            timed = child(config, "time_modules")
            rows["reported"].append(timed["reported_ms"])
            rows["interleaved"].append(timed["interleaved_ms"])
            unprofiled.append(bool(timed["unprofiled"]))
            rows["after"].append(child(config, "after")["latency_ms"])
        m = {key: statistics.median(values) for key, values in rows.items()}
        base = m["fresh"]
        print(f"{'/'.join(map(str, config)):<24} {base:8.3f} ms "
              f"{m['reported']:8.3f} ({m['reported'] / base:.3f})  "
              f"{m['interleaved']:8.3f} ({m['interleaved'] / base:.3f})  "
              f"{m['after']:8.3f} ({m['after'] / base:.3f})            {all(unprofiled)}",
              flush=True)


if __name__ == "__main__":
    main()
