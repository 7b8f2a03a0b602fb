"""Where the operator path's cost goes on GPT-2 small (``transformers``' ``GPT2Model`` built from
``GPT2Config()``, eval, no grad, 128 tokens, one torch thread). Measurement, not a benchmark of
record: every variant runs the same forward, interleaved in a fresh random order each round,
timed by thread CPU time (minimum, median, and the median of the per-round ratios to the bare
forward).

    python benchmarks/operator_path_probe.py time bare,noop_mode,started_inactive,prof_ops 21
    python benchmarks/operator_path_probe.py part bare,prof_noops,prof_ops 15 NewGELUActivation
    python benchmarks/operator_path_probe.py callbacks
    MODEL=resnet50 python benchmarks/operator_path_probe.py part bare,prof_ops 15 Conv2d

``time``: the whole forward per variant. ``part``: the time spent inside calls of one module
type (a pre/post hook pair on each such module), per variant, to tell whether kernels that the
observer never sees (``Conv1D``) get slower. ``callbacks``: per profile() pass, the number of
operators that reach the observer, the time spent running them and the time spent in the
callback (the counting listener's work).

Variants: ``bare``; ``noop_mode`` (a no-op ``TorchDispatchMode`` over the whole forward);
``started_inactive`` (the observer entered, then popped for the whole forward: torch's "a
dispatch mode is on" flags set, no operator observed); ``runner_none`` (the runner, no
listener); ``runner_nopops`` / ``runner_keepops`` (a listener observing the modules the counting
listener observes on GPT-2, doing nothing with the operators / keeping every output alive);
``prof_noops`` / ``prof_ops`` (``profile(operators=False)`` / ``profile()``); ``prof_ops_nocb``
(``profile()`` with the counting listener's operator method replaced by a no-op for the call);
``prof_ops_mute`` (``profile()`` with the observer kept pushed through the whole pass and muted,
instead of popped and pushed again, around the calls no listener observes).
"""

from __future__ import annotations

import gc
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere
sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead import NoOpMode

from moduleprofiler import ModuleProfiler, counting
from moduleprofiler.call import Call
from moduleprofiler.dispatch import OperatorObserver
from moduleprofiler.runner import Listener, PassRunner

UNCOVERED = {
    "gpt2": {"GPT2Attention", "GPT2Block", "GPT2MLP", "NewGELUActivation", "GPT2Model"},
    "resnet50": {"Bottleneck", "ResNet", "Sequential"},
}
"""Per model, the module types without a module formula: the counting listener observes these."""
MODEL = "gpt2"
"""The model probed (``MODEL=resnet50`` in the environment: torchvision's, batch 1, 224 x 224)."""


class NopOps(Listener):
    """Observes what the counting listener observes on GPT-2; does nothing with it."""

    def observe(self, module: nn.Module) -> bool:
        return type(module).__name__ in UNCOVERED[MODEL]

    def observe_outside(self) -> bool:
        return True

    def operator(self, call: Call | None, func: Any, args: tuple[Any, ...],
                 kwargs: dict[str, Any], out: Any) -> None:
        pass


class KeepOps(NopOps):
    """Keeps every observed output alive until the pass is over."""

    def __init__(self) -> None:
        self.kept: list[Any] = []

    def operator(self, call: Call | None, func: Any, args: tuple[Any, ...],
                 kwargs: dict[str, Any], out: Any) -> None:
        self.kept.append(out)


def build() -> dict[str, Callable[[], Any]]:
    """The model, its input and every variant."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model: nn.Module
    if MODEL == "resnet50":
        import torchvision

        model = torchvision.models.resnet50(weights=None).eval()
        x = torch.randn(1, 3, 224, 224)
    else:
        from transformers import GPT2Config, GPT2Model

        model = GPT2Model(GPT2Config()).eval()
        x = torch.randint(0, 50000, (1, 128))
    profiler = ModuleProfiler()

    def bare() -> Any:
        with torch.no_grad():
            return model(x)

    def noop_mode() -> None:
        with NoOpMode():
            bare()

    def started_inactive() -> None:
        observer = OperatorObserver(lambda *args: None)
        observer.start()
        observer.set_active(False)
        try:
            bare()
        finally:
            observer.stop()

    def prof_ops_nocb() -> None:
        original = counting.CountingListener.operator
        counting.CountingListener.operator = lambda self, *args: None  # type: ignore[method-assign]
        try:
            profiler.profile(model, x)
        finally:
            counting.CountingListener.operator = original  # type: ignore[method-assign]

    def prof_ops_mute() -> None:
        # the observer stays pushed for the whole pass and is muted where no listener wants
        # the operators, instead of popped and pushed again around every such call
        original = OperatorObserver.set_active

        def mute(self: OperatorObserver, active: bool) -> None:
            if self.suspended:
                return
            if active:
                if not self.pushed or not self._entered:
                    self.start()
                self.muted = False
            elif self.pushed:
                self.muted = True

        OperatorObserver.set_active = mute  # type: ignore[method-assign]
        try:
            profiler.profile(model, x)
        finally:
            OperatorObserver.set_active = original  # type: ignore[method-assign]

    return {
        "bare": bare,
        "noop_mode": noop_mode,
        "started_inactive": started_inactive,
        "runner_none": lambda: PassRunner(model, []).forward(bare),
        "runner_nopops": lambda: PassRunner(model, [NopOps()]).forward(bare),
        "runner_keepops": lambda: PassRunner(model, [KeepOps()]).forward(bare),
        "prof_noops": lambda: profiler.profile(model, x, operators=False),
        "prof_ops": lambda: profiler.profile(model, x),
        "prof_ops_nocb": prof_ops_nocb,
        "prof_ops_mute": prof_ops_mute,
        "_model": lambda: model,
    }


def rounds(tools: dict[str, Callable[[], Any]], names: list[str], reps: int,
           sample: Callable[[Callable[[], Any]], float]) -> dict[str, list[float]]:
    """``reps`` interleaved rounds after two warm-up rounds; ``sample`` times one call."""
    samples: dict[str, list[float]] = {name: [] for name in names}
    for _ in range(2):
        for name in names:
            tools[name]()
    for _ in range(reps):
        for name in random.sample(names, len(names)):
            gc.collect()
            samples[name].append(sample(tools[name]))
    return samples


def thread_seconds(fn: Callable[[], Any]) -> float:
    start = time.thread_time()
    fn()
    return time.thread_time() - start


def whole(tools: dict[str, Callable[[], Any]], names: list[str], reps: int) -> None:
    samples = rounds(tools, names, reps, thread_seconds)
    base = samples[names[0]]
    for name in names:
        own = samples[name]
        pair = statistics.median(a / b for a, b in zip(own, base))
        print(f"{name:18s} min {min(own) * 1e3:7.1f} ms x{min(own) / min(base):.3f}  "
              f"med {statistics.median(own) * 1e3:7.1f} "
              f"x{statistics.median(own) / statistics.median(base):.3f}  pair med {pair:.3f}",
              flush=True)


def part(tools: dict[str, Callable[[], Any]], names: list[str], reps: int, kind: str) -> None:
    spent = [0.0]
    started: dict[int, float] = {}

    def pre(module: nn.Module, args: Any) -> None:
        started[id(module)] = time.thread_time()

    def post(module: nn.Module, args: Any, output: Any) -> None:
        spent[0] += time.thread_time() - started[id(module)]

    handles = []
    for module in tools["_model"]().modules():
        if type(module).__name__ == kind:
            handles.append(module.register_forward_pre_hook(pre))
            handles.append(module.register_forward_hook(post))

    def inside(fn: Callable[[], Any]) -> float:
        spent[0] = 0.0
        fn()
        return spent[0]

    try:
        samples = rounds(tools, names, reps, inside)
    finally:
        for handle in handles:
            handle.remove()
    for name in names:
        print(f"{kind} time {name:18s} min {min(samples[name]) * 1e3:7.1f} ms "
              f"med {statistics.median(samples[name]) * 1e3:7.1f}", flush=True)


def callbacks(tools: dict[str, Callable[[], Any]]) -> None:
    stats = {"ops": 0.0, "run_ms": 0.0, "callback_ms": 0.0}
    original = OperatorObserver.__torch_dispatch__

    def timed(self: OperatorObserver, func: Any, types: Any, args: Any = (),
              kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        start = time.thread_time()
        out = func(*args, **kwargs)
        ran = time.thread_time()
        if not self.muted:
            self._callback(func, args, kwargs, out)
        stats["run_ms"] += (ran - start) * 1e3
        stats["callback_ms"] += (time.thread_time() - ran) * 1e3
        stats["ops"] += 1
        return out

    OperatorObserver.__torch_dispatch__ = timed  # type: ignore[method-assign]
    try:
        for _ in range(3):
            stats.update(ops=0.0, run_ms=0.0, callback_ms=0.0)
            tools["prof_ops"]()
            print("profile():", {key: round(value, 2) for key, value in stats.items()},
                  flush=True)
    finally:
        OperatorObserver.__torch_dispatch__ = original  # type: ignore[method-assign]


def main() -> None:
    global MODEL
    MODEL = os.environ.get("MODEL", "gpt2")
    tools = build()
    what = sys.argv[1]
    if what == "time":
        whole(tools, sys.argv[2].split(","), int(sys.argv[3]))
    elif what == "part":
        part(tools, sys.argv[2].split(","), int(sys.argv[3]), sys.argv[4])
    elif what == "callbacks":
        callbacks(tools)


if __name__ == "__main__":
    main()
