"""Overhead of ``ModuleProfiler.profile()`` against a bare forward, side by side in one run with
the floor every per-module profiler pays (an empty hook pair on every module; the same pair reading
the facts a per-call record needs while the tensors are alive: shapes, dtypes and storages of the
output and the tensor arguments; a no-op ``TorchDispatchMode``), FlopCounterMode and the peer
tools that are installed.

One CPU thread, batch 1, ResNet-50 (torchvision, ``weights=None``) and GPT-2 small
(``transformers``, built from ``GPT2Config()``, 128 tokens; nothing is downloaded). Every tool
runs once per round, in a fresh random order each round, after warm-up rounds; the garbage
collector runs before each timed call so one tool's garbage is not collected in another's
time. For each tool the script prints the minimum and the median wall time over the rounds,
each divided by the bare forward's, the same ratio of thread CPU time (less sensitive to
other processes on a shared machine) and the overhead per module call in microseconds. The
header says how noisy the machine was: load averages and the bare forward's spread.

    python benchmarks/overhead.py            # 21 rounds, peers included
    python benchmarks/overhead.py --quick    # 15 rounds, without the peers
    python benchmarks/overhead.py --models resnet50 --rounds 31
    python benchmarks/overhead.py --fixed    # the per-pass cost outside the forward only
    python benchmarks/overhead.py --models resnet50 --size 64 224  # one table per image size

The last two columns are the paired statistic: in each round, the tool's thread CPU time
divided by the bare forward's thread CPU time *of the same round*, summarised as the minimum
(``pair min``) and the median (``pair med``) of those per-round ratios. The other ratio columns
divide one summary by another (minimum by minimum, median by median) over all rounds, so a host
whose speed drifts during the run (other jobs starting or stopping) moves them by however
differently the drift fell on the two tools' fastest rounds; a paired ratio compares two calls
taken moments apart, so drift cancels in it.

``runner + no-op mode`` is the runner's hooks on every module with a dispatch mode that sees
every operator throughout, and nothing counted: what a tool pays that watches every operator
everywhere. ``profile()`` can come in under it, since it switches its mode off inside the modules
that a formula covers and counts only the operators outside them.

The targets: ``runner, no listener`` at most 5 us per module call above ``empty hooks``
(``us/call`` columns); ``profile()`` at most 1.10x the bare forward on ResNet-50 and 1.06x on
GPT-2, read as the targets define them: the ratio of minima over the rounds (``x bare`` of the
minimum; ``cpu min`` for thread CPU time). ``pair med`` (the median of the paired thread-CPU
ratios) is printed beside it as the check against drift: where the two disagree, the host was
not quiet enough for the minimum to decide.

Peers (skipped when not installed: ``pip install -e ".[bench]"``): fvcore, ptflops, thop,
torchinfo. Each peer gets its own deep copy of the model, since some of them leave buffers or
hooks behind.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import gc
import io
import os
import platform
import random
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere
from moduleprofiler import ModuleProfiler
from moduleprofiler.runner import PassRunner

Sample = tuple[float, float]
"""(wall seconds, thread CPU seconds) of one timed call."""


@dataclass
class Tool:
    """One way of running the model; ``run()`` returns its own timing, so that setup a tool
    needs outside the forward (installing the empty hooks) is not counted."""

    name: str
    run: Callable[[], Sample]
    samples: list[Sample] = field(default_factory=list)
    error: str | None = None


def timed(fn: Callable[[], Any]) -> Sample:
    wall, cpu = time.perf_counter(), time.thread_time()
    fn()
    return time.perf_counter() - wall, time.thread_time() - cpu


def build(name: str, size: int = 224) -> tuple[nn.Module, Any]:
    """A model built without downloading anything, and its input (``size`` x ``size`` images
    for a torchvision model)."""
    if name == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        model = GPT2LMHeadModel(GPT2Config())
        return model.eval(), {"input_ids": torch.randint(0, 50257, (1, 128))}
    import torchvision.models as tvm

    model = getattr(tvm, name)(weights=None)
    return model.eval(), torch.randn(1, 3, size, size)


def call(model: nn.Module, example: Any) -> Any:
    return model(**example) if isinstance(example, dict) else model(example)


class NoOpMode(TorchDispatchMode):
    """Runs each operator, nothing else: the floor of any Python dispatch mode."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


class _Logits(nn.Module):
    """GPT-2 as a tensor-to-tensor module, for the tracing peer (fvcore)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=ids, use_cache=False).logits


@contextlib.contextmanager
def hooks_on(model: nn.Module, pre: Callable[..., Any], post: Callable[..., Any]
             ) -> Iterator[None]:
    """``pre`` and ``post`` as a forward pre-hook and an always-called forward hook, both with
    kwargs, on every module of ``model`` for the block (how a per-module profiler hooks)."""
    handles = []
    for module in model.modules():
        handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(module.register_forward_hook(post, with_kwargs=True, always_call=True))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def tools_for(model: nn.Module, example: Any, peers: bool) -> list[Tool]:
    """Every tool that can run here."""
    profiler = ModuleProfiler()

    def forward() -> Any:
        with torch.no_grad():
            return call(model, example)

    def empty_hooks() -> Sample:
        with hooks_on(model, lambda module, args, kwargs: None,
                      lambda module, args, kwargs, output: None):
            return timed(forward)

    def fact_hooks() -> Sample:
        # the least a per-call record needs while the tensors are alive: the call order, and
        # the shape, dtype and storage of the output and of each tensor argument
        facts: list[Any] = []

        def pre(module: nn.Module, args: Any, kwargs: Any) -> None:
            facts.append(module)

        def post(module: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
            if type(output) is torch.Tensor:
                facts.append((output.shape, output.dtype, output.untyped_storage()._cdata,
                              [(a.shape, a.dtype, a.untyped_storage()._cdata) for a in args
                               if type(a) is torch.Tensor]))
            else:
                facts.append(None)

        with hooks_on(model, pre, post):
            return timed(forward)

    def no_op_mode() -> None:
        with NoOpMode():
            forward()

    def design_floor() -> None:
        # the runner's hooks with a dispatch mode on throughout, nothing counted (profile()
        # switches its mode off inside formula-covered modules)
        with NoOpMode():
            PassRunner(model, []).forward(forward)

    def flop_counter() -> None:
        with FlopCounterMode(display=False):
            forward()

    tools = [
        Tool("bare forward", lambda: timed(forward)),
        Tool("empty hooks", empty_hooks),
        Tool("hooks reading facts", fact_hooks),
        Tool("runner, no listener", lambda: timed(lambda: PassRunner(model, []).forward(forward))),
        Tool("no-op dispatch mode", lambda: timed(no_op_mode)),
        Tool("runner + no-op mode", lambda: timed(design_floor)),
        Tool("profile()", lambda: timed(lambda: profiler.profile(model, example))),
        Tool("profile(operators=False)",
             lambda: timed(lambda: profiler.profile(model, example, operators=False))),
        Tool("FlopCounterMode", lambda: timed(flop_counter)),
    ]
    if peers:
        tools.extend(peer_tools(model, example))
    return tools


def peer_tools(model: nn.Module, example: Any) -> list[Tool]:
    """The peer tools that are installed, each on its own copy of the model."""
    tools = []
    tensor = example["input_ids"] if isinstance(example, dict) else example
    try:
        from fvcore.nn import FlopCountAnalysis

        traced = copy.deepcopy(_Logits(model) if isinstance(example, dict) else model)

        def fvcore_run() -> None:
            with torch.no_grad():
                (FlopCountAnalysis(traced, (tensor,)).unsupported_ops_warnings(False)
                 .uncalled_modules_warnings(False).total())

        tools.append(Tool("fvcore", lambda: timed(fvcore_run)))
    except ImportError:
        pass
    try:
        from ptflops import get_model_complexity_info

        ptflops_model = copy.deepcopy(model)

        def ptflops_run() -> None:
            # it prints a batch-size guess for keyword-only inputs
            with torch.no_grad(), contextlib.redirect_stdout(io.StringIO()):
                if isinstance(example, dict):
                    get_model_complexity_info(
                        ptflops_model, (1,), input_constructor=lambda _: example,
                        as_strings=False, print_per_layer_stat=False, verbose=False)
                else:
                    get_model_complexity_info(
                        ptflops_model, tuple(example.shape[1:]), as_strings=False,
                        print_per_layer_stat=False, verbose=False)

        tools.append(Tool("ptflops", lambda: timed(ptflops_run)))
    except ImportError:
        pass
    try:
        import thop

        thop_model = copy.deepcopy(model)

        def thop_run() -> None:
            with torch.no_grad():
                thop.profile(thop_model, inputs=(tensor,), verbose=False)

        tools.append(Tool("thop", lambda: timed(thop_run)))
    except ImportError:
        pass
    try:
        import torchinfo

        info_model = copy.deepcopy(model)

        def torchinfo_run() -> None:
            torchinfo.summary(info_model, input_data=example, verbose=0)

        tools.append(Tool("torchinfo", lambda: timed(torchinfo_run)))
    except ImportError:
        pass
    return tools


def measure(tools: list[Tool], rounds: int, warmup: int, seed: int) -> None:
    """``rounds`` interleaved rounds after ``warmup`` ones; a tool that raises is dropped."""
    rng = random.Random(seed)
    order = list(tools)
    for round_index in range(warmup + rounds):
        rng.shuffle(order)
        for tool in order:
            if tool.error is not None:
                continue
            gc.collect()
            try:
                sample = tool.run()
            except Exception as exc:  # a peer that cannot handle this model
                tool.error = f"{type(exc).__name__}: {str(exc).splitlines()[0][:60]}"
                continue
            if round_index >= warmup:
                tool.samples.append(sample)


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load() -> str:
    try:
        return "/".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        return "n/a"


def report(name: str, tools: list[Tool], calls: int, modules: int) -> None:
    bare = tools[0]
    walls = [wall for wall, _ in bare.samples]
    cpus = [cpu for _, cpu in bare.samples]
    bare_min, bare_med = min(walls), statistics.median(walls)
    bare_cpu_min, bare_cpu_med = min(cpus), statistics.median(cpus)
    print(f"\n{name}: {modules} modules, {calls} module calls; bare forward min "
          f"{bare_min * 1e3:.1f} ms, median {bare_med * 1e3:.1f} ms "
          f"(median/min {bare_med / bare_min:.3f}, CPU median/min "
          f"{bare_cpu_med / bare_cpu_min:.3f})")
    print(f"{'tool':<26} {'min ms':>8} {'x bare':>7} {'med ms':>8} {'x bare':>7} "
          f"{'cpu min':>7} {'cpu med':>7} {'us/call min':>11} {'us/call med':>11} "
          f"{'pair min':>8} {'pair med':>8}")
    for tool in tools:
        if tool.error is not None or not tool.samples:
            print(f"{tool.name:<26} failed: {tool.error}")
            continue
        wall = [w for w, _ in tool.samples]
        cpu = [c for _, c in tool.samples]
        low, mid = min(wall), statistics.median(wall)
        paired = paired_ratios(tool, bare)
        print(f"{tool.name:<26} {low * 1e3:8.1f} {low / bare_min:7.3f} {mid * 1e3:8.1f} "
              f"{mid / bare_med:7.3f} {min(cpu) / bare_cpu_min:7.3f} "
              f"{statistics.median(cpu) / bare_cpu_med:7.3f} "
              f"{(low - bare_min) / calls * 1e6:11.1f} {(mid - bare_med) / calls * 1e6:11.1f} "
              f"{min(paired):8.3f} {statistics.median(paired):8.3f}")


def paired_ratios(tool: Tool, bare: Tool) -> list[float]:
    """Per round, ``tool``'s thread CPU time over the bare forward's in the same round. A tool
    that raised stopped being run (:func:`measure`), so its samples are those of the first
    rounds, in order, as the bare forward's are."""
    return [cpu / bare_cpu for (_, cpu), (_, bare_cpu) in zip(tool.samples, bare.samples)]


def fixed_cost(model: nn.Module, example: Any, rounds: int) -> None:
    """The per-pass cost of ``profile()`` outside the forward (module scan, hooks installed
    and released, state kept, records and Profile built): a ``pred_fn`` that does not call
    the model, so no module call is profiled; minimum and median of wall and thread CPU time
    over ``rounds`` x 20 calls."""
    profiler = ModuleProfiler()
    samples = []
    for _ in range(rounds * 20):
        samples.append(timed(lambda: profiler.profile(model, example,
                                                      pred_fn=lambda *a, **k: None)))
    walls, cpus = [wall for wall, _ in samples], [cpu for _, cpu in samples]
    print(f"  fixed per pass: min {min(walls) * 1e3:.3f} ms, median "
          f"{statistics.median(walls) * 1e3:.3f} ms; thread CPU min {min(cpus) * 1e3:.3f} ms, "
          f"median {statistics.median(cpus) * 1e3:.3f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet50", "gpt2"],
                        help="torchvision model names and/or gpt2")
    parser.add_argument("--rounds", type=int, default=None,
                        help="timed rounds (default 21, 15 with --quick)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--quick", action="store_true",
                        help="15 rounds, without the peers")
    parser.add_argument("--no-peers", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", type=int, nargs="+", default=[224],
                        help="image sizes for the torchvision models (several: one table each)")
    parser.add_argument("--fixed", action="store_true",
                        help="time only the per-pass cost outside the forward")
    args = parser.parse_args()
    rounds = args.rounds or (15 if args.quick else 21)
    peers = not (args.quick or args.no_peers)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    print(f"moduleprofiler overhead, {time.strftime('%Y-%m-%d %H:%M')}: torch {torch.__version__},"
          f" Python {platform.python_version()}, {cpu_name()}, {os.cpu_count()} CPUs,"
          f" 1 torch thread, {rounds} interleaved rounds after {args.warmup} warm-up rounds")
    print(f"load average (1/5/15 min) at start: {load()}")
    print("columns: min and median wall time and their ratio to the bare forward's; cpu: the "
          "same ratios of thread CPU time; us/call: (tool - bare) / module calls; pair: min and "
          "median over rounds of tool / bare thread CPU time in the same round")
    runs = [(name, size) for name in args.models
            for size in (args.size if name != "gpt2" else [0])]
    for name, size in runs:
        model, example = build(name, size)
        if size and args.size != [224]:
            name = f"{name} at {size} x {size}"
        if args.fixed:
            print(f"\n{name}: {sum(1 for _ in model.modules())} modules")
            fixed_cost(model, example, rounds)
            continue
        calls = len(ModuleProfiler().profile(model, example).records)
        modules = sum(1 for _ in model.modules())
        tools = tools_for(model, example, peers)
        measure(tools, rounds, args.warmup, args.seed)
        report(name, tools, calls, modules)
        sys.stdout.flush()
    print(f"\nload average (1/5/15 min) at end: {load()}")


if __name__ == "__main__":
    main()
