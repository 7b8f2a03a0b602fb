"""Where ``measure_memory(train=True)`` and a bare training step part in the front door's
process: ResNet-18 read 1.0042 (fp32) and 1.0166 (bf16 autocast) of the allocator's bare step
there, and exactly 1.0 in a process of its own (``gpu_autocast_cache_memory.py``).

Runs the front door's checks of ResNet-18 (fp32, then bf16) to give the process the same
history, then records the allocator's history (``torch.cuda.memory._record_memory_history``)
over one bare step and one ``measure_memory`` step, replays each trace to the moment of its
peak, and prints the allocations alive there that the other step did not have at its peak
(by size, with the Python frame that made them).

    PYTHONPATH=. python benchmarks/gpu_memory_gap_probe.py
"""

from __future__ import annotations

import collections
import copy
import sys
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_front_door import loss_of, models, run_model

from moduleprofiler import Profiler


def live_at_peak(snapshot: dict[str, Any]) -> tuple[int, list[dict[str, Any]]]:
    """The largest running sum of the trace's allocations (from the recording's start), and
    the allocations alive at that moment."""
    live: dict[int, dict[str, Any]] = {}
    current = best = 0
    best_live: list[dict[str, Any]] = []
    for trace in snapshot["device_traces"]:
        for entry in trace:
            action = entry["action"]
            if action == "alloc":
                live[entry["addr"]] = entry
                current += entry["size"]
                if current > best:
                    best, best_live = current, list(live.values())
            elif action == "free_requested" and entry["addr"] in live:
                current -= live.pop(entry["addr"])["size"]
    return best, best_live


def where(entry: dict[str, Any]) -> str:
    """The innermost frames outside torch's own files, shortened."""
    frames = [f for f in entry.get("frames", ())
              if "/torch/" not in f["filename"] or "/nn/modules/" in f["filename"]]
    return " <- ".join(f"{Path(f['filename']).name}:{f['line']}:{f['name']}" for f in frames[:4])


def recorded(run: Any, fresh: bool = True) -> dict[str, Any]:
    """The allocator's history over ``run()`` (``fresh``: the cache emptied first)."""
    torch.cuda.synchronize()
    if fresh:
        torch.cuda.empty_cache()
    torch.cuda.memory._record_memory_history(max_entries=200_000, stacks="python")
    try:
        run()
        torch.cuda.synchronize()
        return torch.cuda.memory._snapshot()
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)


def diff(label: str, alive: list[dict[str, Any]], other: list[dict[str, Any]]) -> None:
    """The allocations alive in ``alive`` and not in ``other`` (by size), and the reverse."""
    sizes = collections.Counter(e["size"] for e in alive)
    others = collections.Counter(e["size"] for e in other)
    for sign, extra, pool in (("+", sizes - others, alive), ("-", others - sizes, other)):
        print(f"  {label} {sign}: {sum(s * n for s, n in extra.items()):,} B")
        for size, n in sorted(extra.items(), key=lambda kv: -kv[0] * kv[1])[:12]:
            sample = next(e for e in pool if e["size"] == size)
            print(f"    {sign}{n} x {size:,} B  {where(sample)}")


def main() -> None:
    name, cpu_model, cpu_input = next(iter(models()))
    # every measure_memory call of the front door's checks, recorded
    calls: list[tuple[int, dict[str, Any]]] = []
    original = Profiler.measure_memory

    def recording(self: Profiler, *args: Any, **kwargs: Any) -> Any:
        results: list[Any] = []
        snapshot = recorded(lambda: results.append(original(self, *args, **kwargs)),
                            fresh=False)
        step = results[0].training
        calls.append((0 if step is None else step.peak_bytes - step.baseline_bytes, snapshot))
        return results[0]

    Profiler.measure_memory = recording  # type: ignore[method-assign]
    for precision in ("fp32", "bf16"):
        run_model(name, cpu_model, cpu_input, precision)
    Profiler.measure_memory = original  # type: ignore[method-assign]
    x = cpu_input.cuda()
    for precision, (front_increase, front_snapshot) in zip(("fp32", "bf16"), calls,
                                                             strict=True):
        autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if precision == "bf16"
                    else nullcontext())

        def bare_step(model: torch.nn.Module, autocast: Any = autocast) -> None:
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            requested = torch.cuda.memory_stats()["requested_bytes.all.current"]
            with autocast:
                loss = loss_of(model(x))
            loss.backward()
            torch.cuda.synchronize()
            peak = torch.cuda.memory_stats()["requested_bytes.all.peak"]
            print(f"  bare step: increase {torch.cuda.max_memory_allocated() - base:,} B "
                  f"allocated, {peak - requested:,} B requested")

        def measured_step(model: torch.nn.Module, autocast: Any = autocast) -> None:
            with autocast:
                report = Profiler().measure_memory(model, x, train=True, loss_fn=loss_of,
                                                   keep_output=False)
            step = report.training
            assert step is not None
            print(f"  measure_memory: increase {step.peak_bytes - step.baseline_bytes:,} B, "
                  f"peak at {step.peak_call}")

        print(f"\n## {name}/{precision}")
        front_peak, front_alive = live_at_peak(front_snapshot)
        print(f"front door's measure_memory: increase {front_increase:,} B, trace peak "
              f"{front_peak:,} B, {len(front_alive)} allocations alive")
        for label, run in (("bare", bare_step), ("measured", measured_step),
                           ("bare", bare_step), ("bare", bare_step)):
            model = copy.deepcopy(cpu_model).cuda().train()
            snapshot = recorded(lambda run=run, model=model: run(model))
            peak, alive = live_at_peak(snapshot)
            print(f"{label}: trace peak {peak:,} B, {len(alive)} allocations alive")
            diff(f"front door's measured vs this {label}", front_alive, alive)


if __name__ == "__main__":
    main()
