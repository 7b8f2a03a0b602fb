"""Convolutions timed with their operands in the L2 cache (the calibration's loop: the same
tensors every call) and cold (each call on another copy of its tensors, from a pool far larger
than the cache, as a training step's backward reads activations saved long before), on this CUDA
device; the shapes of the training steps' heaviest convolution backwards of a truth file, and
with ``--tables`` every convolution row of a calibration, re-measured cold.

    PYTHONPATH=. python3 benchmarks/prediction/cold_conv_probe.py \\
        benchmarks/prediction/cold_conv_probe_shapes.json --out probe.json \\
        [--tables moduleprofiler/prediction/calibrations/h200.json]
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from moduleprofiler.devices import tf32_math
from moduleprofiler.prediction.calibrate import _TORCH_DTYPE, COLD_POOL_BYTES, _Sweep
from moduleprofiler.prediction.calibrate_kernels import conv_bench


def cold_conv_bench(shape: list[int], device: torch.device, dtype: torch.dtype,
                    backward: bool) -> Any:
    """:func:`conv_bench` on a new copy of its tensors each call (copies of together at least
    :data:`COLD_POOL_BYTES`, so a copy is long gone from the cache when its turn comes)."""
    n, cin, cout, h, kernel, stride, groups, channels_last = shape
    pad = kernel // 2 if stride < kernel else 0
    out = (h + 2 * pad - kernel) // stride + 1
    size = torch.tensor([], dtype=dtype).element_size()
    one = size * (n * cin * h * h + cout * (cin // groups) * kernel ** 2 + 2 * n * cout * out * out)
    copies = min(64, max(5, -(-COLD_POOL_BYTES // max(one, 1))))
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    xs = [torch.randn(n, cin, h, h, device=device, dtype=dtype).to(memory_format=fmt)
          .requires_grad_(backward) for _ in range(copies)]
    ws = [torch.randn(cout, cin // groups, kernel, kernel, device=device, dtype=dtype,
                      requires_grad=backward) for _ in range(copies)]
    turn = itertools.cycle(range(copies))
    if not backward:
        def forward() -> Any:
            i = next(turn)
            return F.conv2d(xs[i], ws[i], None, stride, pad, 1, groups)
        return forward
    ys = [F.conv2d(x, w, None, stride, pad, 1, groups) for x, w in zip(xs, ws)]
    grads = [torch.randn_like(y) for y in ys]

    def step() -> Any:
        i = next(turn)
        return torch.autograd.grad(ys[i], (xs[i], ws[i]), grads[i], retain_graph=True)
    return step


def warm(shape: list[int], device: torch.device, dtype: torch.dtype, backward: bool) -> Any:
    return conv_bench(tuple(shape), device, dtype, backward)  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("shapes")
    parser.add_argument("--out", required=True)
    parser.add_argument("--tables", default=None)
    args = parser.parse_args()
    device = torch.device("cuda")
    began = time.perf_counter()
    probes = json.loads(Path(args.shapes).read_text())
    found: dict[str, Any] = {"device_name": torch.cuda.get_device_name(device),
                             "torch": torch.__version__, "probe": [], "tables": {}}
    with tf32_math(True):
        sweep = _Sweep(device, 3)
        for dtype, shape, _in_model, _model in probes:
            variants = [shape] + ([[*shape[:7], 1]] if shape[6] == shape[1] and shape[4] == 7
                                  else [])
            for s in variants:
                for backward in (False, True):
                    for name, bench in (("warm", warm), ("cold", cold_conv_bench)):
                        sweep.add(f"{dtype}:{s}:{backward}:{name}", functools.partial(
                            bench, s, device, _TORCH_DTYPE[dtype], backward))
        times = sweep.run()
        for dtype, shape, in_model, model in probes:
            variants = [shape] + ([[*shape[:7], 1]] if shape[6] == shape[1] and shape[4] == 7
                                  else [])
            for s in variants:
                found["probe"].append({"dtype": dtype, "shape": s, "model": model,
                                       "in_model_backward_us": in_model, **{
                    f"{'backward' if b else 'forward'}_{name}_us": times[f"{dtype}:{s}:{b}:{name}"]
                    for b in (False, True) for name in ("warm", "cold")}})
        print(f"probe: {len(found['probe'])} shapes, {time.perf_counter() - began:.1f} s",
              flush=True)
        Path(args.out).write_text(json.dumps(found), encoding="utf-8")
        if args.tables:
            tables = json.loads(Path(args.tables).read_text())["tables"]
            # a backward reads activations saved long before: its rows cold
            for dtype in ("fp32", "bf16"):
                rows = tables[dtype]["conv_backward"]
                for row in rows:
                    sweep.add(f"row:{_shape(row)}", functools.partial(
                        cold_conv_bench, _shape(row), device, _TORCH_DTYPE[dtype], True))
                times = sweep.run()
                found["tables"][dtype] = {"conv_backward": [
                    [*row[:-1], times[f"row:{_shape(row)}"]] for row in rows]}
                torch.cuda.empty_cache()
                print(dtype, len(rows), f"{time.perf_counter() - began:.1f} s", flush=True)
                Path(args.out).write_text(json.dumps(found), encoding="utf-8")


def _shape(row: list[float]) -> list[int]:
    """A convolution row's shape, eight entries (channels-first where the row is older)."""
    return [int(v) for v in row[:7]] + [int(row[7]) if len(row) > 8 else 0]

if __name__ == "__main__":
    main()
