"""Timing engine benchmark (CPU): overhead, per-module agreement, adaptive latency.

One command, from the repository root::

    PYTHONPATH=. python benchmarks/timing.py            # about 1-2 minutes
    PYTHONPATH=. python benchmarks/timing.py --quick    # smaller, a few seconds
    PYTHONPATH=. python benchmarks/timing.py --run-fixed  # also run 0.0.4's 1000 iterations

Prints ratios:

1. hooked / hook-free whole-model time of resnet18 (interleaved rounds; goal <= 1.05);
2. per-module forward time (hooks, in situ) against the same module run alone in a loop
   ("isolated") and against ``torch.profiler`` CPU time of a ``record_function`` scope per
   module, for a CNN, an MLP and a transformer (modules >= 50 us);
3. adaptive whole-model latency on resnet18: iterations and seconds to a 1 % CI of the
   median, against moduleprofiler 0.0.4's fixed 1000 iterations.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from typing import Any

import torch
from torch import Tensor, nn

from moduleprofiler.export.names import module_name
from moduleprofiler.timing import benchmark, time_modules


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(64, 10),
    )


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 2048), nn.GELU(),
                         nn.Dropout(0.1), nn.Linear(2048, 512))


def transformer() -> nn.Module:
    # batch_first=False: no fused fast path, so hooks do not change the kernels
    layer = nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)


def leaf_inputs(model: nn.Module, x: Tensor) -> dict[str, tuple[nn.Module, tuple[Any, ...]]]:
    """Each called leaf's first positional inputs (captured once with temporary hooks)."""
    captured: dict[str, tuple[nn.Module, tuple[Any, ...]]] = {}
    handles = []
    for path, module in model.named_modules():
        if path and next(iter(module.children()), None) is None:
            def grab(m: nn.Module, args: tuple[Any, ...], path: str = path) -> None:
                captured.setdefault(path, (m, tuple(a.detach() if isinstance(a, Tensor)
                                                    else a for a in args)))
            handles.append(module.register_forward_pre_hook(grab))
    with torch.no_grad():
        model(x)
    for handle in handles:
        handle.remove()
    return captured


def isolated_ms(module: nn.Module, args: tuple[Any, ...], reps: int) -> float:
    with torch.no_grad():
        for _ in range(3):
            module(*args)
        samples = []
        for _ in range(reps):
            start = time.perf_counter_ns()
            module(*args)
            samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1e6


def profiler_ms(model: nn.Module, x: Tensor, paths: list[str], iters: int) -> dict[str, float]:
    """Mean CPU time per call of a ``record_function`` scope around each module."""
    from torch.profiler import ProfilerActivity, profile, record_function

    scopes: dict[int, Any] = {}
    handles = []
    for path, module in model.named_modules():
        if path in paths:
            def enter(m: nn.Module, args: Any, path: str = path) -> None:
                scope = record_function(f"mod::{path}")
                scope.__enter__()
                scopes[id(m)] = scope

            def leave(m: nn.Module, args: Any, out: Any) -> None:
                scopes.pop(id(m)).__exit__(None, None, None)

            handles.append(module.register_forward_pre_hook(enter))
            handles.append(module.register_forward_hook(leave))
    try:
        with torch.no_grad():
            for _ in range(3):
                model(x)
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(iters):
                    model(x)
    finally:
        for handle in handles:
            handle.remove()
    return {e.key[len("mod::"):]: e.cpu_time_total / e.count / 1000.0
            for e in prof.key_averages() if e.key.startswith("mod::")}


def agreement(name: str, model: nn.Module, x: Tensor, iters: int) -> tuple[float, ...]:
    model.eval()
    timing = time_modules(model, x, num_iters=iters, drop_first=5, warmup_seconds=0.3,
                          num_threads=1)
    leaves = leaf_inputs(model, x)
    with torch.no_grad():
        torch.set_num_threads(1)
        try:
            iso = {p: isolated_ms(m, a, max(20, iters)) for p, (m, a) in leaves.items()}
            prof = profiler_ms(model, x, list(leaves), max(10, iters // 2))
        finally:
            torch.set_num_threads(threads)
    print(f"\n{name}: hooked / hook-free {timing.overhead_ratio:.3f}, coverage "
          f"{timing.coverage:.3f}, leaf coverage {timing.leaf_coverage:.3f}")
    print(f"  {'module':<34}{'hooks_ms':>10}{'isolated':>10}{'profiler':>10}"
          f"{'h/iso':>8}{'h/prof':>8}")
    vs_iso, vs_prof, large_iso, large_prof = [], [], [], []
    for path in leaves:
        stats = timing.to_df("module").set_index("module").loc[module_name(path)]
        if stats.inclusive is None or stats.inclusive.median < 0.05:
            continue
        ours = stats["time_median_ms"] / stats["calls"]
        a = ours / iso[path]
        b = ours / prof[path] if prof.get(path) else math.nan
        vs_iso.append(a)
        vs_prof.append(b)
        if ours >= 0.5:
            large_iso.append(a)
            large_prof.append(b)
        print(f"  {path + ' (' + stats.type_name + ')':<34}{ours:>10.4f}{iso[path]:>10.4f}"
              f"{prof.get(path, math.nan):>10.4f}{a:>8.3f}{b:>8.3f}")
    mid_iso = statistics.median(vs_iso) if vs_iso else math.nan
    mid_prof = statistics.median(vs_prof) if vs_prof else math.nan
    big_iso = statistics.median(large_iso) if large_iso else math.nan
    big_prof = statistics.median(large_prof) if large_prof else math.nan
    print(f"  median ratio hooks/isolated {mid_iso:.3f}, hooks/profiler {mid_prof:.3f} "
          f"over {len(vs_iso)} modules >= 50 us; {big_iso:.3f} and {big_prof:.3f} over the "
          f"{len(large_iso)} >= 0.5 ms")
    return mid_iso, mid_prof, big_iso, big_prof


def adaptive_vs_fixed(model: nn.Module, x: Tensor, run_fixed: bool, budget: float) -> None:
    print("\nresnet18 whole-model latency (no hooks):")
    start = time.perf_counter()
    result = benchmark(model, x, target_ci=0.01, max_seconds=budget, warmup_seconds=1.0,
                       num_threads=1)
    total = time.perf_counter() - start
    print(f"  adaptive: median {result.latency_ms:.3f} ms, 95% CI "
          f"[{result.latency_ci_low_ms:.3f}, {result.latency_ci_high_ms:.3f}] "
          f"(+-{100 * result.ci_halfwidth_rel:.2f}%), iterations={result.iterations}, "
          f"stop {result.stop_reason}; {result.elapsed_s:.2f} s timed, {total:.2f} s with "
          f"warm-up")
    fixed_s = 1000 * result.latency_mean_ms / 1000
    # the CI half-width of a median shrinks like 1/sqrt(n)
    projected = result.ci_halfwidth_rel * math.sqrt(result.iterations / 1000)
    print(f"  0.0.4 fixed 1000 iterations: about {fixed_s:.2f} s (1000 x the mean; its CI "
          f"would be about +-{100 * projected:.2f}%, by 1/sqrt(n) scaling); adaptive/fixed "
          f"time {total / fixed_s:.3f}")
    if run_fixed:
        fixed = benchmark(model, x, num_iters=1000, drop_first=0, target_ci=None,
                          max_seconds=None, warmup_iters=0, warmup_seconds=0)
        print(f"  measured fixed run: {fixed.elapsed_s:.2f} s, median {fixed.latency_ms:.3f} ms "
              f"+-{100 * fixed.ci_halfwidth_rel:.2f}%")


threads = torch.get_num_threads()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--run-fixed", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    iters = 20 if args.quick else 60
    print(f"torch {torch.__version__}, load average {__import__('os').getloadavg()[0]:.2f}; "
          "1 intra-op thread throughout (on a shared 2-core VM, 2 OpenMP threads stall "
          "whenever a neighbour takes a core)")
    try:
        import torchvision

        resnet: nn.Module = torchvision.models.resnet18(weights=None).eval()
    except ImportError:
        resnet = cnn().eval()
        print("(torchvision missing: the resnet18 rows use the small CNN)")
    side = 112 if args.quick else 224
    image = torch.randn(1, 3, side, side)
    timing = time_modules(resnet, image, num_iters=iters, drop_first=5, warmup_seconds=1.0,
                          num_threads=1)
    cal = timing.calibration
    print(f"\nresnet18 (1x3x{side}x{side}): hooked / hook-free whole model "
          f"{timing.overhead_ratio:.3f} (hook-free median {timing.hook_free.median:.2f} ms, "
          f"{len(timing.modules)} modules, {len(timing.records)} calls); "
          f"coverage {timing.coverage:.3f}; per-call cost {cal.per_call_ns / 1e3:.2f} us, "
          f"attribution {cal.attribution_ns / 1e3:.2f} us")
    results = {
        "cnn": agreement("CNN (1x3x64x64)", cnn(), torch.randn(1, 3, 64, 64), iters),
        "mlp": agreement("MLP (32x512)", mlp(), torch.randn(32, 512), iters),
        "transformer": agreement("Transformer (2 layers, d=256, seq 64, batch 4)",
                                 transformer(), torch.randn(64, 4, 256), iters),
    }
    adaptive_vs_fixed(resnet, image, args.run_fixed, 10.0 if args.quick else 60.0)
    print("\nsummary:")
    print(f"  resnet18 hooked/hook-free {timing.overhead_ratio:.3f} (goal <= 1.05)")
    for key, (iso, prof, big_iso, big_prof) in results.items():
        print(f"  {key:<12} hooks/isolated {iso:.3f}  hooks/profiler {prof:.3f}  "
              f"(modules >= 0.5 ms: {big_iso:.3f}, {big_prof:.3f})")


if __name__ == "__main__":
    main()
