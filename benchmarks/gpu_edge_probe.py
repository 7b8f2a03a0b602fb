"""GPU edge cases of the kernel clock and the memory pass, on models a user might bring.

Each case runs ``time_modules`` (and where said ``train_step_times`` or ``measure_memory``) and
checks an invariant against an independent figure:

* **side stream**: a block that runs its matmul on a second CUDA stream; its kernels are
  booked to it (the self device times add up to the root's, and the block's device time is at
  least its matmul's kernel time as ``torch.profiler`` reads it, hook-free);
* **host sync**: a block calling ``.item()`` in its forward (the host waits on the device);
* **CUDA graph**: a submodule made with ``torch.cuda.make_graphed_callables``: its graph's
  kernels are booked to the module that replays it;
* **mixed devices**: a model whose embedding lives on the CPU and whose head is on the GPU;
* **input on the wrong device**: the error names the argument, or the module, and the model is
  left as it was;
* **memory with a side stream**: ``measure_memory`` against the allocator's peak of a bare run.

Prints ``ok``/``FAIL`` per check with the figures, and a count.

    PYTHONPATH=. python3 benchmarks/gpu_edge_probe.py
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere
from moduleprofiler import Profiler, TimingOptions

RESULTS: list[bool] = []
OPTIONS = TimingOptions(num_iters=24, drop_first=4, progress=False)


def check(name: str, fn: Callable[[], str]) -> None:
    """Run one check and print ``ok`` with its detail or ``FAIL`` with the error's last lines."""
    try:
        detail = fn()
        RESULTS.append(True)
        print(f"ok    {name}: {detail}", flush=True)
    except Exception:
        tail = " | ".join(traceback.format_exc().strip().splitlines()[-3:])
        RESULTS.append(False)
        print(f"FAIL  {name}: {tail}", flush=True)


def kernel_ms(fn: Callable[[], object], iters: int = 10) -> float:
    """Mean device time of ``fn`` per call: every CUDA kernel, copy and set, read hook-free by
    ``torch.profiler``."""
    from torch.profiler import ProfilerActivity, profile
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    total_us = sum(e.device_time_total for e in prof.key_averages()
                   if e.device_type == torch.autograd.DeviceType.CUDA)
    return total_us / 1000 / iters


def device_columns(timing: object) -> dict[str, dict[str, object]]:
    return timing.module_columns()  # type: ignore[attr-defined, no-any-return]


class SideStream(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(2048, 2048) / 45)
        self.stream = torch.cuda.Stream()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            y = x @ self.weight
        torch.cuda.current_stream().wait_stream(self.stream)
        return y


class Syncing(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(1024, 1024)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        if y.abs().max().item() > 1e9:  # a host sync, as data-dependent code makes
            y = y / 2
        return y


def side_stream_case() -> str:
    model = nn.Sequential(nn.Linear(2048, 2048), SideStream(), nn.ReLU()).cuda()
    x = torch.randn(512, 2048, device="cuda")
    timing = Profiler().time_modules(model, x, OPTIONS)
    cols = device_columns(timing)
    root, block = cols[""], cols["1"]
    self_sum = sum(float(c["self_device_ms"]) for c in cols.values())  # type: ignore[arg-type]
    with torch.no_grad():
        truth = kernel_ms(lambda: x @ model[1].weight)
    block_ms = float(block["device_ms"])  # type: ignore[arg-type]
    root_ms = float(root["device_ms"])  # type: ignore[arg-type]
    assert abs(self_sum / root_ms - 1) < 0.01, (self_sum, root_ms)
    assert block_ms >= 0.95 * truth, (block_ms, truth)
    return (f"block {block_ms:.4f} ms vs its matmul hook-free {truth:.4f} ms; "
            f"self sum/root {self_sum / root_ms:.4f}")


def host_sync_case() -> str:
    model = nn.Sequential(Syncing(), nn.ReLU(), Syncing()).cuda()
    x = torch.randn(256, 1024, device="cuda")
    timing = Profiler().time_modules(model, x, OPTIONS)
    cols = device_columns(timing)
    with torch.no_grad():
        truth = kernel_ms(lambda: model(x))
    root = float(cols[""]["device_ms"])  # type: ignore[arg-type]
    assert abs(root / truth - 1) < 0.05, (root, truth)
    return f"root {root:.4f} ms vs hook-free {truth:.4f} ms ({root / truth - 1:+.2%})"


def cuda_graph_case() -> str:
    inner = nn.Sequential(nn.Linear(1024, 1024), nn.GELU(), nn.Linear(1024, 1024)).cuda()
    x = torch.randn(256, 1024, device="cuda")
    graphed = torch.cuda.make_graphed_callables(inner, (x,), allow_unused_input=True)
    model = nn.Sequential(nn.Linear(1024, 1024), graphed, nn.ReLU()).cuda()
    with torch.no_grad():
        truth = kernel_ms(lambda: graphed(x))
    timing = Profiler().time_modules(model, x, OPTIONS, eval=False)
    cols = device_columns(timing)
    block = float(cols["1"]["device_ms"])  # type: ignore[arg-type]
    root = float(cols[""]["device_ms"])  # type: ignore[arg-type]
    uncalled = sorted(path for path, c in cols.items() if c["self_device_ms"] is None)
    self_sum = sum(float(c["self_device_ms"]) for c in cols.values()  # type: ignore[arg-type]
                   if c["self_device_ms"] is not None)
    assert block >= 0.9 * truth, (block, truth)
    return (f"graphed block {block:.4f} ms vs its replay hook-free {truth:.4f} ms; "
            f"self sum/root {self_sum / root:.4f}; no device time (not called): {uncalled}")


class MixedDevices(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(1000, 256)  # stays on the CPU
        self.head = nn.Linear(256, 1000).cuda()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(ids).cuda())


def mixed_devices_case() -> str:
    model = MixedDevices()
    ids = torch.randint(0, 1000, (64, 32))
    profile = Profiler().profile(model, ids)
    lines = [f"ops {profile.total_ops}"]
    for device in (None, "cuda"):
        try:
            timing = Profiler().time_modules(model, ids, OPTIONS, device=device)
        except Exception as error:  # the message is what a user reads
            lines.append(f"device={device}: {type(error).__name__}: {str(error)[:140]}")
            continue
        cols = device_columns(timing)
        lines.append(f"device={device}: clock {timing.clock}, head device_ms "
                     f"{cols['head'].get('device_ms')}, embed host "
                     f"{cols['embed'].get('host_ms', cols['embed'].get('time_median_ms'))}")
    return "; ".join(lines)


def wrong_device_case() -> str:
    model = nn.Sequential(nn.Linear(64, 64), nn.BatchNorm1d(64)).cuda().train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = torch.randn(8, 64)  # on the CPU
    try:
        Profiler().time_modules(model, x, OPTIONS)
    except Exception as error:  # the message is what a user reads
        message = f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"
    else:
        message = "no error"
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before), "state changed"
    assert model.training and not model[0]._forward_hooks, "flags or hooks left"
    return message


def memory_side_stream_case() -> str:
    model = nn.Sequential(nn.Linear(2048, 2048), SideStream(), nn.ReLU()).cuda()
    x = torch.randn(512, 2048, device="cuda")
    report = Profiler().measure_memory(model, x)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    with torch.no_grad():
        model(x)
    torch.cuda.synchronize()
    bare = torch.cuda.max_memory_allocated() - base
    measured = report.inference.increase_bytes
    return f"measured peak increase {measured} B vs bare {bare} B ({measured / bare - 1:+.2%})"


def main() -> None:
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to probe")
        return
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for name, case in [("side stream", side_stream_case), ("host sync", host_sync_case),
                       ("cuda graph", cuda_graph_case), ("mixed devices", mixed_devices_case),
                       ("input on the wrong device", wrong_device_case),
                       ("memory with a side stream", memory_side_stream_case)]:
        check(name, case)
    print(f"{sum(RESULTS)} of {len(RESULTS)} ok")


if __name__ == "__main__":
    main()
