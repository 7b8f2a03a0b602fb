"""GPU proof of the kernel clock: per-block device time against the in-situ truth, in the
host-bound and the device-bound regime.

Run on a machine with CUDA (from the repository root)::

    PYTHONPATH=. python3 benchmarks/gpu_kernel_clock.py [--quick]

Truth per block: hook-free iterations under the PyTorch profiler with one
``record_function`` range per block (hooks on those few modules only), each block's kernel
time read from the profiler's own event tree (the ``device_time_total`` of the operators
inside the range): torch's attribution of kernels to operators, not our booking. Ours:
``time_modules`` with default settings (the kernel clock), its
``device_ms`` per block. Also printed: the event clock's reading of the same blocks, the sum
of self device times over the traced device time (coverage), the regime label, and the wall
time of the ``time_modules`` call.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

from moduleprofiler.loss import default_loss
from moduleprofiler.timing import time_modules, train_step_times


def _device_us(event: Any) -> float:
    total = getattr(event, "device_time_total", None)
    return float(total if total is not None else event.cuda_time_total)


class BlockRanges:
    """One ``record_function`` range per block, from forward hooks on those blocks only."""

    def __init__(self, model: nn.Module, blocks: Sequence[str]) -> None:
        modules = dict(model.named_modules())
        self.handles = []
        self.open: dict[str, Any] = {}
        for name in blocks:
            self.handles.append(modules[name].register_forward_pre_hook(self._pre(name)))
            self.handles.append(modules[name].register_forward_hook(self._post(name)))

    def _pre(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any) -> None:
            self.open[name] = record_function(f"truth:{name}").__enter__()
        return hook

    def _post(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, output: Any) -> None:
            self.open.pop(name).__exit__(None, None, None)
        return hook

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def traced_steps(step: Callable[[], None], iterations: int) -> list[Any]:
    """``iterations + 1`` steps in one profiler session, each inside a ``truth-step`` range;
    the profiler's events of the steps after the first (the first of a session is dropped)."""
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(iterations + 1):
            with record_function("truth-step"):
                step()
            torch.cuda.synchronize()
    return list(prof.events())


def _steps(events: list[Any]) -> list[tuple[float, float]]:
    spans = sorted((e.time_range.start, e.time_range.end) for e in events
                   if e.name == "truth-step")
    return spans[1:]


def _step_of(event: Any, spans: list[tuple[float, float]]) -> int | None:
    for k, (start, end) in enumerate(spans):
        if start <= event.time_range.start <= end:
            return k
    return None  # the dropped first step, or outside every step


def block_truth(model: nn.Module, x: Any, blocks: Sequence[str], iterations: int = 5,
                ) -> dict[str, float]:
    """Median per-iteration kernel time (ms) of each block in hook-free iterations: the
    operators inside each block's range, each with its kernels and its children's (torch's
    attribution; the range's own device_time_total also adds the span of its GPU-side
    annotation, idle gaps included)."""
    ranges = BlockRanges(model, blocks)
    try:
        with torch.no_grad():
            for _ in range(3):
                invoke(model, x)
            torch.cuda.synchronize()
            events = traced_steps(lambda: invoke(model, x), iterations)
    finally:
        ranges.remove()
    spans = _steps(events)
    sums = {name: [0.0] * len(spans) for name in blocks}
    for event in events:
        if event.name.startswith("truth:") and (k := _step_of(event, spans)) is not None:
            sums[event.name[len("truth:"):]][k] += sum(
                _device_us(child) for child in event.cpu_children) / 1e3
    return {name: statistics.median(values) for name, values in sums.items()}


def backward_truth(model: nn.Module, x: Any, blocks: Sequence[str], iterations: int = 5,
                   ) -> dict[str, float]:
    """Median per-step backward kernel time (ms) of each block in hook-free training steps:
    each ``autograd::engine::evaluate_function`` event goes to the block whose forward range
    holds the operator of the same sequence number (torch's own forward/backward link)."""
    params = [p for p in model.parameters() if p.requires_grad]

    def step() -> None:
        for p in params:
            p.grad = None
        default_loss(invoke(model, x)).backward()

    ranges = BlockRanges(model, blocks)
    try:
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        events = traced_steps(step, iterations)
    finally:
        ranges.remove()
    spans = _steps(events)
    owner: dict[int, str] = {}
    frontier = [(e, e.name[len("truth:"):]) for e in events if e.name.startswith("truth:")]
    while frontier:
        event, name = frontier.pop()
        if event.sequence_nr >= 0:
            owner.setdefault(event.sequence_nr, name)
        frontier.extend((child, name) for child in event.cpu_children)
    sums = {name: [0.0] * len(spans) for name in blocks}
    for event in events:
        if (event.name.startswith("autograd::engine::evaluate_function")
                and event.sequence_nr in owner
                and (k := _step_of(event, spans)) is not None):
            sums[owner[event.sequence_nr]][k] += _device_us(event) / 1e3
    return {name: statistics.median(values) for name, values in sums.items()}


def invoke(model: nn.Module, x: Any) -> Any:
    """``model(**x)`` for a dict, else ``model(x)``."""
    return model(**x) if isinstance(x, dict) else model(x)


def check_backward(label: str, model: nn.Module, x: Any, blocks: Sequence[str]) -> list[float]:
    """Print one training-step case; return the per-block backward errors (%)."""
    truth = backward_truth(model, x, blocks)
    start = time.perf_counter()
    timing = train_step_times(model, x, num_iters=20, drop_first=4, progress=False)
    wall = time.perf_counter() - start
    columns = timing.module_columns()
    assert timing.device_times is not None
    print(f"\n== {label}, training step backward: train_step_times {wall:.1f} s wall; "
          f"booked share {timing.device_times.booked_share:.4f}")
    print(f"   {'block':<28}{'truth ms':>10}{'bwd device':>11}{'err %':>8}{'bwd host':>9}"
          f"{'bound':>8}")
    errors = []
    for name in blocks:
        ours = columns[name]
        error = (100 * (ours["backward_device_ms"] / truth[name] - 1) if truth[name] > 0
                 else math.nan)
        if not math.isnan(error):
            errors.append(error)
        print(f"   {name:<28}{truth[name]:>10.4f}{ours['backward_device_ms']:>11.4f}"
              f"{error:>+8.2f}{ours['backward_host_ms'] or math.nan:>9.4f}"
              f"{ours['backward_time_bound']!s:>8}")
    print(f"   max |error| {max(abs(e) for e in errors):.2f} %")
    return errors


def resnet50(batch: int, dtype: torch.dtype, channels_last: bool) -> tuple[nn.Module, Any]:
    import torchvision

    model = torchvision.models.resnet50(weights=None).cuda().eval().to(dtype)
    x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=dtype)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.to(memory_format=torch.channels_last)
    return model, x


def vit_b16(batch: int, dtype: torch.dtype) -> tuple[nn.Module, Any]:
    import torchvision

    model = torchvision.models.vit_b_16(weights=None).cuda().eval().to(dtype)
    return model, torch.randn(batch, 3, 224, 224, device="cuda", dtype=dtype)


def gpt2(batch: int, length: int, dtype: torch.dtype) -> tuple[nn.Module, Any]:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(attn_implementation="sdpa")
    model = GPT2LMHeadModel(config).cuda().eval().to(dtype)
    ids = torch.randint(0, config.vocab_size, (batch, length), device="cuda")
    return model, {"input_ids": ids}


class Sleep(nn.Module):
    """A module whose forward is one known-duration GPU spin."""

    def __init__(self, cycles: int) -> None:
        super().__init__()
        self.cycles = cycles

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch.cuda._sleep(self.cycles)
        return x


def check(label: str, model: nn.Module, x: Any, blocks: Sequence[str],
          events: bool = False) -> list[float]:
    """Print one case; return the per-block relative errors (%)."""
    truth = block_truth(model, x, blocks)
    start = time.perf_counter()
    timing = time_modules(model, x, progress=False)
    wall = time.perf_counter() - start
    columns = timing.module_columns()
    summary = timing.to_dict()
    device_times = timing.device_times
    assert device_times is not None, "the kernel clock did not run"
    self_sum = sum(v.get("self_device_ms") or 0.0 for v in columns.values())
    root = columns[""]["device_ms"]
    print(f"\n== {label}: time_modules {wall:.1f} s wall; clock {timing.clock}; "
          f"bound {summary.get('bound')}; busy {100 * summary.get('device_busy_share', 0):.0f} %;"
          f" launches/iter {summary.get('launches_per_iter')}; hooked/hook-free "
          f"{timing.overhead_ratio:.3f}")
    print(f"   coverage: sum of self device / root device {self_sum / root:.4f}; booked share "
          f"of all traced device time {device_times.booked_share:.4f}")
    event_columns: dict[str, Any] = {}
    if events:
        event_columns = time_modules(model, x, progress=False, clock="events").module_columns()
    errors = []
    print(f"   {'block':<28}{'truth ms':>10}{'device ms':>11}{'err %':>8}{'host ms':>9}"
          f"{'bound':>8}{'idle':>7}" + (f"{'events ms':>11}{'err %':>8}" if events else ""))
    for name in blocks:
        ours = columns[name]
        error = 100 * (ours["device_ms"] / truth[name] - 1) if truth[name] > 0 else math.nan
        if not math.isnan(error):
            errors.append(error)
        row = (f"   {name:<28}{truth[name]:>10.4f}{ours['device_ms']:>11.4f}{error:>+8.2f}"
               f"{ours['host_ms']:>9.4f}{ours['time_bound']:>8}"
               f"{100 * (ours.get('device_idle_share') or 0):>6.0f}%")
        if events:
            value = event_columns[name]["time_median_ms"]
            row += f"{value:>11.4f}{100 * (value / truth[name] - 1):>+8.2f}"
        print(row)
    print(f"   max |error| {max(abs(e) for e in errors):.2f} %; regime: "
          f"{timing.device_times.hook_free.sentence() if timing.device_times.hook_free else '-'}")
    return errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="ResNet-50 cases only")
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    resnet_blocks = ["conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3",
                     "layer4", "avgpool", "fc"]
    worst = []
    for batch, dtype, channels_last, events in ((32, torch.float32, False, False),
                                                (32, torch.bfloat16, True, False),
                                                (128, torch.float32, False, True),
                                                (128, torch.bfloat16, True, False)):
        model, x = resnet50(batch, dtype, channels_last)
        layout = " channels_last" if channels_last else ""
        label = f"ResNet-50 batch {batch} {str(dtype)[6:]}{layout}"
        worst.append(max(abs(e) for e in check(label, model, x, resnet_blocks, events)))
        del model, x
    if not args.quick:
        model, x = vit_b16(32, torch.bfloat16)
        vit_blocks = ["conv_proj", *[f"encoder.layers.encoder_layer_{i}" for i in range(12)],
                      "encoder.ln", "heads"]
        worst.append(max(abs(e) for e in check("ViT-B/16 batch 32 bf16", model, x, vit_blocks)))
        del model, x
        model, x = gpt2(8, 512, torch.bfloat16)
        gpt_blocks = ["transformer.wte", "transformer.wpe",
                      *[f"transformer.h.{i}" for i in range(12)], "transformer.ln_f", "lm_head"]
        worst.append(max(abs(e) for e in check("GPT-2 8 x 512 bf16", model, x, gpt_blocks)))
        del model, x
    model, x = resnet50(32, torch.float32, False)
    model.train()
    worst.append(max(abs(e) for e in check_backward("ResNet-50 batch 32 float32", model, x,
                                                    resnet_blocks)))
    del model, x
    if not args.quick:
        model, x = gpt2(8, 512, torch.bfloat16)
        model.train()
        worst.append(max(abs(e) for e in check_backward(
            "GPT-2 8 x 512 bf16", model, x, [f"transformer.h.{i}" for i in range(12)])))
        del model, x
    sleep = nn.Sequential(Sleep(2_000_000), Sleep(500_000)).cuda()
    timing = time_modules(sleep, torch.zeros(1, device="cuda"), progress=False)
    columns = timing.module_columns()
    print(f"\n== two GPU spins (2e6 and 5e5 cycles): device {columns['0']['device_ms']:.4f} / "
          f"{columns['1']['device_ms']:.4f} ms, host {columns['0']['host_ms']:.4f} / "
          f"{columns['1']['host_ms']:.4f} ms, bound {columns['0']['time_bound']} / "
          f"{columns['1']['time_bound']}; model {timing.to_dict().get('bound')}")
    print(f"\nworst block error per case (%): {', '.join(f'{w:.2f}' for w in worst)}")


if __name__ == "__main__":
    main()
