"""On a CUDA GPU: the first block of each model on the kernel clock against
its in-situ kernel truth, the kernel clock's per-kernel booking of that block, and the model's
regime and 80-column summary.

Run from the repository root (``COLUMNS=80`` for the summary)::

    PYTHONPATH=. python3 benchmarks/gpu_first_block.py [--diagnose] [--proof]
        [--repeats N] [--truth-iterations N]

``--diagnose``: for ResNet-50, ViT-B/16, MobileNetV3 and ConvNeXt-T, traced blocks of the
kernel clock (sessions of 1, 1, 1 and 4 iterations, as ``time_modules`` runs them) and their
raw profiler events; for every traced iteration, the first block's device time as booked
(by launch time, :mod:`moduleprofiler.timing.booking`) and as torch links it (the kernel's
``linked_correlation_id`` operator, inside the same ranges), each kernel the two disagree on
or that booking dropped, and the first block's kernels beside those of the hook-free truth.

``--proof``: ``gpu_kernel_clock.check`` (the hook-free truth per block against
``time_modules``' ``device_ms``) for ResNet-50, ViT-B/16, MobileNetV3-Large and ConvNeXt-T at
batch 32 in fp32 and bf16 (CNNs channels_last), plus ResNet-50 at batch 128 fp32 and
ConvNeXt-T batch 64 bf16 channels_last; then each model's regime (``to_dict()['time_bound']``), its
root row's ``time_bound`` and its summary.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(__file__))
from gpu_kernel_clock import (
    block_truth,
    hook_free_trace,
    invoke,
)

import moduleprofiler.timing.device_trace as device_trace_module
from moduleprofiler.runner import PassRunner
from moduleprofiler.timing import time_modules
from moduleprofiler.timing.booking import Launch, Range, innermost_ranges
from moduleprofiler.timing.clocks.kernels import KernelRanges
from moduleprofiler.timing.device_trace import RANGE_PREFIX


def build(name: str, batch: int, dtype: torch.dtype) -> tuple[nn.Module, Any, list[str]]:
    """A torchvision model on CUDA in ``dtype`` (CNNs channels_last in bf16), its input and
    the blocks to check (first block first)."""
    import torchvision.models as tv

    cnn = name != "vit_b_16"
    model = getattr(tv, name)(weights=None).cuda().eval().to(dtype)
    x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=dtype)
    if cnn and dtype == torch.bfloat16:
        model = model.to(memory_format=torch.channels_last)
        x = x.to(memory_format=torch.channels_last)
    if name == "resnet50":
        blocks = ["conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4",
                  "avgpool", "fc"]
    elif name == "vit_b_16":
        blocks = ["conv_proj", *[f"encoder.layers.encoder_layer_{i}" for i in range(12)],
                  "encoder.ln", "heads"]
    else:
        blocks = [f"features.{i}" for i in range(len(model.features))] + [
            "avgpool", "classifier"]
    return model, x, blocks


def layout_name(name: str, batch: int, dtype: torch.dtype) -> str:
    cl = " channels_last" if name != "vit_b_16" and dtype == torch.bfloat16 else ""
    return f"{name} batch {batch} {str(dtype)[6:]}{cl}"


# -- the hook-free truth's kernels of one block -------------------------------------------
def truth_kernels(model: nn.Module, x: Any, block: str, iterations: int = 5,
                  ) -> list[list[tuple[str, int]]]:
    """Per hook-free step, the kernels (name, ns) torch links to operators inside ``block``'s
    range, in start order."""
    trace = hook_free_trace(model, x, [block], iterations)
    steps: list[list[tuple[int, str, int]]] = [[] for _ in trace.steps]
    for kernel in trace.kernels:
        op = trace.launcher(kernel)
        if op is None:
            continue
        step = trace.step_of(op.start_ns())
        if step is not None and trace.block_at(op.start_thread_id(), op.start_ns()) == block:
            steps[step].append((kernel.start_ns(), kernel.name(), kernel.duration_ns()))
    return [[(n, d) for _, n, d in sorted(s)] for s in steps]


# -- the kernel clock's booking, kernel by kernel ------------------------------------------
class Captured:
    """Keeps the raw events each traced session hands to ``records_of``."""

    def __init__(self) -> None:
        self.sessions: list[list[Any]] = []
        self._original = device_trace_module.records_of

    def __enter__(self) -> Captured:
        def keep(events: Any) -> Any:
            events = list(events)
            self.sessions.append(events)
            return self._original(events)
        device_trace_module.records_of = keep  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: Any) -> None:
        device_trace_module.records_of = self._original  # type: ignore[assignment]


def short(name: str, width: int = 70) -> str:
    return name if len(name) <= width else name[:width - 3] + "..."


def analyse(events: list[Any], calls: list[list[Any]], first: str, session: int,
            truth: list[list[tuple[str, int]]]) -> None:
    """Print, per iteration of one session, the first block's kernels as booked and as linked."""
    cpu = torch._C._autograd.DeviceType.CPU
    ranges: list[Range] = []
    hosts: dict[tuple[int, int], Any] = {}
    unlinked: dict[int, Any] = {}
    ops: dict[int, Any] = {}
    device: list[Any] = []
    for e in events:
        name = e.name()
        if e.device_type() == cpu:
            if name.startswith(RANGE_PREFIX):
                ranges.append(Range(name[len(RANGE_PREFIX):], e.start_thread_id(), e.start_ns(),
                                    e.start_ns() + e.duration_ns()))
                continue
            linked = e.linked_correlation_id()
            if linked:
                hosts[(e.correlation_id(), linked)] = e
            elif name.startswith(("cu", "hip")):
                unlinked[e.correlation_id()] = e
            if linked == 0:
                ops[e.correlation_id()] = e
        elif not e.is_user_annotation():
            device.append(e)
    launch_of: dict[int, Any] = {}
    for k in device:
        linked = k.linked_correlation_id()
        host = hosts.get((k.correlation_id(), linked)) if linked else unlinked.get(
            k.correlation_id())
        if host is not None:
            launch_of[k.correlation_id()] = host
    ours = innermost_ranges(ranges, [Launch(c, h.start_thread_id(), h.start_ns())
                                     for c, h in launch_of.items()])
    # torch's link: the operator the kernel was launched in, placed in the same ranges
    linked_ops = {k.correlation_id(): ops[k.linked_correlation_id()] for k in device
                  if k.linked_correlation_id() in ops}
    theirs = innermost_ranges(ranges, [Launch(c, op.start_thread_id(), op.start_ns())
                                       for c, op in linked_ops.items()])

    def path(label: str | None) -> str:
        if label is None:
            return "<none>"
        k, _, rest = label.partition(":")
        if not rest.startswith("f"):
            return label
        call = calls[int(k)][int(rest[1:])]
        return f"{k}:{call.path or '<root>'}"

    def in_first(label: str | None, k: int) -> bool:
        if label is None or not label.startswith(f"{k}:f"):
            return False
        p = calls[k][int(label.split(":f")[1])].path
        return p == first or p.startswith(first + ".")

    first_ranges = {int(r.label.split(":")[0]): r for r in ranges
                    if r.label.split(":")[1].startswith("f") and
                    calls[int(r.label.split(":")[0])][int(r.label.split(":f")[1])].path == first}
    for k in sorted(first_ranges):
        block_range = first_ranges[k]
        booked = [d for d in device if in_first(ours.get(d.correlation_id()), k)]
        linked_in = [d for d in device if in_first(theirs.get(d.correlation_id()), k)]
        ns_ours = sum(d.duration_ns() for d in booked)
        ns_linked = sum(d.duration_ns() for d in linked_in)
        truth_ns = statistics.median(sum(d for _, d in s) for s in truth) if truth else 0
        print(f"   session {session} iteration {k}: {first} booked {ns_ours / 1e3:.1f} us "
              f"({len(booked)} kernels), linked {ns_linked / 1e3:.1f} us ({len(linked_in)}), "
              f"hook-free truth {truth_ns / 1e3:.1f} us "
              f"({len(truth[0]) if truth else 0}); range {block_range.start}..{block_range.end}"
              f" thread {block_range.thread}")
        differ = {d.correlation_id() for d in device} & (
            {d.correlation_id() for d in booked} ^ {d.correlation_id() for d in linked_in})
        for d in sorted(device, key=lambda d: d.start_ns()):
            c = d.correlation_id()
            if c not in differ:
                continue
            host = launch_of.get(c)
            op = linked_ops.get(c)
            print(f"     DIFFERS {short(d.name())} {d.duration_ns() / 1e3:.1f} us corr {c} "
                  f"linked {d.linked_correlation_id()}; launch "
                  f"{host.name() if host else None} thread "
                  f"{host.start_thread_id() if host else None} at "
                  f"{host.start_ns() - block_range.start if host else None} ns from range start;"
                  f" op {op.name() if op else None} thread {op.start_thread_id() if op else None}"
                  f" at {op.start_ns() - block_range.start if op else None}; booked "
                  f"{path(ours.get(c))}, linked {path(theirs.get(c))}")
        for i, d in enumerate(sorted(booked, key=lambda d: d.start_ns())):
            t = truth[0][i] if truth and i < len(truth[0]) else ("-", 0)
            print(f"     booked {i}: {short(d.name(), 50):<50} {d.duration_ns() / 1e3:8.1f} us"
                  f" | truth {short(t[0], 50):<50} {t[1] / 1e3:8.1f} us")
        for i in range(len(booked), len(truth[0]) if truth else 0):
            t = truth[0][i]
            print(f"     booked {i}: {'(none)':<50} {'':>11} | truth {short(t[0], 50):<50} "
                  f"{t[1] / 1e3:8.1f} us")
    dropped = [d for d in device if d.correlation_id() not in launch_of]
    if dropped:
        by_name: dict[str, list[int]] = defaultdict(list)
        for d in dropped:
            by_name[d.name()].append(d.duration_ns())
        print(f"   session {session}: {len(dropped)} device records without a launch: " + "; ".join(
            f"{short(n, 40)} x{len(v)} {sum(v) / 1e3:.1f} us" for n, v in by_name.items()))


def diagnose(name: str, batch: int, dtype: torch.dtype,
             sessions: Sequence[int] = (1, 1, 1, 4)) -> None:
    model, x, blocks = build(name, batch, dtype)
    first = blocks[0]
    print(f"\n== diagnose {layout_name(name, batch, dtype)}: first block {first}")
    truth = truth_kernels(model, x, first)
    clock = KernelRanges(backward=False)
    runner = PassRunner(model, [clock])
    device = torch.device("cuda")
    with Captured() as captured, torch.no_grad():
        for s, count in enumerate(sessions):
            with runner.installed(), clock.traced(device) as block:
                for _ in range(count):
                    clock.run(lambda: invoke(model, x))
                    torch.cuda.synchronize()
            assert block.iterations is not None
            analyse(captured.sessions[-1], clock._calls, first, s, truth)
            print(f"   session {s}: outside every range {block.outside_ns / 1e3:.1f} us")


def check(label: str, model: nn.Module, x: Any, blocks: Sequence[str], truth_iterations: int
          ) -> tuple[list[float], dict[str, float]]:
    """Each block's hook-free truth against ``time_modules``' device time; the regime, the
    root row's ``time_bound`` and the summary. Returns the per-block errors (%) and truths."""
    truth = block_truth(model, x, blocks, iterations=truth_iterations)
    timing = time_modules(model, x, progress=False)
    columns = timing.module_columns()
    summary = timing.to_dict()
    assert timing.kernels, "the kernel clock did not run"
    print(f"\n== {label}: clock {timing.clock}; booked share "
          f"{timing.timing.booked_share:.4f}; hooked/hook-free {timing.overhead_ratio:.3f}")
    print(f"   {'block':<36}{'truth ms':>10}{'device ms':>11}{'err %':>8}")
    errors = []
    for name in blocks:
        ours = columns[name]["device_ms"]
        error = 100 * (ours / truth[name] - 1) if truth[name] > 0 else float("nan")
        errors.append(error)
        print(f"   {name:<36}{truth[name]:>10.4f}{ours:>11.4f}{error:>+8.2f}")
    root = columns[""]
    busy = 100 * summary["device_busy_share"]
    print(f"   regime {summary.get('time_bound')} (busy {busy:.0f} %);"
          f" root row time_bound {root['time_bound']}; host {root['host_ms']:.3f} ms, "
          f"device {root['device_ms']:.3f} ms")
    print(timing.report())
    return errors, truth


def proof(cases: Sequence[tuple[str, int, torch.dtype]], repeats: int,
          truth_iterations: int) -> None:
    firsts, others = [], []
    for name, batch, dtype in cases:
        model, x, blocks = build(name, batch, dtype)
        label = layout_name(name, batch, dtype)
        for repeat in range(repeats):
            errors, truth = check(f"{label} (run {repeat + 1})", model, x, blocks,
                                  truth_iterations)
            firsts.append((f"{label} #{repeat + 1}", errors[0]))
            # blocks of 0.1 ms or more (the kernel clock's accuracy bar), not the first block
            big = [e for b, e in zip(blocks[1:], errors[1:]) if truth[b] >= 0.1]
            others.append((f"{label} #{repeat + 1}",
                           max((abs(e) for e in big), default=float("nan"))))
        del model, x
        torch.cuda.empty_cache()
    print("\nfirst block error per case (%):\n" + "\n".join(
        f"   {label:<50} {e:+.2f}" for label, e in firsts))
    print("worst |error| of the other blocks of >= 0.1 ms per case (%):\n" + "\n".join(
        f"   {label:<50} {e:.2f}" for label, e in others))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--diagnose", action="store_true")
    parser.add_argument("--proof", action="store_true")
    parser.add_argument("--repeats", type=int, default=1,
                        help="truth and time_modules this many times per case")
    parser.add_argument("--truth-iterations", type=int, default=5,
                        help="hook-free profiled steps per truth (median)")
    args = parser.parse_args()
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    f32, bf16 = torch.float32, torch.bfloat16
    if args.diagnose:
        for name, dtype in (("resnet50", f32), ("vit_b_16", bf16), ("mobilenet_v3_large", f32),
                            ("convnext_tiny", bf16)):
            diagnose(name, 32, dtype)
    if args.proof:
        cases: list[tuple[str, int, torch.dtype]] = [
            (name, 32, dtype) for name in ("resnet50", "vit_b_16", "mobilenet_v3_large",
                                           "convnext_tiny") for dtype in (f32, bf16)]
        cases += [("resnet50", 128, f32), ("convnext_tiny", 64, bf16)]
        proof(cases, args.repeats, args.truth_iterations)


if __name__ == "__main__":
    main()
