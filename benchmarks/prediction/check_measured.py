"""On a CUDA machine: ``time_modules`` (the kernel clock) against ``predict`` on the same GPU,
module by module, and ``predict(measured=...)`` from that GPU to itself (every scale factor is
then 1: the scaled times must equal the measured ones). Prints the median |error| per module,
the wall time of ``time_modules``, and saves the comparison figure.

    PYTHONPATH=. python3 benchmarks/prediction/check_measured.py --out DIR
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import pandas as pd
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import DTYPES, by_name

from moduleprofiler import ModuleProfiler
from moduleprofiler.efficiency.peaks import match_device
from moduleprofiler.prediction import plot_prediction


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_float32_matmul_precision("high")
    device = torch.device("cuda")
    table_name = match_device(torch.cuda.get_device_name(device)) or "H100 SXM"
    for name, batch, dtype in (("resnet50", 32, "bf16"), ("vit_b_16", 32, "bf16"),
                               ("gpt2", 8, "fp32")):
        zoo = by_name(name)
        model = zoo.build().to(device=device, dtype=DTYPES[dtype]).eval()
        inputs = zoo.make_input(batch, device, DTYPES[dtype])
        profiler = ModuleProfiler()
        began = time.perf_counter()
        timing = profiler.time_modules(model, inputs)
        wall = time.perf_counter() - began
        predicted = profiler.predict(model.cpu(), zoo.make_input(batch, torch.device("cpu"),
                                                                  DTYPES[dtype]),
                                     device=table_name, host="calibrated", dtype=dtype,
                                     measured=timing, measured_on=table_name)
        frame = predicted.to_df("module")
        total = frame["device_ms"].max()
        shown = frame[frame["device_ms"] >= 0.05 * total]
        errors = [abs(p / m - 1) for p, m in zip(shown["predicted_device_ms"],
                                                  shown["device_ms"])]
        same = [abs(s / m - 1) for s, m in zip(frame["scaled_device_ms"], frame["device_ms"])
                if not (pd.isna(m) or pd.isna(s)) and m > 0]
        print(f"{name} b{batch} {dtype}: time_modules {wall:.1f} s; per module (>= 5 % of "
              f"device time) median |predicted/measured - 1| {100 * statistics.median(errors):.1f} "
              f"% over {len(errors)}; scaled to the same GPU: max |scaled/measured - 1| "
              f"{max(same):.2e} over {len(same)} modules", flush=True)
        plot_prediction(predicted, path=Path(args.out) / f"prediction_{name}.png")


if __name__ == "__main__":
    main()
