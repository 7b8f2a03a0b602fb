"""Recurrent layers on a GPU: what cuDNN runs against what ``predict`` says.

For each recurrent model below (an ``nn.LSTM``, ``nn.GRU`` or ``nn.RNN`` alone, one sequence
batch), on the GPU this runs on:

* the kernels of one forward, from ``torch.profiler``: how many, on how many streams, the five
  most frequent names, their summed time and the span from the first kernel's start to the
  last one's end;
* the forward's device time per call (CUDA events around 50 calls after warm-up, divided) and
  its host time (the CPU time of one call, without synchronising, median of 30);
* a training step's kernel time (forward and backward, ``torch.profiler``);
* ``Profiler().predict`` of the forward and of the training step for this GPU, device and
  host milliseconds, and their ratios to the measured ones.

The ``design`` and ``held-out`` rows were measured first (with the operator-by-operator
prediction, then with cuDNN's kernels priced): all eight set the host costs
(``rnn_kernels.CALL_SHARE`` ...) and the persistent-kernel rule; the ``new`` rows were added
after, to see the pricing on layers it was not fitted to. The persistent kernels' time per
step (``rnn_kernels.PERSISTENT_STEP_US``) was measured by ``gpu_rnn_persistent.py`` on
single-layer, single-direction layers over 64 steps; the three persistent rows here (two
layers, both directions, other steps and sizes) are not among them.

    PYTHONPATH=. python3 benchmarks/gpu_rnn_probe.py
"""

from __future__ import annotations

import statistics
import sys
import time
import warnings
from collections import Counter
from functools import partial
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere

from moduleprofiler import Profiler


class Last(nn.Module):
    """A recurrent layer whose output sequence is returned alone."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)[0]


def cases() -> list[tuple[str, str, nn.Module, tuple[int, ...], torch.dtype]]:
    """(set, name, layer, input shape (batch first), dtype)."""
    return [
        ("design", "LSTM 64-128 x2 bi, b4 t32", nn.LSTM(64, 128, 2, batch_first=True,
                                                       bidirectional=True), (4, 32, 64),
         torch.float32),
        ("design", "LSTM 256-256, b8 t64", nn.LSTM(256, 256, batch_first=True), (8, 64, 256),
         torch.float32),
        ("design", "GRU 128-256 bi, b16 t50", nn.GRU(128, 256, batch_first=True,
                                                    bidirectional=True), (16, 50, 128),
         torch.float32),
        ("held-out", "LSTM 512-512 x2, b32 t128", nn.LSTM(512, 512, 2, batch_first=True),
         (32, 128, 512), torch.float32),
        ("held-out", "LSTM 1024-1024 bf16, b64 t32", nn.LSTM(1024, 1024, batch_first=True),
         (64, 32, 1024), torch.bfloat16),
        ("held-out", "RNN tanh 32-64, b1 t100", nn.RNN(32, 64, batch_first=True), (1, 100, 32),
         torch.float32),
        ("held-out", "GRU 256-512 x3, b8 t256", nn.GRU(256, 512, 3, batch_first=True),
         (8, 256, 256), torch.float32),
        ("held-out", "LSTM 128-256 proj 64, b16 t40", nn.LSTM(128, 256, batch_first=True,
                                                             proj_size=64), (16, 40, 128),
         torch.float32),
        ("new", "LSTM 300-400, b24 t80", nn.LSTM(300, 400, batch_first=True), (24, 80, 300),
         torch.float32),
        ("new", "GRU 64-96 x2 bi, b2 t20", nn.GRU(64, 96, 2, batch_first=True,
                                                 bidirectional=True), (2, 20, 64),
         torch.float32),
        ("new", "LSTM 512-768 bf16, b16 t100", nn.LSTM(512, 768, batch_first=True),
         (16, 100, 512), torch.bfloat16),
        ("new", "RNN relu 128-512, b32 t60", nn.RNN(128, 512, nonlinearity="relu",
                                                   batch_first=True), (32, 60, 128),
         torch.float32),
    ]


def _events_ms(fn: object, calls: int) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(calls):
        fn()  # type: ignore[operator]
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / calls


def _host_ms(fn: object, calls: int) -> float:
    times = []
    for _ in range(calls):
        torch.cuda.synchronize()
        begin = time.thread_time()
        fn()  # type: ignore[operator]
        times.append((time.thread_time() - begin) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(times)


def _kernels(fn: object) -> tuple[float, str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()  # type: ignore[operator]
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    if not kernels:
        return float("nan"), "no kernels seen"
    names = Counter(e.name[:48] for e in kernels)
    streams = {getattr(e, "device_resource_id", 0) for e in kernels}
    busy = sum(e.device_time for e in kernels) / 1e3
    span = (max(e.time_range.end for e in kernels) - min(e.time_range.start for e in kernels))
    return busy, (f"{len(kernels)} kernels on {len(streams)} streams, busy {busy:.3f} ms, span "
            f"{span / 1e3:.3f} ms; " + "; ".join(f"{n} x{c}" for n, c in names.most_common(5)))


def _forward(model: nn.Module, x: torch.Tensor) -> None:
    model(x)


def _step(model: nn.Module, x: torch.Tensor) -> None:
    model(x).float().sum().backward()


def main() -> None:
    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    device = torch.cuda.get_device_name()
    profiler = Profiler()
    print(f"# {device}, torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}")
    print("fwd: the forward's kernel time (busy); wall: CUDA events per call over 50 calls; "
          "host: the forward's CPU time; step: a training step's kernel time; pred: "
          "predict()'s device (fwd, step) and host times; x: pred / measured")
    print(f"{'set':8} {'case':32} {'fwd ms':>8} {'pred':>7} {'x':>5} {'wall ms':>8} "
          f"{'host ms':>8} {'pred':>7} {'x':>5} {'step ms':>8} {'pred':>7} {'x':>5}")
    for kind, name, layer, shape, dtype in cases():
        model = Last(layer).cuda().to(dtype)
        x = torch.randn(shape, device="cuda", dtype=dtype)
        forward = partial(_forward, model, x)
        step = partial(_step, model, x)
        with torch.no_grad():
            for _ in range(5):
                forward()
            fwd = _events_ms(forward, 50)
            host = _host_ms(forward, 30)
            busy, kernels = _kernels(forward)
        for _ in range(3):
            step()
        train_busy, train_kernels = _kernels(step)
        model.zero_grad(set_to_none=True)
        cpu_model = Last(layer).to(dtype)  # the same layer: predict copies it to meta
        pred = profiler.predict(cpu_model, x.cpu(), device=device)
        pred_train = profiler.predict(cpu_model, x.cpu(), device=device, backward=True)
        p_dev, p_host = pred.predicted_device_ms, pred.predicted_host_ms or float("nan")
        p_step = pred_train.predicted_device_ms
        print(f"{kind:8} {name:32} {busy:8.3f} {p_dev:7.3f} {p_dev / busy:5.2f} {fwd:8.3f} "
              f"{host:8.3f} {p_host:7.3f} {p_host / host:5.2f} {train_busy:8.3f} "
              f"{p_step:7.3f} {p_step / train_busy:5.2f}")
        print(f"         forward: {kernels}")
        print(f"         step: {train_kernels}")


if __name__ == "__main__":
    main()
