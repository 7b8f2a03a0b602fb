"""The expected error band against whole models: every configuration of a ground-truth file
(``measure.py``'s output) predicted on this machine's CPU from a shipped calibration, and how
often the measured device time of the pass (the sum of its kernels, CUPTI) falls inside
``predicted_device_ms_low`` .. ``predicted_device_ms_high``.

    python benchmarks/prediction/bands.py benchmarks/results/prediction/truth_h200_run1.jsonl \\
        --device H200 --csv out.csv

The band is the 10th to 90th percentile of each operator class's held-out calibration
residuals, summed over the pass's operators; an honest band would hold about 80 % of the
passes. Models whose library is not installed here are skipped and named.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from evaluate import read
from models import DTYPES, by_name

from moduleprofiler import Profiler


def predict_band(row: dict[str, Any], device: str) -> dict[str, Any]:
    zoo = by_name(row["model"])
    train = row["pass"] == "train"
    inputs = zoo.make_input(row["batch"], torch.device("meta"), DTYPES[row["dtype"]])
    # measure.py ran fp32 with TF32 on (set_float32_matmul_precision("high"))
    predicted = Profiler().predict(zoo.build(), inputs, device=device, host=None,
                                   dtype=row["dtype"], backward=train,
                                   loss_fn=zoo.loss if train else None, tf32=True)
    return {"device_ms": predicted.predicted_device_ms,
            "low_ms": predicted.predicted_device_ms_low,
            "high_ms": predicted.predicted_device_ms_high}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("truth")
    parser.add_argument("--device", default="H100 SXM")
    parser.add_argument("--csv", default=None)
    parser.add_argument("--summarise", action="store_true",
                        help="summarise a CSV this script wrote (the positional argument)")
    args = parser.parse_args()
    if args.summarise:
        summarise(pd.read_csv(args.truth))
        return
    table, skipped = [], set()
    for row in read(args.truth):
        if "error" in row or row["model"] in skipped:
            continue
        try:
            ours = predict_band(row, args.device)
        except ImportError as exc:
            skipped.add(row["model"])
            print(f"skipped {row['model']}: {exc}", flush=True)
            continue
        kernels = row["kernels_us"] / 1e3
        entry = {"model": row["model"], "batch": row["batch"], "dtype": row["dtype"],
                 "pass": row["pass"], "kernels_ms": kernels, **ours,
                 "inside": ours["low_ms"] <= kernels <= ours["high_ms"]}
        table.append(entry)
        print(f"{row['model']:>20} b{row['batch']:<3} {row['dtype']} {row['pass']:<7} "
              f"measured {kernels:8.3f} ms, predicted {ours['device_ms']:8.3f} "
              f"[{ours['low_ms']:8.3f}, {ours['high_ms']:8.3f}] "
              f"{'inside' if entry['inside'] else 'outside'}", flush=True)
    frame = pd.DataFrame(table)
    if args.csv:
        frame.to_csv(args.csv, index=False)
    print()
    summarise(frame)
    if skipped:
        print(f"skipped (library not installed here): {', '.join(sorted(skipped))}")


def _p90(values: pd.Series) -> float:
    return float(values.quantile(0.9, interpolation="nearest"))


def summarise(frame: pd.DataFrame) -> None:
    """Per subset: how often the measured device time is inside the band, the band's width,
    and the prediction's |error|."""
    families = {"decoder-only LLMs": frame.model.isin(["gpt2", "llama_8x1024"])}
    for label, subset in (("all", frame), ("forward", frame[frame["pass"] == "forward"]),
                          ("training step", frame[frame["pass"] == "train"]),
                          *((name, frame[rows]) for name, rows in families.items())):
        if subset.empty:
            continue
        width = (subset.high_ms - subset.low_ms) / (2 * subset.device_ms)
        error = ((subset.device_ms - subset.kernels_ms) / subset.kernels_ms).abs()
        below = int((subset.kernels_ms < subset.low_ms).sum())
        above = int((subset.kernels_ms > subset.high_ms).sum())
        print(f"{label}: measured inside the band in {int(subset.inside.sum())} of "
              f"{len(subset)} ({100 * subset.inside.mean():.0f} %; {below} below, {above} "
              f"above); band half-width median {100 * width.median():.1f} %; device time "
              f"|error| median {100 * error.median():.1f} %, p90 {100 * _p90(error):.1f} %")

if __name__ == "__main__":
    main()
