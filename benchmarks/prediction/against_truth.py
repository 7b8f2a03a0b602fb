"""An ``evaluate.py`` CSV's predictions held against another truth file of the same
configurations (``measure_latency_runs.py``'s, several runs each): the predictions do not
depend on the truth, so a second truth (another session, another host) needs no new
prediction. Printed as ``evaluate.py`` prints its runs' statistics, per model the signed
error of the host-bound configurations against the minimum of the runs' medians.

    python benchmarks/prediction/against_truth.py EVALUATED.csv TRUTH.jsonl
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from evaluate import _against_runs, read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("evaluated")
    parser.add_argument("truth")
    args = parser.parse_args()
    frame = pd.read_csv(args.evaluated)
    truth = {(r["model"], r["batch"], r["dtype"]): r for r in read(args.truth)
             if "error" not in r and r.get("runs")}
    rows = []
    for entry in frame.to_dict("records"):
        row = truth.get((entry["model"], entry["batch"], entry["dtype"]))
        if row is None:
            continue
        runs = row["runs"]
        low = min(run["median_ms"] for run in runs)
        rows.append({**entry, "runs": len(runs), "kernels_ms": row["kernels_us"] / 1e3,
                     "min_over_runs_ms": low,
                     "min_over_runs_min_ms": min(run["min_ms"] for run in runs),
                     "run_over_min": statistics.median(run["median_ms"] / low - 1
                                                       for run in runs)})
    held = pd.DataFrame(rows)
    print(f"{args.evaluated}'s predictions against {args.truth} ({len(held)} configurations)")
    _against_runs(held)
    bound = held[held.kernels_ms / held.min_over_runs_ms < 0.8]
    print("host-bound, signed error against the minimum of the runs' medians, by model:")
    for model, group in bound.groupby("model", sort=False):
        signed = statistics.median(group.ours_ms / group.min_over_runs_ms - 1)
        print(f"  {model:>20}: {100 * signed:+6.1f} % ({len(group)})")


if __name__ == "__main__":
    main()
