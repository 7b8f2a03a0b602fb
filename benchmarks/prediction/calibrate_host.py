"""The host part of a calibration measured again, as ``calibrate()`` measures it, on synthetic
modules only (no model of the proof): the tight loops of one operator by class
(``measure_host``), a module call's cost by depth (``host_calls``: leaves at depths 1 to 8)
and the in-model factor (``host_in_model``: three synthetic stacks' fastest forwards against
their host time priced from the loops, times ``MODELS_OVER_STACKS``), written into a copy of
an existing calibration (its device tables untouched), with a report of the samples.

    PYTHONPATH=. python3 benchmarks/prediction/calibrate_host.py --out DIR
        [--calibration moduleprofiler/prediction/calibrations/h200.json] [--device cpu]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from pathlib import Path

import torch

from moduleprofiler.prediction.calibrate import measure_host
from moduleprofiler.prediction.calibration import Calibration
from moduleprofiler.prediction.host_calls import depth_cost, leaf_call_us
from moduleprofiler.prediction.host_in_model import MODELS_OVER_STACKS, factor_of, in_model_samples

SHIPPED = Path("moduleprofiler/prediction/calibrations/h200.json")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--calibration", default=str(SHIPPED))
    parser.add_argument("--device", default="cuda", help="cpu: a dry run of the script")
    args = parser.parse_args()
    cuda = torch.device(args.device)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    calibration = Calibration.load(args.calibration)
    costs = measure_host(cuda)
    by_depth = leaf_call_us()  # a second measurement, for the report
    samples = in_model_samples(cuda, costs)
    stacks_factor = statistics.median(f for values in samples.values() for f in values)
    factor = factor_of(samples)  # as calibrate() records it
    host = dataclasses.replace(costs, in_model=factor)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    dataclasses.replace(calibration, host=host).save(out / Path(args.calibration).name)
    where = calibration.device_name if cuda.type == "cuda" else "cpu dry run"
    lines = [f"# command: PYTHONPATH=. python3 benchmarks/prediction/calibrate_host.py --out $OUT"
             f"   ({where}, torch {torch.__version__}; synthetic modules only)",
             f"host {costs.cpu}: tight-loop µs per call by class (measure_host):"]
    lines += [f"  {name:>18} {us:8.3f}" for name, us in costs.us.items()]
    for dtype, us in costs.us_by_dtype.items():
        lines.append(f"the launch classes' loops on {dtype} tensors (µs per call):")
        lines += [f"  {name:>18} {value:8.3f}" for name, value in us.items()]
    lines.append("module call by depth (leaf calls, µs each; two measurements):")
    for depth, us in by_depth.items():
        lines.append(f"  depth {depth}: {us:6.3f}")
    lines.append(f"  slope per level: measure_host's {costs.us['module_call_depth']:.4f}, "
                 f"this one's {depth_cost(by_depth):.4f} (never below 0)")
    lines.append("in-model factor (fastest of 60 forwards / host priced from the loops):")
    for name, values in samples.items():
        lines.append(f"  {name:>10}: " + ", ".join(f"{v:.3f}" for v in values))
    lines.append(f"  median {stacks_factor:.4f}; times MODELS_OVER_STACKS {MODELS_OVER_STACKS}: "
                 f"{factor}")
    report = "\n".join(lines)
    print(report)
    (out / "calibrate_host_h200.txt").write_text(report + "\n", encoding="utf-8")
    (out / "calibrate_host_h200.json").write_text(json.dumps(
        {"host": dataclasses.asdict(host), "leaf_call_us": by_depth,
         "in_model_samples": samples}, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
