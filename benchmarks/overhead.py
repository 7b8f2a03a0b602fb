"""Overhead of ``ModuleProfiler.profile()`` against a bare forward pass and against peer tools.

One CPU thread, batch 1, interleaved repetitions (every tool once per round, in a shuffled
order), median per tool; prints each tool's median divided by the bare forward's median.

    python benchmarks/overhead.py                 # resnet18, resnet50, vit_b_16, gpt2
    python benchmarks/overhead.py --models resnet18 --reps 5

Peers (optional; skipped when not installed): FlopCounterMode, ptflops, thop, torchinfo
(``pip install ptflops thop torchinfo``). Each peer gets its own deep copy of the model because
some of them leave buffers or hooks behind.
"""

from __future__ import annotations

import argparse
import copy
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from moduleprofiler import ModuleProfiler

Runner = Callable[[], Any]


def build(name: str) -> tuple[nn.Module, Any]:
    """A model built without downloading weights, and its input."""
    if name == "gpt2":
        from transformers import GPT2Config, GPT2LMHeadModel

        model = GPT2LMHeadModel(GPT2Config())
        return model.eval(), {"input_ids": torch.randint(0, 50257, (1, 128))}
    import torchvision.models as tvm

    model = getattr(tvm, name)(weights=None)
    return model.eval(), torch.randn(1, 3, 224, 224)


def call(model: nn.Module, example: Any) -> Any:
    return model(**example) if isinstance(example, dict) else model(example)


def runners(model: nn.Module, example: Any) -> dict[str, Runner]:
    """Every tool that can run here, as a zero-argument callable."""
    profiler = ModuleProfiler()

    def bare() -> Any:
        with torch.no_grad():
            return call(model, example)

    tools: dict[str, Runner] = {
        "bare forward": bare,
        "moduleprofiler": lambda: profiler.profile(model, example),
    }

    def fcm() -> Any:
        from torch.utils.flop_counter import FlopCounterMode

        with FlopCounterMode(display=False) as counter, torch.no_grad():
            call(model, example)
        return counter.get_total_flops()

    tools["FlopCounterMode"] = fcm
    try:
        from ptflops import get_model_complexity_info

        ptflops_model = copy.deepcopy(model)

        def ptflops_run() -> Any:
            if isinstance(example, dict):
                return get_model_complexity_info(
                    ptflops_model, (1,), input_constructor=lambda _: example,
                    as_strings=False, print_per_layer_stat=False, verbose=False)
            return get_model_complexity_info(
                ptflops_model, tuple(example.shape[1:]), as_strings=False,
                print_per_layer_stat=False, verbose=False)

        tools["ptflops"] = ptflops_run
    except ImportError:
        pass
    try:
        import thop

        thop_model = copy.deepcopy(model)
        if isinstance(example, dict):
            tools["thop"] = lambda: thop.profile(
                thop_model, inputs=(example["input_ids"],), verbose=False)
        else:
            tools["thop"] = lambda: thop.profile(thop_model, inputs=(example,), verbose=False)
    except ImportError:
        pass
    try:
        import torchinfo

        info_model = copy.deepcopy(model)
        tools["torchinfo"] = lambda: torchinfo.summary(
            info_model, input_data=example if not isinstance(example, dict) else None,
            verbose=0, **(example if isinstance(example, dict) else {}))
    except ImportError:
        pass
    return tools


def measure(tools: dict[str, Runner], reps: int) -> dict[str, float]:
    """Median seconds per tool over ``reps`` interleaved rounds (after one warm-up round)."""
    samples: dict[str, list[float]] = {name: [] for name in tools}
    names = list(tools)
    for round_index in range(reps + 1):
        random.shuffle(names)
        for name in names:
            start = time.perf_counter()
            tools[name]()
            elapsed = time.perf_counter() - start
            if round_index:  # round 0 warms every tool up (imports, allocator, caches)
                samples[name].append(elapsed)
    return {name: statistics.median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18", "resnet50", "vit_b_16", "gpt2"])
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    random.seed(0)
    print(f"torch {torch.__version__}, 1 thread, {args.reps} interleaved rounds, median seconds")
    print(f"{'model':<10} {'tool':<16} {'median s':>9} {'x bare':>7}")
    for name in args.models:
        model, example = build(name)
        medians = measure(runners(model, example), args.reps)
        bare = medians["bare forward"]
        for tool, median in medians.items():
            print(f"{name:<10} {tool:<16} {median:9.4f} {median / bare:7.3f}")


if __name__ == "__main__":
    main()
