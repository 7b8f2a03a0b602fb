"""Does ``max_seconds`` bound the wall time of a timing call?

One command, from the repository root::

    PYTHONPATH=. python benchmarks/timing_budget.py              # ResNet-18, 3 runs, ~2 min
    PYTHONPATH=. python benchmarks/timing_budget.py --gpt2       # GPT-2 small as well
    PYTHONPATH=. python benchmarks/timing_budget.py --runs 5 --max-seconds 3 10

Each call runs in a fresh Python process, as a new user's first call would (the hooks'
calibration, cached per process, is then part of it); the wall time is taken around the call
alone (not the import or the model's construction). Prints, per call and budget, the wall
times and the ratio wall / max_seconds over the runs (minimum and median), and how the
result says the budget was spent where it says so.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

CHILD = r"""
import json, sys, time
import torch
from moduleprofiler.timing import benchmark, time_modules, train_step_times

call, model_name, budget = sys.argv[1], sys.argv[2], float(sys.argv[3])
torch.manual_seed(0)
if model_name == "resnet18":
    import torchvision
    model = torchvision.models.resnet18()
    x = torch.randn(1, 3, 112, 112)
else:
    from transformers import GPT2Config, GPT2Model
    model = GPT2Model(GPT2Config()).eval()
    x = torch.randint(0, 50257, (1, 128))
function = {"benchmark": benchmark, "time_modules": time_modules,
            "train_step_times": train_step_times}[call]
began = time.perf_counter()
result = function(model, x, max_seconds=budget, progress=False)
wall = time.perf_counter() - began
spent = getattr(result, "budget", None)
print(json.dumps({"wall_s": wall, "kept": int(result.iterations),
                  "stop_reason": result.stop_reason,
                  "budget": None if spent is None else spent.to_dict()}))
"""


def run_once(call: str, model: str, budget: float) -> dict[str, Any]:
    """One call in a fresh process: its wall time, kept samples and budget record."""
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", CHILD, call, model, str(budget)],
                         check=True, capture_output=True, text=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--max-seconds", type=float, nargs="+", default=[3.0])
    parser.add_argument("--gpt2", action="store_true", help="GPT-2 small (1 x 128 tokens) too")
    parser.add_argument("--calls", nargs="+",
                        default=["benchmark", "time_modules", "train_step_times"])
    args = parser.parse_args()
    models = ["resnet18"] + (["gpt2"] if args.gpt2 else [])
    print(f"python {sys.version.split()[0]}; wall time of each call / its max_seconds, "
          f"{args.runs} runs, one fresh process per run")
    print(f"{'call':18} {'model':9} {'max_s':>6} {'walls (s)':>28} {'min':>6} {'median':>6}"
          f"  kept, stop, how the budget went (s); load average before")
    for model in models:
        for budget in args.max_seconds:
            for call in args.calls:
                load = os.getloadavg()[0]
                runs = [run_once(call, model, budget) for _ in range(args.runs)]
                walls = [r["wall_s"] for r in runs]
                ratios = [w / budget for w in walls]
                last = runs[-1]
                spent = last["budget"]
                how = "" if spent is None else ", ".join(
                    f"{k.removesuffix('_s')} {v:.2f}" for k, v in spent.items()
                    if k.endswith("_s") and k != "max_seconds")
                print(f"{call:18} {model:9} {budget:6g} "
                      f"{' '.join(f'{w:.2f}' for w in walls):>28} {min(ratios):6.2f} "
                      f"{statistics.median(ratios):6.2f}  {last['kept']}, "
                      f"{last['stop_reason']}{'; ' + how if how else ''}; load {load:.1f}",
                      flush=True)


if __name__ == "__main__":
    main()
