"""Fit the host model's two in-situ constants on a few models' host-bound forwards.

The calibration's host costs are tight loops of tiny operators; inside a model each launch
costs more (caches, the forward's own Python), and each module call carries its forward's
Python. Least squares over host-bound configurations (the kernels keep the GPU busy less than
half the latency): ``measured ≈ factor * (calibrated launch and module-call costs)``. (A second
constant per module call was tried: launches and module calls grow together in these models,
and the two-constant fit came out negative, so one factor is fitted.)

    python benchmarks/prediction/fit_host.py TRUTH.jsonl [TRUTH2.jsonl ...] --models a,b
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from evaluate import read
from models import DTYPES, by_name

from moduleprofiler import ModuleProfiler
from moduleprofiler.prediction import shipped_calibrations
from moduleprofiler.prediction.host_model import HostModel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("truth", nargs="+")
    parser.add_argument("--models", default="resnet50,vit_b_16,gpt2")
    parser.add_argument("--statistic", default="min_ms", choices=("min_ms", "median_ms"))
    args = parser.parse_args()
    names = args.models.split(",")
    costs = shipped_calibrations()["H100 SXM"].host
    assert costs is not None
    plain = HostModel(costs, in_model=1.0)  # the tight loops' costs
    rows_a, rows_b = [], []
    for path in args.truth:
        for row in read(path):
            if "error" in row or row["model"] not in names or row["pass"] != "forward":
                continue
            measured = row["latency"][args.statistic]
            if row["kernels_us"] / 1e3 >= 0.5 * measured:
                continue
            zoo = by_name(row["model"])
            inputs = zoo.make_input(row["batch"], torch.device("meta"), DTYPES[row["dtype"]])
            predicted = ModuleProfiler().predict(zoo.build(), inputs, host=plain,
                                                 dtype=row["dtype"])
            assert predicted.predicted_host_ms is not None
            rows_a.append(predicted.predicted_host_ms)
            rows_b.append(measured)
            print(f"{row['model']:>10} b{row['batch']:<3} {row['dtype']}: measured "
                  f"{measured:6.2f} ms, calibrated host {predicted.predicted_host_ms:6.2f} ms")
    host, measured_ms = np.array(rows_a), np.array(rows_b)
    factor = float((host * measured_ms).sum() / (host * host).sum())
    print(f"fitted on {', '.join(names)} ({len(rows_b)} host-bound forwards, "
          f"{args.statistic}): factor {factor:.3f}")


if __name__ == "__main__":
    main()
