"""A model on the second GPU, and a model split over two GPUs, through the front door.

Users run models that are not on ``cuda:0``: a process given ``cuda:1`` by hand, or a model
split over two GPUs (Transformers' ``device_map="auto"``, a hand-written pipeline). Each
check below compares what the front door reports with an independent figure:

* ``profile``: the same ops, MACs and parameters as on the CPU;
* ``time_modules`` (kernel clock): every child's device time is positive and the root's covers
  its children's; the model on ``cuda:1`` reads within 15 % of the same model on ``cuda:0``;
  split, the root's device time against the kernels ``torch.profiler`` records on both devices
  for the same forward;
* ``measure_memory``: the inference peak above its baseline against the allocator's own
  increase for a bare forward on the device that holds the work (split: the pass's live bytes
  across both devices, between the larger device's increase and the sum of both, with the
  model left where it was);
* ``benchmark``: the latency against a bare CUDA-event loop.

Prints one line per check, ``ok`` or ``FAIL`` with the cause (or ``INFO``), and a count at the
end. Needs two GPUs:

    PYTHONPATH=. python3 benchmarks/gpu_two_devices_probe.py
"""

from __future__ import annotations

import copy
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere
from moduleprofiler import Profile, Profiler, TimingOptions

RESULTS: list[tuple[str, bool]] = []


def check(name: str, fn: Callable[[], str]) -> None:
    """Run one check; print ``ok`` with its detail, or ``FAIL`` with the error's last lines."""
    try:
        detail = fn()
        RESULTS.append((name, True))
        print(f"ok    {name}: {detail}", flush=True)
    except Exception:
        tail = " | ".join(traceback.format_exc().strip().splitlines()[-3:])
        RESULTS.append((name, False))
        print(f"FAIL  {name}: {tail}", flush=True)


def block(width: int) -> nn.Sequential:
    """A block heavy enough (a few hundred microseconds) for device times to be meaningful."""
    return nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width),
                         nn.LayerNorm(width))


class Split(nn.Module):
    """``first`` on one device, ``second`` on another: the activation is copied between."""

    def __init__(self, width: int, first: str, second: str) -> None:
        super().__init__()
        self.first = block(width).to(first)
        self.second = block(width).to(second)
        self.second_device = torch.device(second)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x).to(self.second_device))


def module_frame(result: Profile, column: str) -> dict[str, float]:
    """``column`` per module path of the module frame (modules without a value left out and
    printed)."""
    frame = result.to_df("module").set_index("module")
    missing = [str(path) for path, value in frame[column].items() if value is pd.NA]
    if missing:
        print(f"INFO  no {column} for {missing}", flush=True)
    return {str(path): float(value) for path, value in frame[column].items()
            if value is not pd.NA}


def profiler_kernel_ms(model: nn.Module, x: torch.Tensor, runs: int = 20) -> float:
    """Median over ``runs`` forwards of the summed kernel time ``torch.profiler`` records on
    every device (an independent clock)."""
    from torch.profiler import ProfilerActivity, profile

    totals = []
    with torch.no_grad():
        for _ in range(5):
            model(x)
        torch.cuda.synchronize()
        for _ in range(runs):
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                model(x)
                for index in range(torch.cuda.device_count()):
                    torch.cuda.synchronize(index)
            events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
            totals.append(sum(e.device_time_total for e in events) / 1000.0)
    return sorted(totals)[len(totals) // 2]


def bare_increase(model: nn.Module, x: torch.Tensor, device: int) -> int:
    """The allocator's allocated-bytes increase over one bare forward, on ``device``."""
    with torch.no_grad():
        model(x)
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    with torch.no_grad():
        out = model(x)
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - base
    del out
    return peak


def on_second_gpu() -> None:
    """The same model on ``cuda:0`` and on ``cuda:1``."""
    profiler = Profiler()
    options = TimingOptions(max_seconds=3.0)
    cpu_model = block(1024).eval()
    cpu_x = torch.randn(256, 1024)
    found: dict[str, dict[str, float]] = {}

    for device in ("cuda:0", "cuda:1"):
        model = copy.deepcopy(cpu_model).to(device)
        x = cpu_x.to(device)

        def counts(model: nn.Module = model, x: torch.Tensor = x) -> str:
            want = profiler.profile(cpu_model, cpu_x)
            got = profiler.profile(model, x)
            pair = ((got.total_ops, got.total_macs, got.total_params),
                    (want.total_ops, want.total_macs, want.total_params))
            assert pair[0] == pair[1], f"{pair[0]} against the CPU's {pair[1]}"
            return f"ops, MACs, params {pair[0]}"
        check(f"{device} profile", counts)

        def timing(model: nn.Module = model, x: torch.Tensor = x, device: str = device) -> str:
            result = profiler.time_modules(model, x, options)
            times = module_frame(result, "device_ms")
            found[device] = times
            children = [times[str(i)] for i in range(4)]
            assert all(t > 0 for t in children), f"children's device times {children}"
            assert times["__root__"] >= 0.99 * sum(children), (times["__root__"], children)
            return f"root {times['__root__']:.4f} ms, children {sum(children):.4f} ms"
        check(f"{device} time_modules", timing)

        def memory(model: nn.Module = model, x: torch.Tensor = x, device: str = device) -> str:
            index = torch.device(device).index
            report = profiler.measure_memory(model, x)
            bare = bare_increase(model, x, index)
            ours = report.inference.increase_bytes
            assert abs(ours - bare) <= 0.01 * bare, f"ours {ours:,} bytes, allocator {bare:,}"
            return f"increase {ours:,} bytes, allocator {bare:,}"
        check(f"{device} measure_memory", memory)

        def latency(model: nn.Module = model, x: torch.Tensor = x) -> str:
            result = profiler.benchmark(model, x, options)
            return f"{result.latency_ms:.4f} ms"
        check(f"{device} benchmark", latency)

    def same() -> str:
        zero, one = found["cuda:0"]["__root__"], found["cuda:1"]["__root__"]
        assert abs(one - zero) <= 0.15 * zero, f"cuda:1 {one:.4f} ms, cuda:0 {zero:.4f} ms"
        return f"cuda:1 {one:.4f} ms, cuda:0 {zero:.4f} ms"
    check("cuda:1 device time against cuda:0", same)


def split_over_two() -> None:
    """``first`` on ``cuda:0``, ``second`` on ``cuda:1``."""
    profiler = Profiler()
    options = TimingOptions(max_seconds=3.0)
    model = Split(1024, "cuda:0", "cuda:1").eval()
    x = torch.randn(256, 1024, device="cuda:0")

    def counts() -> str:
        cpu_model = copy.deepcopy(model).cpu()
        cpu_model.second_device = torch.device("cpu")
        want = profiler.profile(cpu_model, x.cpu())
        got = profiler.profile(model, x)
        pair = ((got.total_ops, got.total_macs, got.total_params),
                (want.total_ops, want.total_macs, want.total_params))
        assert pair[0] == pair[1], f"{pair[0]} against the CPU's {pair[1]}"
        return f"ops, MACs, params {pair[0]}"
    check("split profile", counts)

    def timing() -> str:
        result = profiler.time_modules(model, x, options)
        times = module_frame(result, "device_ms")
        first, second, root = times["first"], times["second"], times["__root__"]
        truth = profiler_kernel_ms(model, x)
        print(f"INFO  split notes: {result.warnings}", flush=True)
        assert first > 0 and second > 0, f"first {first} ms, second {second} ms"
        assert abs(root - truth) <= 0.05 * truth, (
            f"root {root:.4f} ms against torch.profiler's {truth:.4f} ms on both devices")
        return (f"first {first:.4f} ms, second {second:.4f} ms, root {root:.4f} ms; "
                f"torch.profiler {truth:.4f} ms")
    check("split time_modules", timing)

    def memory() -> str:
        report = profiler.measure_memory(model, x)
        ours = report.inference.increase_bytes
        bare = {index: bare_increase(model, x, index) for index in (0, 1)}
        print(f"INFO  split memory: ours {ours:,} bytes; allocator per device {bare}", flush=True)
        # live at once across both devices: at least one device's peak, at most their sum
        assert 0.99 * max(bare.values()) <= ours <= 1.01 * sum(bare.values()), (
            f"ours {ours:,} bytes outside the allocators' {bare}")
        assert report.inference.method == "operator" and report.device == "cuda:0, cuda:1"
        assert model.second[0].weight.device == torch.device("cuda:1"), "the model was moved"
        return f"increase {ours:,} bytes; allocator per device {bare}"
    check("split measure_memory", memory)

    def latency() -> str:
        result = profiler.benchmark(model, x, options)
        return f"{result.latency_ms:.4f} ms"
    check("split benchmark", latency)

    def training_memory() -> str:
        report = profiler.measure_memory(model, x, train=True)
        training = report.training
        assert training is not None and training.method == "operator"
        # the gradients: one per parameter, fp32
        want = 4 * sum(p.numel() for p in model.parameters())
        assert training.grad_bytes == want, f"gradients {training.grad_bytes:,}, want {want:,}"
        return f"training increase {training.increase_bytes:,} bytes at {training.peak_call}"
    check("split measure_memory(train=True)", training_memory)

    def training_times() -> str:
        result = profiler.train_step_times(model, x, options)
        frame = result.to_df("module").set_index("module")
        backward = {path: float(frame.loc[path, "backward_device_ms"])
                    for path in ("first", "second")}
        assert all(t > 0 for t in backward.values()), f"backward device times {backward}"
        return f"backward device ms {backward}"
    check("split train_step_times", training_times)


def dispatched_language_model() -> None:
    """A Transformers model spread over two GPUs by accelerate's ``dispatch_model``, whose
    hooks move each layer's inputs to its device."""
    try:
        from accelerate import dispatch_model
        from transformers import LlamaConfig, LlamaForCausalLM
    except ImportError as exc:
        print(f"INFO  no accelerate or transformers here: {exc}")
        return
    config = LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=512,
                         num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=4)
    cpu_model = LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 512, (2, 64))
    device_map = {"model.embed_tokens": 0, "model.layers.0": 0, "model.layers.1": 0,
                  "model.layers.2": 1, "model.layers.3": 1, "model.norm": 1,
                  "model.rotary_emb": 0, "lm_head": 1}
    model = dispatch_model(copy.deepcopy(cpu_model), device_map=device_map)
    profiler = Profiler()

    def counts() -> str:
        want = profiler.profile(cpu_model, ids)
        got = profiler.profile(model, ids.to("cuda:0"))
        pair = ((got.total_macs, got.total_params), (want.total_macs, want.total_params))
        assert pair[0] == pair[1], f"{pair[0]} against the CPU's {pair[1]}"
        return f"MACs, params {pair[0]}"
    check("dispatched llama profile", counts)

    def timing() -> str:
        result = profiler.time_modules(model, ids.to("cuda:0"), TimingOptions(max_seconds=3.0))
        times = module_frame(result, "device_ms")
        layers = [times[f"model.layers.{i}"] for i in range(4)]
        assert all(t > 0 for t in layers), f"layers' device times {layers}"
        return f"layers' device ms {[round(t, 4) for t in layers]}"
    check("dispatched llama time_modules", timing)

    def memory() -> str:
        report = profiler.measure_memory(model, ids.to("cuda:0"))
        assert report.device == "cuda:0, cuda:1", report.device
        return f"increase {report.inference.increase_bytes:,} bytes on {report.device}"
    check("dispatched llama measure_memory", memory)


def main() -> int:
    if torch.cuda.device_count() < 2:
        print("needs two GPUs")
        return 2
    count = torch.cuda.device_count()
    print(f"{torch.cuda.get_device_name(0)} x{count}, torch {torch.__version__}")
    on_second_gpu()
    split_over_two()
    dispatched_language_model()
    failed = [name for name, ok in RESULTS if not ok]
    print(f"{len(RESULTS) - len(failed)} of {len(RESULTS)} ok" +
          (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
