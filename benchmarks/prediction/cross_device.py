"""Calibrated on one card, predicting the other: the H100 SXM and H200 ground truths
(``measure.py``'s output on each GPU) against each other, offline (no GPU needed).

    python benchmarks/prediction/cross_device.py \\
        benchmarks/results/prediction/truth_h100_run1.jsonl \\
        benchmarks/results/prediction/truth_h200_run1.jsonl [--only gpt2,resnet50] [--csv out.csv]

For every configuration measured on both, each measured device time is moved to the other
card by the rule of ``predict(..., measured=...)`` (Habitat's idea, per module): the measured
time times the ratio of the two devices' predictions for it (each from the table rows both
calibrations measured, as ``predict`` takes it), computed here by the package's
own :func:`moduleprofiler.prediction.compare.scaled` on predictions of the meta pass
(``host=None``: device time only). Printed, as the median and 90th percentile of
|predicted - measured| / measured:

* per module (modules with >= 5 % of the pass's device time on the card predicted, inclusive
  of their children; in a training step the forward's modules) and per pass (the sum of all
  kernel time, scaled by the ratio of the two predicted passes);
* H100 -> H200 and H200 -> H100, each with its naive baselines: no scaling (one card's time
  taken as the other's) and the ratio of the datasheets (the dense peaks are equal, so the
  memory bandwidth ratio, 4800 / 3350 GB/s);
* the H200 predicted outright (no measurement) from its own calibration and from the H100's
  alone (the H200 calibration withheld: the H100's achieved fractions on the H200's datasheet
  peaks, what a device without a calibration gets), and the same scaling with that borrowed
  device as the target.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from evaluate import inclusive, key, quantiles, read
from models import DTYPES, by_name

from moduleprofiler import ModuleProfiler
from moduleprofiler.efficiency.peaks import device_peaks
from moduleprofiler.prediction.compare import scaled
from moduleprofiler.prediction.device_model import DeviceModel
from moduleprofiler.prediction.predict import DeviceSpec, PredictedProfile, resolve_device
from moduleprofiler.prediction.run import like_for_like
from moduleprofiler.records import ROOT_NAME

H100, H200 = "H100 SXM", "H200"
BORROWED = dataclasses.replace(device_peaks(H200), name="H200 without its calibration")
"""The H200's datasheet peaks under a name no calibration has: ``predict`` then takes the
path of a device with datasheet peaks only (the H100's tables on these peaks)."""
BANDWIDTH = device_peaks(H200).bytes_per_s / device_peaks(H100).bytes_per_s
SHARE = 0.05
"""Modules compared: at least this share of the pass's measured device time."""


RESOLVED = {device: resolve_device(device)[0] for device in (H100, H200)}
LIKE = dict(zip((H100, H200), like_for_like(RESOLVED[H100], RESOLVED[H200]), strict=True))
"""Each card's model on the table rows both calibrations measured, as ``predict(...,
measured=...)`` takes the ratio of the two predictions."""


def predict(row: dict[str, Any], device: DeviceSpec | DeviceModel) -> PredictedProfile:
    """The configuration of ``row`` predicted on ``device``, device time only."""
    zoo = by_name(row["model"])
    train = row["pass"] == "train"
    inputs = zoo.make_input(row["batch"], torch.device("meta"), DTYPES[row["dtype"]])
    with torch.device("meta"):  # built with no values: the prediction needs shapes only
        model = zoo.build()
    return ModuleProfiler().predict(model, inputs, device=device, host=None, dtype=row["dtype"],
                                    backward=train, loss_fn=zoo.loss if train else None,
                                    tf32=True)  # as measure.py ran fp32


def measured_ms(row: dict[str, Any]) -> dict[str, float]:
    """Per module path of a truth row, its measured device time (children included), ms."""
    return {path: us / 1e3 for path, us in inclusive(row.get("modules", {})).items()}


def moved(target: PredictedProfile, source: PredictedProfile,
          times: dict[str, float]) -> dict[str, float]:
    """``times`` (measured on the source device) moved to the target device by the package's
    rule: per module, times the ratio of the target's prediction to the source's."""
    measured = dataclasses.replace(source, records=(), module_metrics={
        path: {"device_ms": value} for path, value in times.items() if value > 0})
    result = scaled(target, source, measured)
    return {path: float(columns["scaled_device_ms"])
            for path, columns in result.module_metrics.items() if "scaled_device_ms" in columns}


def pass_ratio(target: PredictedProfile, source: PredictedProfile) -> float:
    """The ratio of the two predicted passes' device times."""
    assert target.predicted_device_ms is not None and source.predicted_device_ms is not None
    return target.predicted_device_ms / source.predicted_device_ms


def relative(predicted: float, measured: float) -> float:
    return abs(predicted - measured) / measured


def compare(rows: dict[str, dict[str, Any]], preds: dict[str, PredictedProfile],
            source: str, target: str, errors: dict[str, list[float]]) -> dict[str, float]:
    """One direction for one configuration: appends each method's per-module and per-pass
    errors to ``errors`` and returns the per-pass predictions (ms)."""
    have, want = measured_ms(rows[source]), measured_ms(rows[target])
    bandwidth = BANDWIDTH if target == H100 else 1 / BANDWIDTH
    methods: dict[str, dict[str, float]] = {
        "scaled by the two calibrations": moved(preds[f"{target} like"], preds[f"{source} like"],
                                                have),
        "no scaling": have,
        "datasheet ratio": {path: value * bandwidth for path, value in have.items()}}
    passes = {"scaled by the two calibrations": pass_ratio(preds[f"{target} like"],
                                                           preds[f"{source} like"]),
              "no scaling": 1.0, "datasheet ratio": bandwidth}
    if target == H200:
        methods["scaled, H200 calibration withheld"] = moved(preds["borrowed"], preds[H100],
                                                             have)
        passes["scaled, H200 calibration withheld"] = pass_ratio(preds["borrowed"], preds[H100])
    total = want.get("", 0.0)
    # one set of modules for every method: those the scaling could move
    shown = [path for path, value in want.items() if path and total and value >= SHARE * total
             and all(path in times for times in methods.values())]
    source_kernels = rows[source]["kernels_us"] / 1e3
    target_kernels = rows[target]["kernels_us"] / 1e3
    found = {}
    for method, times in methods.items():
        label = f"{source} -> {target}: {method}"
        errors.setdefault(f"{label} / module", []).extend(
            relative(times[path], want[path]) for path in shown)
        found[method] = source_kernels * passes[method]
        errors.setdefault(f"{label} / pass", []).append(relative(found[method], target_kernels))
    return found


def outright(row: dict[str, Any], predicted: PredictedProfile, label: str,
             errors: dict[str, list[float]]) -> None:
    """``predicted`` (no measurement) against the measured ``row``, per module and pass."""
    want = measured_ms(row)
    total = want.get("", 0.0)
    frame = predicted.to_df("module")
    ours = {("" if name == ROOT_NAME else name): float(value) for name, value in
            zip(frame["module"], frame["predicted_device_ms"]) if not pd.isna(value)}
    errors.setdefault(f"{label} / module", []).extend(
        relative(ours[path], want[path]) for path, value in want.items()
        if path and total and value >= SHARE * total and path in ours)
    assert predicted.predicted_device_ms is not None
    errors.setdefault(f"{label} / pass", []).append(
        relative(predicted.predicted_device_ms, row["kernels_us"] / 1e3))


def report(title: str, errors: dict[str, list[float]], labels: list[str],
           prefix: str = "") -> None:
    print(f"\n{title}")
    for level in ("pass", "module"):
        for label in labels:
            values = errors.get(f"{prefix}{label} / {level}", [])
            print(f"  {level:>6}  {label:>34}: {quantiles(values)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("h100_truth")
    parser.add_argument("h200_truth")
    parser.add_argument("--only", default=None, help="comma-separated model names")
    parser.add_argument("--csv", default=None)
    args = parser.parse_args()
    truths = {H100: {key(r): r for r in read(args.h100_truth) if "error" not in r},
              H200: {key(r): r for r in read(args.h200_truth) if "error" not in r}}
    both = [k for k in truths[H100] if k in truths[H200]
            and (not args.only or k[0] in args.only.split(","))]
    errors: dict[str, list[float]] = {}
    table = []
    for config in both:
        rows = {device: truths[device][config] for device in (H100, H200)}
        preds = {H100: predict(rows[H100], H100), H200: predict(rows[H100], H200),
                 "borrowed": predict(rows[H100], BORROWED)}
        for device in (H100, H200):  # a card whose rows the other has all: no second pass
            like = LIKE[device]
            preds[f"{device} like"] = preds[device] if like is RESOLVED[device] \
                else predict(rows[H100], like)
        to_h200 = compare(rows, preds, H100, H200, errors)
        to_h100 = compare(rows, preds, H200, H100, errors)
        outright(rows[H200], preds[H200], "H200 calibration", errors)
        outright(rows[H200], preds["borrowed"], "H100 calibration on H200 peaks", errors)
        outright(rows[H100], preds[H100], "H100 calibration (on the H100)", errors)
        h100_ms, h200_ms = (rows[d]["kernels_us"] / 1e3 for d in (H100, H200))
        table.append({"model": config[0], "batch": config[1], "dtype": config[2],
                      "pass": config[3], "h100_kernels_ms": h100_ms, "h200_kernels_ms": h200_ms,
                      "h200_from_h100_ms": to_h200["scaled by the two calibrations"],
                      "h200_from_h100_withheld_ms": to_h200["scaled, H200 calibration withheld"],
                      "h100_from_h200_ms": to_h100["scaled by the two calibrations"]})
        print(f"{config[0]:>20} b{config[1]:<3} {config[2]} {config[3]:<7} device time: H100 "
              f"{h100_ms:7.2f} ms, H200 {h200_ms:7.2f} (measured ratio {h200_ms / h100_ms:.3f}, "
              f"predicted {pass_ratio(preds[H200], preds[H100]):.3f}, withheld "
              f"{pass_ratio(preds['borrowed'], preds[H100]):.3f})", flush=True)
    if args.csv:
        pd.DataFrame(table).to_csv(args.csv, index=False)
    print(f"\n{len(both)} configurations measured on both; |error| of the device time, "
          f"modules with >= {100 * SHARE:.0f} % of the pass's device time on the card predicted")
    moves = ["scaled by the two calibrations", "no scaling", "datasheet ratio"]
    report(f"H100 -> H200 (measured on the H100, predicting the measured H200; datasheet "
           f"ratio x{1 / BANDWIDTH:.3f}):", errors,
           [*moves, "scaled, H200 calibration withheld"], f"{H100} -> {H200}: ")
    report(f"H200 -> H100 (measured on the H200, predicting the measured H100; datasheet "
           f"ratio x{BANDWIDTH:.3f}):", errors, moves, f"{H200} -> {H100}: ")
    report("predicted outright from a calibration (no measurement):", errors,
           ["H200 calibration", "H100 calibration on H200 peaks",
            "H100 calibration (on the H100)"])


if __name__ == "__main__":
    main()
