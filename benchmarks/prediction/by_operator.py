"""Where a configuration's device-time error comes from: the measured kernel time of each aten
operator (a ground-truth file of ``measure.py``, CUPTI) beside the time the model predicts for
it, both summed by operator name. CPU only.

    python benchmarks/prediction/by_operator.py \\
        benchmarks/results/prediction/truth_h200_run1.jsonl llama_8x1024 8 bf16 --device H200
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from evaluate import read
from models import DTYPES, by_name

from moduleprofiler import Profiler
from moduleprofiler.call import Call
from moduleprofiler.prediction.meta_copy import FusedAttentionOnMeta, meta_copy
from moduleprofiler.prediction.op_classes import classify
from moduleprofiler.prediction.predict import resolve_device
from moduleprofiler.runner import Listener


class ByOperator(Listener):
    """Predicted device µs and calls by aten operator name and calibration table."""

    def __init__(self, device: str) -> None:
        # measure.py ran fp32 with TF32 on
        self.model = dataclasses.replace(resolve_device(device)[0], matmul_tf32=True,
                                         conv_tf32=True)
        self.us: collections.Counter[str] = collections.Counter()
        self.tables: dict[str, str | None] = {}

    def observe(self, module: Any) -> bool:
        return True

    def operator(self, call: Call | None, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        work = classify(func, args, kwargs, out)
        name = work.name.replace("aten.", "aten::")
        self.us[name] += self.model.op_us(work) or 0.0
        self.tables[name] = work.table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("truth")
    parser.add_argument("model")
    parser.add_argument("batch", type=int)
    parser.add_argument("dtype")
    parser.add_argument("--device", default="H100 SXM")
    args = parser.parse_args()
    row = next(r for r in read(args.truth) if r.get("model") == args.model
               and r["batch"] == args.batch and r["dtype"] == args.dtype
               and r["pass"] == "forward")
    measured: collections.Counter[str] = collections.Counter()
    for name, _shapes, _count, device_us, _cpu_us in row["operators"]:
        measured[name] += device_us
    zoo = by_name(args.model)
    model = meta_copy(zoo.build(), DTYPES[args.dtype])
    listener = ByOperator(args.device)

    def fused(*inputs: Any, **kwargs: Any) -> Any:
        with FusedAttentionOnMeta():
            return model(*inputs, **kwargs)
    Profiler().profile(model, zoo.make_input(args.batch, torch.device("meta"),
                                             DTYPES[args.dtype]),
                       pred_fn=fused, listeners=[listener])
    print(f"{args.model} batch {args.batch} {args.dtype} forward on {args.device}: kernels "
          f"{row['kernels_us']:.1f} us measured, {sum(listener.us.values()):.1f} us predicted")
    print(f"{'operator':<48} {'measured us':>11} {'predicted us':>12}  table")
    for name in sorted(set(measured) | set(listener.us),
                       key=lambda n: -max(measured[n], listener.us[n])):
        if measured[name] > 0 or listener.us[name] > 0:
            print(f"{name:<48} {measured[name]:11.1f} {listener.us[name]:12.1f}  "
                  f"{listener.tables.get(name) or ''}")


if __name__ == "__main__":
    main()
