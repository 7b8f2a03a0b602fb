"""GPU proof of the kernel clock: per-block device time against the in-situ truth, in the
host-bound and the device-bound regime.

Run on a machine with CUDA (from the repository root)::

    PYTHONPATH=. python3 benchmarks/gpu_kernel_clock.py [--quick]

Truth per block: hook-free iterations under the PyTorch profiler with one
``record_function`` range per block (hooks on those few modules only); each kernel goes to the
block whose range holds the host operator torch linked it to (``linked_correlation_id``: the
profiler's own link, not our booking by launch time); the backward's kernels go through the
``evaluate_function`` node around their operator and its sequence number to the block whose
forward created it. The first iteration of each profiler session is dropped. Ours:
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
    the profiler's raw (kineto) events. The first step of the session is dropped later."""
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(iterations + 1):
            with record_function("truth-step"):
                step()
            torch.cuda.synchronize()
    return list(prof.profiler.kineto_results.events())  # type: ignore[union-attr]


class RawTrace:
    """The profiler's raw events, indexed the way torch links them: each kernel to the host
    operator that was innermost when it launched (``linked_correlation_id``), each operator to
    its thread and time."""

    def __init__(self, events: list[Any]) -> None:
        cpu = torch._C._autograd.DeviceType.CPU
        self.ops: dict[int, Any] = {}
        self.ranges: list[tuple[str, int, int, int]] = []  # (name, thread, start, end)
        self.engine: list[tuple[int, int, int, int]] = []  # (sequence_nr, thread, start, end)
        self.kernels: list[Any] = []
        for event in events:
            name = event.name()
            start = event.start_ns()
            end = start + event.duration_ns()
            if event.device_type() == cpu:
                if name.startswith("truth"):
                    self.ranges.append((name, event.start_thread_id(), start, end))
                elif name.startswith("autograd::engine::evaluate_function"):
                    self.engine.append((event.sequence_nr(), event.start_thread_id(), start,
                                        end))
                if event.linked_correlation_id() == 0:  # an operator, not a runtime call
                    self.ops[event.correlation_id()] = event
            elif not event.is_user_annotation():
                self.kernels.append(event)
        steps = sorted((s, e) for n, _, s, e in self.ranges if n == "truth-step")
        self.steps = steps[1:]  # the first step of the session is dropped

    def step_of(self, time_ns: int) -> int | None:
        for k, (start, end) in enumerate(self.steps):
            if start <= time_ns <= end:
                return k
        return None

    def block_at(self, thread: int, time_ns: int) -> str | None:
        for name, range_thread, start, end in self.ranges:
            if name.startswith("truth:") and range_thread == thread and start <= time_ns <= end:
                return name[len("truth:"):]
        return None

    def launcher(self, kernel: Any) -> Any:
        return self.ops.get(kernel.linked_correlation_id())


def hook_free_trace(model: nn.Module, x: Any, blocks: Sequence[str],
                    iterations: int) -> RawTrace:
    """The kernel records of ``iterations`` hook-free steps (after 3 warm-up ones), with a
    named range around each of ``blocks`` (removed again)."""
    ranges = BlockRanges(model, blocks)
    try:
        with torch.no_grad():
            for _ in range(3):
                invoke(model, x)
            torch.cuda.synchronize()
            return RawTrace(traced_steps(lambda: invoke(model, x), iterations))
    finally:
        ranges.remove()


def block_truth(model: nn.Module, x: Any, blocks: Sequence[str], iterations: int = 5,
                ) -> dict[str, float]:
    """Median per-iteration kernel time (ms) of each block in hook-free iterations: each
    kernel goes to the block whose range holds the operator torch linked it to."""
    trace = hook_free_trace(model, x, blocks, iterations)
    sums = {name: [0.0] * len(trace.steps) for name in blocks}
    for kernel in trace.kernels:
        op = trace.launcher(kernel)
        if op is None:
            continue
        step = trace.step_of(op.start_ns())
        block = trace.block_at(op.start_thread_id(), op.start_ns())
        if step is not None and block is not None:
            sums[block][step] += kernel.duration_ns() / 1e6
    return {name: statistics.median(values) for name, values in sums.items()}


def backward_truth(model: nn.Module, x: Any, blocks: Sequence[str], iterations: int = 5,
                   ) -> dict[str, float]:
    """Median per-step backward kernel time (ms) of each block in hook-free training steps:
    a kernel launched inside an ``autograd::engine::evaluate_function`` event goes to the
    block whose forward range holds the operator of the same sequence number (torch's own
    forward/backward link)."""
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
        trace = RawTrace(traced_steps(step, iterations))
    finally:
        ranges.remove()
    owner: dict[int, str] = {}
    for op in trace.ops.values():
        if op.sequence_nr() >= 0:
            block = trace.block_at(op.start_thread_id(), op.start_ns())
            if block is not None:
                owner.setdefault(op.sequence_nr(), block)
    sums = {name: [0.0] * len(trace.steps) for name in blocks}
    for kernel in trace.kernels:
        op = trace.launcher(kernel)
        if op is None:
            continue
        thread, time_ns = op.start_thread_id(), op.start_ns()
        inside = [e for e in trace.engine if e[1] == thread and e[2] <= time_ns <= e[3]]
        if not inside:
            continue
        sequence = max(inside, key=lambda e: e[2])[0]  # the innermost node
        step_index = trace.step_of(time_ns)
        if sequence in owner and step_index is not None:
            sums[owner[sequence]][step_index] += kernel.duration_ns() / 1e6
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
    assert timing.kernels
    print(f"\n== {label}, training step backward: train_step_times {wall:.1f} s wall; "
          f"booked share {timing.timing.booked_share:.4f}")
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
    device_times = timing.timing  # the pass's facts: the booked share
    assert timing.kernels, "the kernel clock did not run"
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
          f"{timing.timing.hook_free.sentence() if timing.timing.hook_free else '-'}")
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
    for batch, dtype, channels_last, events in ((32, torch.float32, False, True),
                                                (32, torch.bfloat16, True, True),
                                                (128, torch.float32, False, True),
                                                (128, torch.bfloat16, True, True)):
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
          f"{columns['1']['time_bound']}; model {timing.to_dict().get('time_bound')}")
    print(f"\nworst block error per case (%): {', '.join(f'{w:.2f}' for w in worst)}")


if __name__ == "__main__":
    main()
