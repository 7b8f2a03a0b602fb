"""Ground truth for the prediction proof, measured on a CUDA machine: per zoo configuration the
hook-free latency, the device time per module and per aten operator (the device's own kernel
records), and ``RuntimeEstimator``'s roofline estimate. One JSON line per configuration.

    PYTHONPATH=. python3 benchmarks/prediction/measure.py --out truth.jsonl [--quick]
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import BATCHES, DTYPES, TRAIN_BATCHES, TRAINED, ZOO, ZooModel, by_name

from moduleprofiler.timing.booking import book
from moduleprofiler.timing.device_trace import close_range, open_range, records_of


def _call(model: nn.Module, inputs: Any) -> Any:
    return model(**inputs) if isinstance(inputs, dict) else model(inputs)


def hook_free_latency(step: Any, device: torch.device, seconds: float = 1.0) -> dict[str, float]:
    """Median and minimum wall time of ``step()`` from a synchronised start to a synchronised
    end, over at least 10 iterations (or ``seconds``), after a warm-up."""
    for _ in range(3):
        step()
    _sync(device)
    samples: list[float] = []
    began = time.perf_counter()
    while len(samples) < 10 or (time.perf_counter() - began < seconds and len(samples) < 200):
        _sync(device)
        start = time.perf_counter()
        step()
        _sync(device)
        samples.append((time.perf_counter() - start) * 1e3)
    return {"median_ms": statistics.median(samples), "min_ms": min(samples),
            "iterations": len(samples)}


class ModuleRanges:
    """A kernel-clock range per module call (hooks on every module), labelled by path."""

    def __init__(self, model: nn.Module) -> None:
        self.handles = []
        self.open: list[Any] = []
        for path, module in model.named_modules():
            self.handles.append(module.register_forward_pre_hook(self._pre(path)))
            self.handles.append(module.register_forward_hook(self._post, always_call=True))

    def _pre(self, path: str) -> Any:
        def hook(module: nn.Module, args: Any) -> None:
            self.open.append(open_range(path or "<root>"))
        return hook

    def _post(self, module: nn.Module, args: Any, output: Any) -> None:
        close_range(self.open.pop())

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def traced(step: Any, model: nn.Module, device: torch.device, iterations: int = 3,
           ranges: bool = True) -> dict[str, Any]:
    """Device time per module (own, in µs per iteration) and per aten operator (self device
    µs, host µs, calls per iteration, keyed by name and input shapes), from one profiler
    session of ``iterations`` steps (after one untraced step)."""
    step()
    hooks = ModuleRanges(model) if ranges else None
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    try:
        with torch.profiler.profile(activities=activities, record_shapes=True) as prof:
            for _ in range(iterations):
                step()
            _sync(device)
    finally:
        if hooks is not None:
            hooks.remove()
    records = records_of(prof.profiler.kineto_results.events())
    booking = book(records.ranges, records.launches, records.activities)
    own = {label: booking.own_ns(label) / 1e3 / iterations for label in booking.own}
    kernels_us = sum(a.duration for a in records.activities) / 1e3 / iterations
    operators = []
    for event in prof.key_averages(group_by_input_shape=True):
        if event.key.startswith("moduleprofiler:") or not event.key.startswith("aten::"):
            continue
        operators.append([event.key, str(event.input_shapes), event.count / iterations,
                          event.self_device_time_total / iterations,
                          event.self_cpu_time_total / iterations])
    return {"own_device_us": own, "outside_us": sum(a.duration for a in booking.outside) / 1e3
            / iterations, "kernels_us": kernels_us, "operators": operators}


def roofline_estimate(zoo: ZooModel, batch: int, device: torch.device, dtype: torch.dtype,
                      train: bool) -> float | None:
    """``RuntimeEstimator``'s operator-level roofline estimate of the pass, ms."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.runtime_estimator import RuntimeEstimator
    estimator = RuntimeEstimator()
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)  # built in the dtype: a fake model cannot be converted
    try:
        with FakeTensorMode(), torch.device(device):
            model = zoo.build()
            model.train(train)
            inputs = zoo.make_input(batch, device, dtype)
            with estimator("operator-level-cost-model"):
                if train:
                    zoo.loss(_call(model, inputs)).backward()
                else:
                    with torch.no_grad():
                        _call(model, inputs)
    finally:
        torch.set_default_dtype(default)
    return float(estimator.total_runtime)


def measure(zoo: ZooModel, batch: int, dtype_name: str, train: bool,
            device: torch.device, roofline: bool = True) -> dict[str, Any]:
    dtype = DTYPES[dtype_name]
    model = zoo.build().to(device=device, dtype=dtype)
    model.train(train)
    inputs = zoo.make_input(batch, device, dtype)
    row: dict[str, Any] = {"model": zoo.name, "family": zoo.family, "batch": batch,
                           "dtype": dtype_name, "pass": "train" if train else "forward"}

    if train:
        def step() -> None:
            zoo.loss(_call(model, inputs)).backward()
            for p in model.parameters():
                p.grad = None
    else:
        def step() -> None:
            with torch.no_grad():
                _call(model, inputs)
    row["latency"] = hook_free_latency(step, device)
    # the ranges' hooks cost host time, never device time: one session gives both tables
    trace = traced(step, model, device)
    row["kernels_us"] = trace["kernels_us"]
    row["operators"] = trace["operators"]
    row["modules"] = trace["own_device_us"]
    try:
        if roofline:
            row["roofline_runtime_estimator_ms"] = roofline_estimate(zoo, batch, device, dtype,
                                                                     train)
    except Exception as exc:  # its own limits: reported, not fatal
        row["roofline_runtime_estimator_error"] = f"{type(exc).__name__}: {exc}"[:300]
    del step
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def configurations(quick: bool, trained_only: tuple[str, ...] = ()
                   ) -> list[tuple[ZooModel, int, str, bool]]:
    """The configurations to measure; ``trained_only``: the training steps of these models
    alone."""
    if trained_only:
        return [(by_name(n), b, d, True) for n in trained_only for b in TRAIN_BATCHES
                for d in DTYPES]
    zoo = ZOO[:2] + ZOO[-2:] if quick else ZOO
    found = [(m, b, d, False) for m in zoo for b in ((8,) if quick else BATCHES) for d in DTYPES]
    trained = TRAINED[:1] if quick else TRAINED
    found += [(by_name(n), b, d, True) for n in trained
              for b in (TRAIN_BATCHES[:1] if quick else TRAIN_BATCHES) for d in DTYPES]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", default=None, help="comma-separated model names")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--train-only", default="",
                        help="comma-separated model names: their training steps alone")
    parser.add_argument("--no-roofline", action="store_true",
                        help="skip RuntimeEstimator's estimate")
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.set_float32_matmul_precision("high")  # fp32 runs in TF32, as the calibration
    out = Path(args.out)
    header = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
              "torch": torch.__version__}
    with out.open("a", encoding="utf-8") as sink:
        sink.write(json.dumps({"header": header}) + "\n")
        trained_only = tuple(n for n in args.train_only.split(",") if n)
        for zoo, batch, dtype, train in configurations(args.quick, trained_only):
            if args.only and zoo.name not in args.only.split(","):
                continue
            began = time.perf_counter()
            try:
                row = measure(zoo, batch, dtype, train, device, not args.no_roofline)
            except Exception as exc:
                row = {"model": zoo.name, "batch": batch, "dtype": dtype,
                       "pass": "train" if train else "forward",
                       "error": traceback.format_exception_only(exc)[-1][:500]}
                gc.collect()
            row["seconds"] = round(time.perf_counter() - began, 2)
            sink.write(json.dumps(row) + "\n")
            sink.flush()
            print(row["model"], batch, dtype, row["pass"], row.get("latency"),
                  row.get("error", ""), row["seconds"], flush=True)


if __name__ == "__main__":
    main()
