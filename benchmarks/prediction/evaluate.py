"""The prediction proof, offline: every configuration of a ground-truth file
(``measure.py``'s output, measured on a GPU) predicted on this machine's CPU from the shipped
calibration, predicted against measured.

    python benchmarks/prediction/evaluate.py benchmarks/results/prediction/truth_h100_run1.jsonl
        [--device "H100 SXM"] [--repeat OTHER_TRUTH.jsonl] [--csv out.csv]
    python benchmarks/prediction/evaluate.py benchmarks/results/prediction/truth_h200_run1.jsonl \\
        --device H200 --csv out.csv

(``--device``: the shipped calibration to predict from, that of the GPU the truth ran on.)

Printed: per configuration the measured hook-free latency, ours, the plain roofline
(``max(FLOPs / peak, bytes / bandwidth)`` per operator, summed) and RuntimeEstimator's
roofline (measured beside the truth on the GPU); the median and 90th percentile of |error|,
host-bound and device-bound apart (device-bound: the kernels keep the GPU busy at least 80 % of
the latency); per module (modules with >= 5 % of the device time) the median |error| of the
predicted device time against the measured; with ``--repeat``, the same statistics of one
measured run against another (the floor no prediction can beat). A truth with several runs
per configuration (``measure_latency_runs.py``'s ``runs``) is also held against the minimum
over its runs, of each run's median and of each run's minimum over iterations, beside how far
one run lies above that minimum.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import DTYPES, by_name

from moduleprofiler import ModuleProfiler
from moduleprofiler.call import Call
from moduleprofiler.errors import ProfilingError
from moduleprofiler.prediction.meta_copy import meta_copy
from moduleprofiler.prediction.op_classes import classify
from moduleprofiler.prediction.predict import resolve_device
from moduleprofiler.runner import Listener


class RooflineListener(Listener):
    """The plain roofline of the pass: per operator ``max(FLOPs / peak, bytes / bw)``."""

    def __init__(self, device: str) -> None:
        self.model = resolve_device(device)[0]
        self.us = 0.0

    def observe(self, module: Any) -> bool:
        return True

    def operator(self, call: Call | None, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        self._add(func, args, kwargs, out)

    def backward_operator(self, owner: Call | None, func: Any, args: Any, kwargs: Any,
                          out: Any) -> None:
        self._add(func, args, kwargs, out)

    def _add(self, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        work = classify(func, args, kwargs, out)
        if work.table is not None:
            self.us += self.model.roof_us(self.model.peaks, work.dtype, work.flops,
                                          work.moved_bytes, self.model.tf32(work.table))


def read(path: str) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    return [row for row in rows if "header" not in row]


def key(row: dict[str, Any]) -> tuple[Any, ...]:
    return row["model"], row["batch"], row["dtype"], row["pass"]


def inclusive(own: dict[str, float]) -> dict[str, float]:
    """Per module path, its own device µs plus its descendants'."""
    totals: dict[str, float] = {}
    for label, value in own.items():
        path = "" if label == "<root>" else label
        parts = path.split(".") if path else []
        for depth in range(len(parts) + 1):
            prefix = ".".join(parts[:depth])
            totals[prefix] = totals.get(prefix, 0.0) + value
    return totals


def predict_row(row: dict[str, Any], device: str, host: str | None) -> dict[str, Any]:
    zoo = by_name(row["model"])
    model = zoo.build()
    train = row["pass"] == "train"
    inputs = zoo.make_input(row["batch"], torch.device("meta"), DTYPES[row["dtype"]])
    roofline = RooflineListener(device)
    profiler = ModuleProfiler()
    loss_fn = zoo.loss if train else None
    # measure.py ran fp32 with TF32 on (set_float32_matmul_precision("high"))
    predicted = profiler.predict(model, inputs, device=device, host=host, dtype=row["dtype"],
                                 backward=train, loss_fn=loss_fn, tf32=True)
    profiler.profile(_meta_model(model, row["dtype"]), inputs, backward=train, loss_fn=loss_fn,
                     eval=not train, listeners=[roofline])
    modules = predicted.to_df("module")
    by_path = {("" if name == "__root__" else name): value for name, value in
               zip(modules["module"], modules["predicted_device_ms"])}
    return {"latency_ms": predicted.predicted_latency_ms,
            "device_ms": predicted.predicted_device_ms,
            "host_ms": predicted.predicted_host_ms,
            "roofline_ms": roofline.us / 1e3, "modules_ms": by_path,
            "notes": predicted.prediction_notes}


def _meta_model(model: torch.nn.Module, dtype: str) -> torch.nn.Module:
    return meta_copy(model, DTYPES[dtype])


def error(predicted: float | None, measured: float) -> float | None:
    return None if predicted is None else abs(predicted - measured) / measured


def quantiles(values: list[float]) -> str:
    if not values:
        return "n/a"
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return (f"median {100 * statistics.median(ordered):5.1f} %, p90 {100 * p90:5.1f} % "
            f"(n={len(ordered)})")


def _against_runs(frame: pd.DataFrame) -> None:
    """The predicted latency against the minimum over each configuration's runs (those with
    at least three), host-bound and device-bound apart (busy: the kernels over that minimum)."""
    full = frame[frame.runs >= 3]
    busy = full.kernels_ms / full.min_over_runs_ms
    print(f"against the minimum over >= 3 runs ({len(full)} of {len(frame)} configurations):")
    for label, subset in (("all", full), ("host-bound (busy < 80 %)", full[busy < 0.8]),
                          ("device-bound (busy >= 80 %)", full[busy >= 0.8])):
        print(f"  {label}:")
        for column, name in (("min_over_runs_ms", "each run's median"),
                             ("min_over_runs_min_ms", "each run's minimum")):
            values = [e for p, m in zip(subset.ours_ms, subset[column])
                      if (e := error(None if pd.isna(p) else p, m)) is not None]
            print(f"    ours against the minimum of {name}: {quantiles(values)}")
            signed = [p / m - 1 for p, m in zip(subset.ours_ms, subset[column]) if not pd.isna(p)]
            if signed:
                print(f"      signed median {100 * statistics.median(signed):+.1f} %")
        print(f"    a run's median above the minimum over runs: "
              f"{quantiles(list(subset.run_over_min))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("truth")
    parser.add_argument("--device", default="H100 SXM")
    parser.add_argument("--host", default="calibrated")
    parser.add_argument("--repeat", default=None)
    parser.add_argument("--csv", default=None)
    parser.add_argument("--only", default=None)
    parser.add_argument("--pass", dest="phase", choices=("forward", "train"), default=None,
                        help="only the forward passes, or only the training steps")
    args = parser.parse_args()
    rows = [r for r in read(args.truth) if "error" not in r
            and (not args.only or r["model"] in args.only.split(","))
            and (args.phase is None or r["pass"] == args.phase)]
    repeat = {key(r): r for r in read(args.repeat) if "error" not in r} if args.repeat else {}
    table = []
    module_errors: list[float] = []
    for row in rows:
        measured = row["latency"]["median_ms"]
        kernels_ms = row["kernels_us"] / 1e3
        try:
            ours = predict_row(row, args.device, args.host)
        except ProfilingError as exc:  # listed, never counted as a prediction
            print(f"{row['model']:>20} b{row['batch']:<3} {row['dtype']} {row['pass']:<7} "
                  f"not predicted: {str(exc).splitlines()[0][:160]}")
            continue
        entry = {"model": row["model"], "batch": row["batch"], "dtype": row["dtype"],
                 "pass": row["pass"], "measured_ms": measured,
                 "measured_min_ms": row["latency"]["min_ms"],
                 "busy": kernels_ms / measured, "kernels_ms": kernels_ms,
                 "ours_ms": ours["latency_ms"], "ours_device_ms": ours["device_ms"],
                 "roofline_ms": ours["roofline_ms"],
                 "runtime_estimator_ms": row.get("roofline_runtime_estimator_ms")}
        runs = row.get("runs", [])
        if runs:
            entry["runs"] = len(runs)
            entry["min_over_runs_ms"] = min(run["median_ms"] for run in runs)
            entry["min_over_runs_min_ms"] = min(run["min_ms"] for run in runs)
            entry["run_over_min"] = statistics.median(
                run["median_ms"] / entry["min_over_runs_ms"] - 1 for run in runs)
        other = repeat.get(key(row))
        entry["repeat_ms"] = other["latency"]["median_ms"] if other else None
        entry["repeat_min_ms"] = other["latency"]["min_ms"] if other else None
        truth_modules = inclusive(row.get("modules", {}))
        total = truth_modules.get("", 0.0)
        for path, measured_us in truth_modules.items():
            if path and total and measured_us >= 0.05 * total:
                predicted_ms = ours["modules_ms"].get(path)
                if predicted_ms is not None and not pd.isna(predicted_ms):
                    module_errors.append(abs(predicted_ms * 1e3 - measured_us) / measured_us)
        table.append(entry)
        print(f"{row['model']:>20} b{row['batch']:<3} {row['dtype']} {row['pass']:<7} "
              f"measured {measured:7.2f} ms (kernels {kernels_ms:6.2f}) ours "
              f"{ours['latency_ms']:7.2f} (device {ours['device_ms']:6.2f}) roofline "
              f"{ours['roofline_ms']:6.2f}", flush=True)
    frame = pd.DataFrame(table)
    if args.csv:
        frame.to_csv(args.csv, index=False)
    print()
    for label, subset in (("all", frame), ("host-bound (busy < 80 %)", frame[frame.busy < 0.8]),
                          ("device-bound (busy >= 80 %)", frame[frame.busy >= 0.8])):
        print(f"latency, {label}:")
        for column, name in (("ours_ms", "ours"), ("roofline_ms", "roofline"),
                             ("runtime_estimator_ms", "RuntimeEstimator"),
                             ("repeat_ms", "a second measured run")):
            values = [e for p, m in zip(subset[column], subset.measured_ms)
                      if (e := error(None if pd.isna(p) else p, m)) is not None]
            print(f"  {name:>22}: {quantiles(values)}")
        for column, name in (("ours_ms", "ours"), ("repeat_min_ms", "a second measured run")):
            values = [e for p, m in zip(subset[column], subset.measured_min_ms)
                      if (e := error(None if pd.isna(p) else p, m)) is not None]
            print(f"  {name:>22}: {quantiles(values)} against the minimum over iterations")
    if "min_over_runs_ms" in frame:
        _against_runs(frame)
    device_errors = [e for p, k in zip(frame.ours_device_ms, frame.kernels_ms)
                     if (e := error(p, k)) is not None]
    print(f"device time of the pass (ours vs the kernels' sum): {quantiles(device_errors)}")
    print(f"per module (>= 5 % of the device time), device time: {quantiles(module_errors)}")


if __name__ == "__main__":
    main()
