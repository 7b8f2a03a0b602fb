"""Where a training step's device-time error comes from: per aten operator, the measured kernel
time of the hook-free training steps of a ground-truth file (``measure.py``, CUPTI) beside the
time the model predicts for it, forward and backward operators of one name summed (the truth
does not tell the phases apart), per configuration and over every training configuration of
the file. CPU only.

    python benchmarks/prediction/train_by_operator.py \\
        benchmarks/results/prediction/truth_h200_run1.jsonl --device H200 [--only resnet50]
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from by_operator import ByOperator
from evaluate import read
from models import DTYPES, by_name

from moduleprofiler import Profiler
from moduleprofiler.call import Call
from moduleprofiler.prediction.backward_classes import step_work
from moduleprofiler.prediction.meta_copy import FusedAttentionOnMeta, meta_copy

_FAMILIES = {
    "convolution": ("cudnn_convolution", "convolution", "_convolution", "_conv_depthwise2d"),
    "batch_norm": ("cudnn_batch_norm", "native_batch_norm", "_native_batch_norm_legit",
                   "_native_batch_norm_legit_functional"),
    "batch_norm_backward": ("cudnn_batch_norm_backward", "native_batch_norm_backward"),
    "relu": ("relu", "relu_", "clamp_min", "clamp_min_"),
    "add": ("add", "add_"),
    "copy/fill": ("clone", "copy_", "_to_copy", "contiguous", "fill_", "zero_", "zeros",
                  "new_zeros", "ones_like", "zeros_like", "select_backward", "slice_backward"),
    "dropout": ("native_dropout", "bernoulli_"),
    "attention": ("_efficient_attention_forward", "_scaled_dot_product_efficient_attention",
                  "_cudnn_attention_forward", "_scaled_dot_product_cudnn_attention",
                  "_flash_attention_forward", "_scaled_dot_product_flash_attention"),
    "attention_backward": ("_efficient_attention_backward", "_cudnn_attention_backward",
                           "_flash_attention_backward",
                           "_scaled_dot_product_efficient_attention_backward",
                           "_scaled_dot_product_cudnn_attention_backward",
                           "_scaled_dot_product_flash_attention_backward"),
}
FAMILY = {f"aten::{name}": family for family, names in _FAMILIES.items() for name in names}
"""Operator names that a CUDA run and the meta pass book the same kernels under (the device
runs the inner operator, ``cudnn_convolution`` for ``convolution``, the meta pass sees the
outer one; autograd adds gradients in place on the device, out of place on meta), mapped to
one name."""


def family(name: str) -> str:
    """The name ``name``'s kernels are compared under."""
    return FAMILY.get(name, name)


class TrainByOperator(ByOperator):
    """:class:`ByOperator` over the backward operators too, by :func:`family`; the backward's
    own tables apart (``phase``: the backward operators' predicted µs by family)."""

    def __init__(self, device: str) -> None:
        super().__init__(device)
        self.backward_us: collections.Counter[str] = collections.Counter()

    def operator(self, call: Call | None, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        self._add(func, args, kwargs, out, False)

    def backward_operator(self, owner: Call | None, func: Any, args: Any, kwargs: Any,
                          out: Any) -> None:
        self._add(func, args, kwargs, out, True)

    def _add(self, func: Any, args: Any, kwargs: Any, out: Any, backward: bool) -> None:
        work = step_work(func, args, kwargs, out, backward)
        name = family(work.name.replace("aten.", "aten::"))
        us = self.model.op_us(work) or 0.0
        self.us[name] += us
        if backward:
            self.backward_us[name] += us
        tables = self.tables.get(name)
        if work.table and (tables is None or work.table not in tables):
            self.tables[name] = f"{tables}+{work.table}" if tables else work.table


def predicted_by_operator(row: dict[str, Any], device: str) -> TrainByOperator:
    """The predicted device µs by operator name of the training step of ``row``."""
    zoo = by_name(row["model"])
    dtype = DTYPES[row["dtype"]]
    model = meta_copy(zoo.build(), dtype)
    listener = TrainByOperator(device)

    def fused(*inputs: Any, **kwargs: Any) -> Any:
        with FusedAttentionOnMeta():
            return model(*inputs, **kwargs)
    inputs = zoo.make_input(row["batch"], torch.device("meta"), dtype)
    Profiler().profile(model, inputs, pred_fn=fused, backward=True, loss_fn=zoo.loss,
                       eval=False, listeners=[listener])
    return listener


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("truth")
    parser.add_argument("--device", default="H100 SXM")
    parser.add_argument("--only", default=None, help="comma-separated model names")
    parser.add_argument("--top", type=int, default=12, help="operators shown per configuration")
    args = parser.parse_args()
    rows = [r for r in read(args.truth) if r.get("pass") == "train" and "error" not in r
            and (not args.only or r["model"] in args.only.split(","))]
    overall_measured: collections.Counter[str] = collections.Counter()
    overall_predicted: collections.Counter[str] = collections.Counter()
    errors = []
    for row in rows:
        measured: collections.Counter[str] = collections.Counter()
        for name, _shapes, _count, device_us, _cpu_us in row["operators"]:
            measured[family(name)] += device_us
        listener = predicted_by_operator(row, args.device)
        predicted = listener.us
        total = sum(predicted.values())
        errors.append((total - row["kernels_us"]) / row["kernels_us"])
        print(f"\n{row['model']} batch {row['batch']} {row['dtype']} training step on "
              f"{args.device}: kernels {row['kernels_us']:.1f} us measured, {total:.1f} us "
              f"predicted ({100 * errors[-1]:+.1f} %)")
        print(f"  {'operator':<46} {'measured us':>11} {'predicted us':>12} {'error':>7}  table")
        names = sorted(set(measured) | set(predicted),
                       key=lambda n: -abs(measured[n] - predicted[n]))
        for name in names[:args.top]:
            share = f"{100 * (predicted[name] / measured[name] - 1):+6.0f}%" \
                if measured[name] > 0 else "    new"
            print(f"  {name:<46} {measured[name]:11.1f} {predicted[name]:12.1f} {share}  "
                  f"{listener.tables.get(name) or ''}")
        overall_measured.update(measured)
        overall_predicted.update(predicted)
    print(f"\nover {len(rows)} training steps (signed error of the step's device time: "
          + ", ".join(f"{100 * e:+.0f}" for e in errors) + " %)")
    print(f"  {'operator':<46} {'measured us':>11} {'predicted us':>12} {'error':>7}")
    names = sorted(set(overall_measured) | set(overall_predicted),
                   key=lambda n: -abs(overall_measured[n] - overall_predicted[n]))
    for name in names[:30]:
        m, p = overall_measured[name], overall_predicted[name]
        share = f"{100 * (p / m - 1):+6.0f}%" if m > 0 else "    new"
        print(f"  {name:<46} {m:11.1f} {p:12.1f} {share}")


if __name__ == "__main__":
    main()
