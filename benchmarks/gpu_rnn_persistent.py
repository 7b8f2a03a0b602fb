"""When cuDNN runs a recurrent layer on persistent kernels, and what one step costs there.

For each mode (LSTM, GRU, RNN with tanh), hidden size, batch and dtype below, one layer in one
direction over 64 steps (input size = hidden size) runs once under ``torch.profiler``; the
script prints whether a persistent kernel ran (a kernel named ``...Persist...``), its time and
its time per step, and otherwise the per-step kernels' summed time per step.

With ``--backward`` it runs a training step's backward instead (float32, where the persistent
kernels run): every kernel of one backward of an LSTM of hidden size 128 by name, then per
layer the backward's persistent kernels' time per step.

    PYTHONPATH=. python3 benchmarks/gpu_rnn_persistent.py [--backward]
"""

from __future__ import annotations

import itertools
import sys

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

STEPS = 64


def _kernels(layer: nn.Module, x: torch.Tensor) -> list[tuple[str, float]]:
    with torch.no_grad():
        for _ in range(3):
            layer(x)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            layer(x)
            torch.cuda.synchronize()
    return [(e.name, e.device_time) for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.CUDA]


def _backward_kernels(layer: nn.Module, x: torch.Tensor) -> list[tuple[str, float]]:
    """The kernels of one backward of ``layer(x)`` (the forward run outside the profiler)."""
    for _ in range(3):
        layer(x)[0].sum().backward()
    torch.cuda.synchronize()
    out = layer(x)[0].sum()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        out.backward()
        torch.cuda.synchronize()
    return [(e.name, e.device_time) for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.CUDA]


def backward_main() -> None:
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"cuDNN {torch.backends.cudnn.version()}; one layer, {STEPS} steps, float32, backward")
    layer = nn.LSTM(128, 128, batch_first=True).cuda()
    x = torch.randn(8, STEPS, 128, device="cuda", requires_grad=True)
    names: dict[str, list[float]] = {}
    for name, us in _backward_kernels(layer, x):
        names.setdefault(name[:90], []).append(us)
    print("LSTM 128, batch 8: every kernel of the backward")
    for name, times in sorted(names.items(), key=lambda item: -sum(item[1])):
        print(f"  {len(times):4} x {sum(times) / len(times):8.2f} us = {sum(times):8.1f}  {name}")
    print(f"{'mode':5} {'hidden':>6} {'batch':>5} {'persist us':>10} {'us/step':>8} "
          f"{'all us':>8}")
    modes = {"LSTM": nn.LSTM, "GRU": nn.GRU, "RNN": nn.RNN}
    for (mode, cls), hidden, batch in itertools.product(modes.items(), (32, 64, 128, 192),
                                                        (1, 8, 64)):
        layer = cls(hidden, hidden, batch_first=True).cuda()
        x = torch.randn(batch, STEPS, hidden, device="cuda", requires_grad=True)
        kernels = _backward_kernels(layer, x)
        persistent = sum(us for name, us in kernels if "Persist" in name)
        total = sum(us for _, us in kernels)
        print(f"{mode:5} {hidden:6} {batch:5} {persistent:10.1f} {persistent / STEPS:8.2f} "
              f"{total:8.1f}")


def main() -> None:
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"cuDNN {torch.backends.cudnn.version()}; one layer, {STEPS} steps")
    print(f"{'mode':5} {'dtype':5} {'hidden':>6} {'batch':>5} {'persistent':>10} "
          f"{'kernel us':>9} {'us/step':>8} {'all us':>8}")
    modes = {"LSTM": nn.LSTM, "GRU": nn.GRU, "RNN": nn.RNN}
    for (mode, cls), dtype, hidden, batch in itertools.product(
            modes.items(), (torch.float32, torch.bfloat16), (32, 64, 128, 192, 256),
            (1, 8, 64, 256)):
        layer = cls(hidden, hidden, batch_first=True).cuda().to(dtype)
        x = torch.randn(batch, STEPS, hidden, device="cuda", dtype=dtype)
        kernels = _kernels(layer, x)
        persistent = [us for name, us in kernels if "Persist" in name]
        total = sum(us for _, us in kernels)
        if persistent:
            own = sum(persistent)
            print(f"{mode:5} {str(dtype)[6:]:5} {hidden:6} {batch:5} {'yes':>10} "
                  f"{own:9.1f} {own / STEPS:8.2f} {total:8.1f}")
        else:
            print(f"{mode:5} {str(dtype)[6:]:5} {hidden:6} {batch:5} {'no':>10} "
                  f"{'':9} {total / STEPS:8.2f} {total:8.1f}")


if __name__ == "__main__":
    backward_main() if "--backward" in sys.argv else main()
