"""Which kernels run for the operator classes the prediction prices by rule, and how long each
takes on synthetic shapes (torch.profiler, CUDA): batch norm in inference with and without an
affine weight (cuDNN's kernel, or PyTorch's copy of the running mean, its inverse standard
deviation and its elementwise kernel), a convolution with a bias (cuDNN's kernel, then an
addition), a depthwise one with a bias (PyTorch's own kernel) and grouped convolutions of group
width 24.

    PYTHONPATH=. python3 benchmarks/prediction/kernel_names.py --out kernel_names.txt
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile


def _benches(device: torch.device, dtype: torch.dtype) -> dict[str, Callable[[], Any]]:
    def images(n: int, c: int, side: int) -> torch.Tensor:
        return torch.randn(n, c, side, side, device=device, dtype=dtype)

    def vector(c: int, fill: float = 0.0) -> torch.Tensor:
        return torch.full((c,), fill, device=device, dtype=dtype)

    x = images(8, 336, 14)
    mean, var, weight, bias = vector(336), vector(336, 1.0), vector(336, 1.0), vector(336)
    benches: dict[str, Callable[[], Any]] = {
        "batch_norm no affine [8,336,14,14]": lambda: F.batch_norm(x, mean, var,
                                                                  training=False),
        "batch_norm affine [8,336,14,14]": lambda: F.batch_norm(x, mean, var, weight, bias,
                                                               training=False),
    }
    small = images(1, 64, 56)
    m64, v64, w64, b64 = vector(64), vector(64, 1.0), vector(64, 1.0), vector(64)
    benches["batch_norm affine [1,64,56,56]"] = lambda: F.batch_norm(small, m64, v64, w64, b64,
                                                                    training=False)
    conv_w = torch.randn(96, 336, 1, 1, device=device, dtype=dtype)
    conv_b = torch.randn(96, device=device, dtype=dtype)
    benches["conv 1x1 336->96 with bias [8,336,14,14]"] = lambda: F.conv2d(x, conv_w, conv_b)
    dw_w = torch.randn(336, 1, 3, 3, device=device, dtype=dtype)
    benches["depthwise 3x3 with bias [8,336,14,14]"] = lambda: F.conv2d(x, dw_w, bias, 1, 1,
                                                                        1, 336)
    cl = x.to(memory_format=torch.channels_last)
    benches["depthwise 3x3 with bias, channels-last"] = lambda: F.conv2d(cl, dw_w, bias, 1, 1,
                                                                         1, 336)
    for groups in (14, 16):
        width = 336 // groups
        w = torch.randn(336, width, 3, 3, device=device, dtype=dtype)
        benches[f"grouped 3x3 width {width} x {groups} [8,336,14,14]"] = \
            lambda w=w, groups=groups: F.conv2d(x, w, None, 1, 1, 1, groups)
    return benches


def kernels_of(bench: Callable[[], Any], repeats: int = 5) -> list[tuple[str, float]]:
    """The CUDA kernels of one call of ``bench`` and their mean microseconds over
    ``repeats`` calls (after a warm-up)."""
    for _ in range(3):
        bench()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            bench()
        torch.cuda.synchronize()
    found: dict[str, list[float]] = {}
    for event in prof.events():
        if event.device_type.name == "CUDA":
            found.setdefault(event.name, []).append(event.device_time)
    return [(name, sum(times) / repeats) for name, times in found.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    device = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    lines = [f"# {torch.cuda.get_device_name(device)}, torch {torch.__version__}"]
    for dtype in (torch.float32, torch.bfloat16):
        for label, bench in _benches(device, dtype).items():
            lines.append(f"{str(dtype).removeprefix('torch.')} {label}:")
            for name, us in kernels_of(bench):
                lines.append(f"    {us:8.2f} us  {name[:110]}")
    Path(args.out).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
