"""Where the seconds of ``time_modules`` go on a compiled model once it is compiled (ResNet-50,
bf16, batch 32; ``--mode max-autotune`` by default).

In order, writing ``--out``/``gpu_compile_after_<mode>.json`` / ``.md`` after each step:

1. ``time_modules`` of the compiled model, its first call (the clock's compile: under
   ``max-autotune`` Inductor benchmarks its kernels);
2. the phases of a fresh recorded compile (what every pass did before a model's compile was
   kept for the next), one by one: its first call (Dynamo, AOTAutograd,
   Inductor's cache; under CUDA graphs their warm-up run), the second (under CUDA graphs: the
   recording), replays, the eager original, profiler sessions of 1 and of 4 iterations, the
   booking of one session; Inductor's cache counters and Dynamo's compile-time metrics of
   the first call;
3. ``time_modules`` again (``--repeat`` times), on the compile kept from the first call: the
   seconds it took and its budget's split (set-up: calibration, the clock's first call and
   its first profiler session; warm-up; rounds);
   once with the fixed count the earlier proofs used (8 iterations, 2 dropped) and once with
   the default options;
4. one more call under ``cProfile`` (``--profile``): the functions that took the time.

``--cache-out``: Inductor's cache (the compiled graphs, the autotuning results) packed into
``--out`` (parts of 15 MB), for a later run to start from: ``cat inductor_cache.tgz.* | tar
-xzf - -C "$TORCHINDUCTOR_CACHE_DIR"`` before it.

Usage: ``PYTHONPATH=. python benchmarks/gpu_compile_after.py --out results/``
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from compile_blocks import MODELS
from torch._dynamo.utils import compilation_time_metrics, counters

from moduleprofiler.timing import TimingOptions, time_modules
from moduleprofiler.timing.compiled.booking import book_compiled
from moduleprofiler.timing.compiled.capture import compiled_original, recorded_compile
from moduleprofiler.timing.compiled.trace import trace_compiled

FIXED = TimingOptions(num_iters=8, drop_first=2, progress=False)
"""The fixed count the earlier proofs used outside mode ``default``."""
DEFAULT = TimingOptions(progress=False)
CUDA = torch.device("cuda")


def _sync() -> None:
    if CUDA.type == "cuda":
        torch.cuda.synchronize()


def _timed(call: Any) -> float:
    started = time.perf_counter()
    call()
    _sync()
    return time.perf_counter() - started


def _counters() -> dict[str, Counter[str]]:
    return {group: Counter(values) for group, values in counters.items()}


def _since(before: dict[str, Counter[str]]) -> dict[str, dict[str, int]]:
    """The counters that moved since ``before``."""
    out = {}
    for group, values in counters.items():
        moved = {name: count - before.get(group, Counter())[name]
                 for name, count in values.items()
                 if count != before.get(group, Counter())[name]}
        if moved:
            out[group] = moved
    return out


def _metrics() -> dict[str, int]:
    return {name: len(times) for name, times in compilation_time_metrics.items()}


def _metrics_since(before: dict[str, int]) -> dict[str, float]:
    """Dynamo's compile-time metrics (seconds per timed function) recorded since ``before``."""
    return {name: round(sum(times[before.get(name, 0):]), 3)
            for name, times in compilation_time_metrics.items()
            if len(times) > before.get(name, 0)}


def phases(compiled: Any, x: Any) -> dict[str, Any]:
    """The clock's steps on a fresh recorded compile (what every pass did before a model's
    compile was kept for the next), one by one (seconds)."""
    out: dict[str, Any] = {}
    before, metrics = _counters(), _metrics()
    started = time.perf_counter()
    found = compiled_original(compiled)
    assert found is not None
    original, settings, _ = found
    run, recorder = recorded_compile(original, settings)

    def call() -> Any:
        return run(x)

    def eager() -> Any:
        return original(x)

    out["program_of_s"] = time.perf_counter() - started
    with torch.no_grad():
        out["first_call_s"] = _timed(call)
        out["first_call_counters"] = _since(before)
        out["first_call_metrics"] = _metrics_since(metrics)
        out["second_call_s"] = _timed(call)
        out["third_call_s"] = _timed(call)
        out["replay_s"] = [_timed(call) for _ in range(5)]
        out["eager_s"] = [_timed(eager) for _ in range(3)]
        sessions = []
        for count in (1, 1, 1, 4):
            started = time.perf_counter()
            trace = trace_compiled(call, count, CUDA)
            session_s = time.perf_counter() - started
            started = time.perf_counter()
            booking = book_compiled(recorder.by_key(), trace.calls, trace.ops, trace.kernels,
                                    count, recorder.versions(), trace.ranges,
                                    recorder.backward_keys())
            sessions.append({"iterations": count, "session_s": session_s,
                             "booking_s": time.perf_counter() - started,
                             "kernel_records": len(trace.kernels), "host_ops": len(trace.ops),
                             "coverage": booking.coverage})
        out["sessions"] = sessions
    out["counters"] = _since(before)
    return out


def again(compiled: Any, x: Any, options: TimingOptions) -> dict[str, Any]:
    """One more ``time_modules`` call: its seconds, its budget's split, the counters."""
    before, metrics = _counters(), _metrics()
    started = time.perf_counter()
    timing = time_modules(compiled, x, options=options)
    return {"seconds": time.perf_counter() - started, "budget": timing.timing.budget,
            "iterations": timing.iterations, "counters": _since(before),
            "metrics": _metrics_since(metrics),
            "device_ms": float(timing.to_df("module").set_index("module")
                               .loc["__root__", "device_ms"])}


def profiled(compiled: Any, x: Any, out: Path | None) -> str:
    """One ``time_modules`` call under cProfile: the top functions by cumulative time (the
    stats file written to ``out``)."""
    profile = cProfile.Profile()
    profile.enable()
    time_modules(compiled, x, options=FIXED)
    profile.disable()
    if out is not None:
        profile.dump_stats(str(out / "gpu_compile_after.prof"))
    text = io.StringIO()
    pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(70)
    return text.getvalue()


def pack_cache(out: Path) -> list[str]:
    """Inductor's cache (without Triton's own, which every benchmarked candidate fills) as
    parts of 15 MB in ``out``."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    root = cache_dir()
    listed = subprocess.run(
        ["bash", "-c", f"cd {root} && find . -path ./triton -prune -o -type f -print | "
         f"tar -czf - -T - | split -b 15M - {out}/inductor_cache.tgz."],
        capture_output=True, text=True)
    parts = sorted(p.name for p in out.glob("inductor_cache.tgz.*"))
    if listed.returncode or sum((out / p).stat().st_size for p in parts) > 30e6:
        for part in parts:  # too big for the way back: the autotuning results alone
            (out / part).unlink()
        subprocess.run(["bash", "-c", f"cd {root} && find . -path ./triton -prune -o "
                        f"\\( -name '*.best_config' -o -path './cache/*' -o -path "
                        f"'./fxgraph/*' \\) -type f -print | tar -czf - -T - | split -b 15M - "
                        f"{out}/inductor_cache.tgz."], check=False)
        parts = sorted(p.name for p in out.glob("inductor_cache.tgz.*"))
    return [f"{p} {(out / p).stat().st_size}" for p in parts]


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# command: {report['command']}", "",
             f"{report['model']}, torch {report['torch']}, {report['device']}, bf16, "
             f"torch.compile mode {report['mode']}", ""]
    if "first_s" in report:
        lines.append(f"- time_modules, first call (the clock's compile): "
                     f"{report['first_s']:.1f} s; budget {report.get('first_budget')}")
    phase = report.get("phases")
    if phase:
        lines += ["", "| phase of a fresh recorded compile | seconds |", "|---|---:|",
                  f"| recorded_compile | {phase['program_of_s']:.3f} |",
                  f"| first call (compile from the cache; CUDA graphs: warm-up) | "
                  f"{phase['first_call_s']:.3f} |",
                  f"| second call (CUDA graphs: recording) | {phase['second_call_s']:.3f} |",
                  f"| third call | {phase['third_call_s']:.3f} |",
                  f"| replays (5) | {', '.join(f'{s:.4f}' for s in phase['replay_s'])} |",
                  f"| eager original (3) | {', '.join(f'{s:.4f}' for s in phase['eager_s'])} |"]
        for session in phase.get("sessions", []):
            lines.append(f"| profiler session of {session['iterations']} iteration(s) / its "
                         f"booking ({session['kernel_records']} kernel records) | "
                         f"{session['session_s']:.3f} / {session['booking_s']:.3f} |")
        lines += ["", f"first call's counters: `{json.dumps(phase['first_call_counters'])}`",
                  "", f"first call's compile metrics (s): "
                  f"`{json.dumps(phase['first_call_metrics'])}`"]
    for label, runs in (("fixed count (8, 2 dropped)", report.get("again_fixed", [])),
                        ("default options", report.get("again_default", []))):
        for run in runs:
            budget = run["budget"] or {}
            lines.append(f"- time_modules again, {label}: {run['seconds']:.2f} s (set-up "
                         f"{budget.get('setup_s', 0):.2f} s, warm-up "
                         f"{budget.get('warmup_s', 0):.2f} s, rounds "
                         f"{budget.get('rounds_s', 0):.2f} s; {run['iterations']} traced "
                         f"iterations; device {run['device_ms']:.3f} ms); counters "
                         f"`{json.dumps(run['counters'].get('inductor', {}))}`; metrics "
                         f"`{json.dumps(run['metrics'])}`")
    if report.get("profile"):
        lines += ["", "```", report["profile"], "```"]
    if report.get("cache"):
        lines += ["", f"cache packed: {report['cache']}"]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--mode", default="max-autotune")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--no-phases", action="store_true")
    parser.add_argument("--cache-out", action="store_true")
    args = parser.parse_args()
    global CUDA
    CUDA = torch.device(args.device)
    stem = f"gpu_compile_after_{args.mode.replace('-', '_')}"
    model, x, _, _ = MODELS[args.model]()
    model = model.eval().to(CUDA, torch.bfloat16)
    x = x.to(CUDA, torch.bfloat16) if x.is_floating_point() else x.to(CUDA)
    report: dict[str, Any] = {
        "command": "python " + " ".join(sys.argv), "model": args.model, "mode": args.mode,
        "torch": torch.__version__, "cache_dir": os.environ.get("TORCHINDUCTOR_CACHE_DIR"),
        "device": torch.cuda.get_device_name() if CUDA.type == "cuda" else str(CUDA)}

    def write() -> None:
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"{stem}.json").write_text(json.dumps(report, indent=1, default=str))
            (args.out / f"{stem}.md").write_text(markdown(report))

    compiled = torch.compile(model, mode=args.mode)
    started = time.perf_counter()
    timing = time_modules(compiled, x, options=FIXED)
    report["first_s"] = time.perf_counter() - started
    report["first_budget"] = timing.timing.budget
    print(f"first call {report['first_s']:.1f} s", flush=True)
    write()
    if args.cache_out and args.out is not None:
        report["cache"] = pack_cache(args.out)
        write()
    if not args.no_phases:
        report["phases"] = phases(compiled, x)
        print(json.dumps(report["phases"], default=str), flush=True)
        write()
    for options, key in ((FIXED, "again_fixed"), (DEFAULT, "again_default")):
        report[key] = []
        for _ in range(args.repeat):
            report[key].append(again(compiled, x, options))
            print(key, json.dumps(report[key][-1], default=str), flush=True)
            write()
    if args.profile:
        report["profile"] = profiled(compiled, x, args.out)
        print(report["profile"], flush=True)
        write()


if __name__ == "__main__":
    main()
