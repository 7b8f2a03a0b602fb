"""How far the host model can go: each model's host launches counted by host-cost class (on
the meta device, as ``predict`` counts them), against the measured latency of its host-bound
forwards (the kernels keep the GPU busy less than half the latency), judged against the
minimum over the truth's runs.

Printed, per truth file and over both: the error of today's host model (the calibration's
tight-loop costs, as measured) and of models whose constants are fitted on the measured
minima, each judged *leave one model out* (the constants that predict a model never saw it):

* ``factor``: one factor on every calibrated cost;
* ``launch+call``: the calibrated launch costs times one factor, plus a fitted cost per
  module call;
* ``by class``: one factor per group of host-cost classes (views; elementwise, copies,
  gathers and reductions; GEMMs; convolutions; normalisations; attention; module calls),
  least squares on the relative error, pulled towards the single factor (ridge) so that a
  group few models use cannot run away;
* ``oracle``: per model the single best constant latency (no model can beat it: the same
  host work, measured at several batch sizes and dtypes of one run, differs this much).

    python benchmarks/prediction/host_classes.py \\
        benchmarks/results/prediction/truth_h200_run1.jsonl:H200 \\
        benchmarks/results/prediction/truth_h100_run1.jsonl+truth_h100_run2.jsonl:"H100 SXM"
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from evaluate import read
from models import DTYPES, by_name

from moduleprofiler import ModuleProfiler
from moduleprofiler.call import Call
from moduleprofiler.prediction import shipped_calibrations
from moduleprofiler.prediction.host_model import IN_SITU_HOST_FACTOR, HostModel
from moduleprofiler.prediction.meta_copy import meta_copy
from moduleprofiler.prediction.op_classes import classify
from moduleprofiler.runner import Listener

BUSY_LIMIT = 0.5
"""A forward is host-bound when its kernels keep the GPU busy less than this share."""


class HostCounts(Listener):
    """The pass's host work: launches per host-cost class and module calls."""

    def __init__(self) -> None:
        self.launches: dict[str, int] = {}
        self.calls = 0

    def observe(self, module: Any) -> bool:
        return True

    def enter(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.calls += 1

    def operator(self, call: Call | None, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        work = classify(func, args, kwargs, out)
        self.launches[work.host] = self.launches.get(work.host, 0) + 1


def host_work(model_name: str) -> HostCounts:
    """The launches and module calls of one forward (batch 1, fp32: host work does not
    depend on them)."""
    zoo = by_name(model_name)
    counts = HostCounts()
    inputs = zoo.make_input(1, torch.device("meta"), DTYPES["fp32"])
    ModuleProfiler().profile(meta_copy(zoo.build(), DTYPES["fp32"]), inputs, eval=True,
                             listeners=[counts])
    return counts


def launch_us(counts: HostCounts, model: HostModel) -> float:
    """The calibrated launch costs of the pass, without module calls."""
    total = 0.0
    for host_class, number in counts.launches.items():
        total += number * model.op_us(_Work(host_class))
    return total


class _Work:
    """The one field of an operator's work the host model reads."""

    def __init__(self, host: str) -> None:
        self.host = host


GROUPS: dict[str, tuple[str, ...]] = {
    "view": ("view",),
    "elementwise": ("unary", "binary", "copy", "gather", "reduction", "softmax", "cpu_op"),
    "gemm": ("gemm",),
    "conv": ("conv",),
    "norm": ("batch_norm", "layer_norm"),
    "attention": ("attention",),
}
"""Host-cost classes grouped for the per-class fit (module calls are one more group)."""


def group_us(counts: HostCounts, model: HostModel) -> list[float]:
    """The pass's calibrated host ms per group of :data:`GROUPS`, then its module calls'."""
    out = []
    for classes in GROUPS.values():
        out.append(sum(number * model.op_us(_Work(host_class))
                       for host_class, number in counts.launches.items()
                       if host_class in classes) / 1e3)
    out.append(counts.calls * model.call_us(0) / 1e3)
    return out


RIDGE = 0.05
"""How strongly the per-group factors are pulled towards the single factor."""


def by_class(groups: np.ndarray, measured: np.ndarray, factor: float) -> np.ndarray:
    """Per-group factors minimising the squared relative error plus ``RIDGE`` times their
    squared distance from ``factor``; none below 0.1."""
    design = groups / measured[:, None]
    target = np.ones(len(measured))
    k = design.shape[1]
    lhs = design.T @ design + RIDGE * len(measured) * np.eye(k)
    rhs = design.T @ target + RIDGE * len(measured) * factor * np.ones(k)
    return np.asarray(np.maximum(np.linalg.solve(lhs, rhs), 0.1))


def truth_rows(spec: str) -> tuple[str, list[dict[str, Any]]]:
    """``a.jsonl[+b.jsonl...]:DEVICE`` -> the device and its host-bound forwards, each with
    ``measured`` the minimum over the files' runs."""
    files, _, device = spec.rpartition(":")
    best: dict[tuple[Any, ...], dict[str, Any]] = {}
    base = Path(files.split("+")[0]).parent
    for index, name in enumerate(files.split("+")):
        path = Path(name) if index == 0 or "/" in name else base / name
        for row in read(str(path)):
            if "error" in row or row["pass"] != "forward":
                continue
            key = (row["model"], row["batch"], row["dtype"])
            measured = row["latency"]["min_ms"]
            kept = best.setdefault(key, {**row, "measured": measured})
            kept["measured"] = min(kept["measured"], measured)
    rows = [row for row in best.values()
            if row["kernels_us"] / 1e3 < BUSY_LIMIT * row["measured"]]
    return device, rows


def quantiles(errors: list[float]) -> str:
    ordered = sorted(errors)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return f"median {100 * statistics.median(ordered):5.1f} %, p90 {100 * p90:5.1f} %"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("truth", nargs="+", help="FILES:DEVICE")
    parser.add_argument("--fit", default="resnet50,vit_b_16,gpt2",
                        help="the models the shipped factor is fitted on")
    parser.add_argument("--counts", help="a JSON file caching each model's host work")
    args = parser.parse_args()
    calibrations = shipped_calibrations()
    work: dict[str, HostCounts] = {}
    if args.counts and Path(args.counts).exists():
        for name, data in json.loads(Path(args.counts).read_text()).items():
            work[name] = HostCounts()
            work[name].launches, work[name].calls = data["launches"], data["calls"]
    for spec in args.truth:
        device, rows = truth_rows(spec)
        costs = calibrations[device].host
        assert costs is not None
        plain = HostModel(costs, in_model=1.0)  # the tight loops' costs
        for row in rows:
            if row["model"] not in work:
                work[row["model"]] = host_work(row["model"])
        if args.counts:
            Path(args.counts).write_text(json.dumps(
                {name: {"launches": c.launches, "calls": c.calls} for name, c in work.items()}))
        measured = np.array([row["measured"] for row in rows])
        launches = np.array([launch_us(work[row["model"]], plain) / 1e3 for row in rows])
        calls = np.array([work[row["model"]].calls * plain.call_us(0) / 1e3
                          for row in rows])
        names = [row["model"] for row in rows]
        today = launches + calls
        print(f"{spec}: {len(rows)} host-bound forwards of {len(set(names))} models")
        print(f"  {'today (tight-loop costs)':<34} {quantiles(list(abs(today / measured - 1)))}")
        groups = np.array([group_us(work[row["model"]], plain) for row in rows])
        errors: dict[str, list[float]] = {"factor": [], "launch+call": [], "by class": [],
                                          "oracle": []}
        for held in sorted(set(names)):
            train = np.array([name != held for name in names])
            test = ~train
            factor = float((today[train] * measured[train]).sum()
                           / (today[train] ** 2).sum())
            errors["factor"] += list(abs(factor * today[test] / measured[test] - 1))
            design = np.stack([launches[train], np.array([work[n].calls for n in names])[train]],
                              axis=1)
            (a, b), *_ = np.linalg.lstsq(design, measured[train], rcond=None)
            held_calls = np.array([work[n].calls for n in names])[test]
            predicted = a * launches[test] + b * held_calls
            errors["launch+call"] += list(abs(predicted / measured[test] - 1))
            weights = by_class(groups[train], measured[train], factor)
            errors["by class"] += list(abs(groups[test] @ weights / measured[test] - 1))
            values = measured[test]
            candidates = np.linspace(values.min(), values.max(), 400)
            best = min(candidates, key=lambda c: float(np.median(abs(c / values - 1))))
            errors["oracle"] += list(abs(best / values - 1))
        for label, values in errors.items():
            print(f"  {label + ' (leave one model out)':<34} {quantiles(values)}")
        fit = np.array([name in args.fit.split(",") for name in names])
        factor = float(np.median(measured[fit] / today[fit]))
        print(f"  factor {factor:.3f} (median ratio) fitted on {args.fit}: on the other models "
              f"{quantiles(list(abs(factor * today[~fit] / measured[~fit] - 1)))}; with the "
              f"shipped factor {IN_SITU_HOST_FACTOR}: "
              f"{quantiles(list(abs(IN_SITU_HOST_FACTOR * today[~fit] / measured[~fit] - 1)))}")
        everything = np.ones(len(rows), dtype=bool)
        factor = float((today * measured).sum() / (today ** 2).sum())
        weights = by_class(groups[everything], measured, factor)
        print(f"  fitted on all: factor {factor:.3f}; by class " + ", ".join(
            f"{name} {w:.2f}" for name, w in zip([*GROUPS, "module call"], weights)))
        for name in sorted(set(names)):
            mine = [m / t for m, t, n in zip(measured, today, names) if n == name]
            print(f"    {name:<20} launches {sum(work[name].launches.values()):>5}, module calls"
                  f" {work[name].calls:>4}, measured/today {min(mine):.2f}-{max(mine):.2f}")


if __name__ == "__main__":
    main()
