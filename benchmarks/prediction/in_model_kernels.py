"""Does a small kernel take as long inside a chain of other kernels as the calibration's loops
time it? Synthetic shapes only (no model of the proof): each operator of a decoder-like chain
(dtype casts, a row reduction, elementwise operators on a broadcast weight, a layer's product
with its weight read from memory, a layer norm, a softmax) timed three ways from the device's
own kernel records (CUPTI):

* ``alone``: the same operator on the same operands again and again, each call in its own
  range, as ``calibrate()`` times a shape;
* ``chain``: the operators one after another over several layers with their own weights, the
  host issuing them as fast as Python does (the device idles between kernels, as in a
  host-bound forward);
* ``queued``: the same chain issued behind a long sleeping kernel, so its kernels run back to
  back (as in a device-bound forward).

Also the host: microseconds per call of a module call at nesting depths 1 to 4 and of
non-launching operators (views, expands, transposes).

    python benchmarks/prediction/in_model_kernels.py --out DIR
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from moduleprofiler.prediction.in_chain import (
    LAYERS,
    POOL_BYTES,
    REPEATS,
    ROWS,
    booked,
    chain_operators,
    weight_pool,
)
from moduleprofiler.timing.device_trace import (
    RANGE_PREFIX,
    close_range,
    device_trace,
    open_range,
)


def device_part(dtype: torch.dtype) -> dict[str, Any]:
    """The package's chain (``chain_operators``) alone, in the chain and queued."""
    dev = torch.device("cuda")
    pool = weight_pool(dtype, dev)
    flush = torch.empty(POOL_BYTES, device=dev, dtype=torch.uint8)
    result: dict[str, Any] = {}
    for rows in ROWS:
        layers = [chain_operators(rows, dtype, layer, pool, dev) for layer in range(LAYERS)]
        for ops in layers:  # warm-up: algorithm choices, lazy init
            for _, op in ops:
                op()
        torch.cuda.synchronize()
        with device_trace(dev) as records:
            for name, op in layers[0]:  # alone: one operand set, again and again
                for repeat in range(REPEATS):
                    scope = open_range(f"alone:{name}:{repeat}")
                    op()
                    close_range(scope)
            torch.cuda.synchronize()
            for repeat in range(REPEATS):  # chain, host-paced
                flush.zero_()  # the weights and operands out of the L2 cache, as a model's
                torch.cuda.synchronize()
                for layer, ops in enumerate(layers):
                    for name, op in ops:
                        scope = open_range(f"chain:{name}:{repeat}:{layer}")
                        op()
                        close_range(scope)
            torch.cuda.synchronize()
            for repeat in range(REPEATS):  # queued behind a sleeping kernel
                flush.zero_()
                torch.cuda._sleep(50_000_000)
                for layer, ops in enumerate(layers):
                    for name, op in ops:
                        scope = open_range(f"queued:{name}:{repeat}:{layer}")
                        op()
                        close_range(scope)
                torch.cuda.synchronize()
        times = booked(records)
        for mode in ("alone", "chain", "queued"):
            for name, _ in layers[0]:
                samples = [us for label, us in times.items()
                           if label.removeprefix(RANGE_PREFIX).startswith(f"{mode}:{name}:")]
                result[f"{rows}:{mode}:{name}"] = statistics.median(samples)
    return result


class Wrap(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


def host_part() -> dict[str, float]:
    dev = torch.device("cuda")
    x = torch.randn(2, 8, device=dev)
    benches: dict[str, Callable[[], Any]] = {"relu": lambda: torch.relu(x)}
    module: nn.Module = nn.ReLU()
    for depth in range(1, 5):
        called = module
        benches[f"module_depth_{depth}"] = lambda m=called: m(x)  # type: ignore[misc]
        module = Wrap(module)
    benches.update({
        "view": lambda: x.view(8, 2), "reshape": lambda: x.reshape(16),
        "expand": lambda: x[:, None].expand(2, 4, 8), "transpose": lambda: x.transpose(0, 1),
        "unsqueeze": lambda: x.unsqueeze(0), "contiguous_noop": lambda: x.contiguous(),
        "python_getattr": lambda: x.shape[-1],
    })
    result: dict[str, float] = {}
    for name, bench in benches.items():
        for _ in range(50):
            bench()
        samples = []
        for _ in range(15):
            start = time.perf_counter()
            for _ in range(500):
                bench()
            samples.append((time.perf_counter() - start) / 500 * 1e6)
        torch.cuda.synchronize()
        result[name] = statistics.median(samples)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    found: dict[str, Any] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                             "host_us": host_part()}
    for key, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        found[key] = device_part(dtype)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "in_model_kernels_h200.json").write_text(json.dumps(found, indent=1))
    lines = [f"# {found['device']} torch {found['torch']}"]
    for key in ("fp32", "bf16"):
        for rows in ROWS:
            names = sorted({k.split(":")[2] for k in found[key] if k.startswith(f"{rows}:")})
            for name in names:
                alone, chain, queued = (found[key][f"{rows}:{m}:{name}"]
                                        for m in ("alone", "chain", "queued"))
                lines.append(f"{key} rows {rows:5d} {name:<18} alone {alone:7.2f} us  chain "
                             f"{chain:7.2f} ({chain - alone:+.2f})  queued {queued:7.2f} "
                             f"({queued - alone:+.2f})")
    lines += [f"host {name:<18} {us:7.2f} us" for name, us in found["host_us"].items()]
    (out / "in_model_kernels_h200.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
