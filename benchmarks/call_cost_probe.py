"""Where ``profile(operators=False)``'s cost goes on a model whose calls all have a formula
(ResNet-50 by default; torchvision, ``weights=None``, batch 1, eval, no grad, one torch thread).
Measurement, not a benchmark of record: every variant runs the same forward, interleaved in a
fresh random order each round, timed by thread CPU time (minimum, median, and the median of
the per-round ratios to the bare forward).

    python benchmarks/call_cost_probe.py                  # resnet50, 31 rounds
    python benchmarks/call_cost_probe.py resnet50 41

Variants, each adding one piece to the one before:
``empty hooks`` (a pre/post pair with kwargs on every module); ``runner`` (the runner, no
listener); ``runner + empty listener`` (a listener whose ``enter``/``exit`` do nothing);
``runner + counting, no exit`` (the counting listener with its per-call ``exit`` replaced by a
no-op); ``runner + counting`` (the whole listener, forward only: no module scan, no records);
``profile(operators=False)`` (adds the module walk and scan, state kept, records and the
Profile). ``walk + scan`` is timed alone.
``least counting hooks``: the floor of an exact per-call count (a hook pair that evaluates
each call's ops and MACs formulas and reads its output's shape, dtype and storage while the
tensors are alive, then one walk for parameter counts; no tree, no records), for a model whose
module outputs are all single tensors. After the rounds: the counting listener's ``exit``
summed inside a pass (in situ) and the same calls replayed back to back outside the forward,
which tells how much of a call's cost in the forward is the cold cache it runs in.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere
from benchmarks.overhead import (
    Tool,
    build,
    call,
    cpu_name,
    hooks_on,
    load,
    measure,
    paired_ratios,
    timed,
)
from moduleprofiler import ModuleProfiler
from moduleprofiler.counting import CountingListener
from moduleprofiler.modules import scan_modules, walk_modules
from moduleprofiler.runner import Listener, PassRunner


class _EmptyListener(Listener):
    def enter(self, call: Any, args: Any, kwargs: Any) -> None:
        pass

    def exit(self, call: Any, args: Any, kwargs: Any, output: Any) -> None:
        pass


class _NoExit(CountingListener):
    def exit(self, call: Any, args: Any, kwargs: Any, output: Any) -> None:
        pass


class _TimedExit(CountingListener):
    """The counting listener, summing the thread time of its ``exit`` and keeping the
    arguments for a replay."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.spent_ns = 0
        self.kept: list[tuple[Any, ...]] = []

    def exit(self, call: Any, args: Any, kwargs: Any, output: Any) -> None:
        start = time.thread_time_ns()
        super().exit(call, args, kwargs, output)
        self.spent_ns += time.thread_time_ns() - start
        self.kept.append((call, args, kwargs, output))


def variants(model: nn.Module, example: Any) -> dict[str, Callable[[], Any]]:
    profiler = ModuleProfiler()
    maps = profiler._formula_maps(False)

    def forward() -> Any:
        return call(model, example)

    def empty_hooks() -> None:
        with hooks_on(model, lambda module, args, kwargs: None,
                      lambda module, args, kwargs, output: None):
            forward()

    formulas: dict[type, tuple[Callable[..., Any], Callable[..., Any] | None]] = {}
    for module in model.modules():
        found = CountingListener(maps)._resolve_type(module)
        formulas[type(module)] = (found.ops, found.macs)

    def least_counting() -> None:
        # the least an exact per-call count needs inside the forward: the call order, each
        # call's formula (ops and MACs) evaluated while its tensors are alive, and the facts
        # of its output; after it, one walk for the parameter counts
        kept: list[Any] = []

        def pre(module: nn.Module, args: Any, kwargs: Any) -> None:
            kept.append(module)

        def post(module: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
            ops, macs = formulas[type(module)]
            kept.append((ops(module, args, output), macs and macs(module, args, output),
                         output.shape, output.dtype, output.untyped_storage()._cdata))

        with hooks_on(model, pre, post):
            forward()
        kept.append([(name, sum(p.numel() for p in module.parameters(recurse=False)))
                     for name, module in model.named_modules()])

    return {
        "bare forward": forward,
        "least counting hooks": least_counting,
        "empty hooks": empty_hooks,
        "runner": lambda: PassRunner(model, []).forward(forward),
        "runner + empty listener": lambda: PassRunner(model, [_EmptyListener()]).forward(forward),
        "runner + counting, no exit": lambda: PassRunner(model, [_NoExit(maps)]).forward(forward),
        "runner + counting": lambda: PassRunner(model, [CountingListener(maps)]).forward(forward),
        "profile(operators=False)": lambda: profiler.profile(model, example, operators=False),
        "walk + scan": lambda: scan_modules(model, walk_modules(model)),
    }


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "resnet50"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 31
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, example = build(name)
    tools = [Tool(key, partial(timed, run)) for key, run in variants(model, example).items()]
    print(f"{name}: {cpu_name()}, torch {torch.__version__}, {rounds} rounds after 2, "
          f"load {load()}")
    with torch.no_grad():
        measure(tools, rounds, warmup=2, seed=0)  # overhead.py's interleaved rounds
        bare = tools[0]
        base = [cpu for _, cpu in bare.samples]
        print(f"{'variant':28s} {'min ms':>9s} {'+ms min':>8s} {'x min':>7s} {'x med':>7s} "
              f"{'pair med':>8s}")
        for tool in tools:
            cpus = [cpu for _, cpu in tool.samples]
            pair = statistics.median(paired_ratios(tool, bare))
            print(f"{tool.name:28s} {min(cpus) * 1e3:9.3f} {(min(cpus) - min(base)) * 1e3:8.3f} "
                  f"{min(cpus) / min(base):7.4f} "
                  f"{statistics.median(cpus) / statistics.median(base):7.4f} {pair:8.4f}")
        in_situ, replay = [], []
        for _ in range(7):
            listener = _TimedExit(ModuleProfiler()._formula_maps(False))
            PassRunner(model, [listener]).forward(lambda: call(model, example))
            in_situ.append(listener.spent_ns)
            start = time.thread_time_ns()
            for kept in listener.kept:
                CountingListener.exit(listener, *kept)
            replay.append(time.thread_time_ns() - start)
            calls = len(listener.kept)
            del listener
        print(f"counting exit, {calls} calls: in situ min {min(in_situ) / 1e6:.3f} ms "
              f"({min(in_situ) / calls / 1e3:.1f} us/call); replayed min "
              f"{min(replay) / 1e6:.3f} ms ({min(replay) / calls / 1e3:.1f} us/call)")
    print(f"load at end {load()}")


if __name__ == "__main__":
    main()
