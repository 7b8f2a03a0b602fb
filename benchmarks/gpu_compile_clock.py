"""The compiled clock on a GPU: ``time_modules`` of ``torch.compile``d models, per module,
side by side with eager (ResNet-50, ViT-B/16, GPT-2 small, a small Llama-style decoder; bf16,
forward; mode ``default``, or ``--mode max-autotune``, whose results go to
``gpu_compile_clock_max_autotune.md`` / ``.json``).

For each model it prints and writes (``--out``, after each model):

* coverage of the compiled graphs' kernel time by modules (target 0.99-1.01), and of all the
  device time of the compiled iterations;
* per top-level block: compiled device time (inclusive) in the model, eager device time
  (``compare_compiled``: the kernel clock), speed-up, launches before and after; for some
  blocks their device time compiled alone (input recorded from an eager forward), with the
  input in the model's own layout and in channels-last (convolutional models), and the kernels
  crossing the block's boundary in the model;
* the kernels fused across modules;
* the seconds ``time_modules`` takes on the compiled model after compilation (target < 10 s).

First, cheap probes: whether Inductor keeps provenance for a compiled backward graph on this
torch, and what the compiled clock books under ``mode="reduce-overhead"`` (CUDA graphs).

The models, a block compiled alone and the crossing kernels are ``compile_blocks.py``'s.

Usage: ``PYTHONPATH=. python benchmarks/gpu_compile_clock.py --out results/``
(``--mode max-autotune --no-first-call --no-probes --models resnet50,gpt2``)
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from compile_blocks import (
    MODELS,
    Small,
    alone_forward,
    block_inputs,
    crossing,
    kernel_difference,
    kernel_multiset,
    value,
)

from moduleprofiler.compiled import compare_compiled
from moduleprofiler.timing import TimingOptions, time_modules
from moduleprofiler.timing.clocks.compiled import CompiledClock, CompiledProgram
from moduleprofiler.timing.compiled.capture import recorded_compile

OPTIONS = TimingOptions(max_seconds=3.0, progress=False)
CUDA = torch.device("cuda")
"""The device measured (``--device``)."""


def measure(name: str, mode: str = "default", first_call: bool = True,
            partial: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """One model: the compiled clock's booking, eager against compiled, the blocks alone.
    ``partial`` is given the report as it grows (after the model, after each block alone)."""
    model, x, blocks, alone = MODELS[name]()
    model = model.eval().to(CUDA, torch.bfloat16)
    x = x.to(CUDA)
    if x.is_floating_point():
        x = x.to(torch.bfloat16)
    compiled = torch.compile(model, mode=mode)
    user_compile_s = None
    if first_call:  # the model's own compile (the clock compiles the model again, its own)
        started = time.perf_counter()
        with torch.no_grad():
            compiled(x)
        if CUDA.type == "cuda":
            torch.cuda.synchronize()
        user_compile_s = time.perf_counter() - started
        print(f"  {name}: the model's own first call {user_compile_s:.1f} s", flush=True)
    started = time.perf_counter()
    side = compare_compiled(compiled, x, OPTIONS)
    compare_s = time.perf_counter() - started
    print(f"  {name}: compare_compiled {compare_s:.1f} s", flush=True)
    started = time.perf_counter()
    clock = CompiledClock(CUDA, CompiledProgram.of(compiled, x))
    timing = time_modules(compiled, x, clock=clock, options=OPTIONS)
    after_s = time.perf_counter() - started
    frame = timing.to_df("module").set_index("module")
    versus = side.to_df("module").set_index("module")
    kernels = clock.kernels()
    rows = []
    for block in blocks:
        crossed = crossing(kernels, block)
        row: dict[str, Any] = {
            "block": block, "compiled_ms": float(frame.loc[block, "device_ms"]),
            "eager_ms": value(versus, block, "eager_ms"),
            "speedup_api": value(versus, block, "compile_speedup"),
            "eager_launches": value(versus, block, "eager_launches"),
            "compiled_launches": value(frame, block, "device_launches"),
            "crossing": [k for k, _ in crossed],
            "crossing_ms": sum(ms for _, ms in crossed),
            "kernels": dict(kernel_multiset(kernels, block))}
        compiled_ms, eager_ms = row["compiled_ms"], row["eager_ms"]
        row["speedup"] = eager_ms / compiled_ms if eager_ms and compiled_ms else None
        rows.append(row)
    root = float(frame.loc["__root__", "device_ms"])
    report = {
        "model": name, "mode": mode, "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if CUDA.type == "cuda" else str(CUDA),
        "coverage_graphs": clock.coverage,
        "coverage_all": (timing.timing.device_booked_ms / timing.timing.device_total_ms
                         if timing.timing.device_total_ms else None),
        "compiled_ms": root, "eager_ms": value(versus, "__root__", "eager_ms"),
        "speedup": value(versus, "__root__", "compile_speedup"),
        "graphs": clock.graphs, "break_reasons": dict(clock.break_reasons),
        "kernels": len(kernels), "iterations": timing.iterations,
        "user_compile_s": user_compile_s, "compare_compiled_s": compare_s,
        "time_modules_after_compilation_s": after_s,
        "budget": timing.timing.budget,
        "blocks_sum_ms": sum(r["compiled_ms"] for r in rows), "blocks": rows,
        "fused_across": [{"kernel": k.name, "ms": k.time_ms, "booked_to": k.module or
                          "__root__", "fused_across": list(k.fused_across)}
                         for k in clock.fused_across()],
        "warnings": list(timing.warnings)}
    if partial is not None:
        partial(report)
    inputs = block_inputs(model, x, alone)
    for row in rows:
        block = row["block"]
        if block not in inputs:
            continue
        args, kwargs = inputs[block]
        variants = [("", args)]
        if args and isinstance(args[0], torch.Tensor) and args[0].dim() == 4:
            variants.append(("_channels_last", (
                args[0].contiguous(memory_format=torch.channels_last), *args[1:])))
        for suffix, given in variants:
            try:
                found = alone_forward(model.get_submodule(block), given, kwargs, CUDA, mode,
                                      OPTIONS)
            except Exception as error:  # one block's failure is reported, the rest runs
                row[f"alone{suffix}_error"] = f"{type(error).__name__}: {error}"
                continue
            row[f"alone{suffix}_ms"] = found["ms"]
            row[f"alone{suffix}_launches"] = found["launches"]
            row[f"alone{suffix}_iterations"] = found["iterations"]
            row[f"alone{suffix}_kernels"] = found["kernels"]
            row[f"alone{suffix}_difference"] = kernel_difference(
                Counter(row["kernels"]), Counter(found["kernels"]))
        print(f"  {name}: {block} alone done", flush=True)
        if partial is not None:
            partial(report)
    return report


def same_kernels(row: dict[str, Any]) -> tuple[str, float | None] | None:
    """The block compiled alone that ran the kernels the block ran in the model (its input
    as recorded, else channels-last): ``(variant, in model / alone)``; ``None``: neither
    did."""
    for suffix, variant in (("", "as recorded"), ("_channels_last", "channels-last")):
        difference = row.get(f"alone{suffix}_difference")
        alone = row.get(f"alone{suffix}_ms")
        if difference is not None and not any(difference.values()):
            return variant, (row["compiled_ms"] / alone if alone else None)
    return None


def probes() -> dict[str, Any]:
    """Backward provenance on this torch; the compiled clock under reduce-overhead."""
    out: dict[str, Any] = {"torch": torch.__version__}
    model = Small().to(CUDA)
    x = torch.randn(64, 256, device=CUDA)
    try:
        run, recorder = recorded_compile(model)
        run(x).sum().backward()
        out["backward_graph_kernels"] = [len(g.kernels) for g in recorder.graphs
                                         if g.backward]
        out["forward_graph_kernels"] = [len(g.kernels) for g in recorder.graphs
                                        if not g.backward]
        out["backward_notes"] = recorder.notes
    except Exception as error:
        out["backward_error"] = f"{type(error).__name__}: {error}"
    try:
        compiled = torch.compile(Small().to(CUDA), mode="reduce-overhead")
        clock = CompiledClock(CUDA, CompiledProgram.of(compiled, x))
        timing = time_modules(compiled, x, clock=clock, options=OPTIONS)
        frame = timing.to_df("module").set_index("module")
        out["reduce_overhead"] = {
            "coverage": clock.coverage, "booked_ms": timing.timing.device_booked_ms,
            "total_ms": timing.timing.device_total_ms,
            "device_ms": {m: float(v) for m, v in frame["device_ms"].items()},
            "launches": {m: float(v) for m, v in frame["device_launches"].items()},
            "kernels": [(k.name, k.module, k.launches) for k in clock.kernels()],
            "warnings": list(timing.warnings)}
    except Exception as error:
        out["reduce_overhead_error"] = f"{type(error).__name__}: {error}"
    return out


def markdown(report: dict[str, Any]) -> str:
    if "error" in report:
        return f"## {report['model']}: failed\n\n```\n{report['traceback']}\n```\n"
    lines = [f"## {report['model']} (torch {report['torch']}, {report['device']}, bf16, "
             f"torch.compile mode {report['mode']}, forward)", "",
             f"- coverage of the compiled graphs' kernel time by modules: "
             f"{report['coverage_graphs']:.4f}; of all device time of the compiled "
             f"iterations: {report['coverage_all']:.4f}",
             f"- compiled device time per forward: {report['compiled_ms']:.3f} ms, eager "
             f"{report['eager_ms']:.3f} ms ({report['speedup']:.2f}x); graphs: "
             f"{report['graphs']}, kernels: {report['kernels']}; top-level blocks sum to "
             f"{report['blocks_sum_ms'] / report['compiled_ms']:.4f} of the model; traced "
             f"iterations: {report['iterations']}",
             f"- time_modules on the compiled model after compilation: "
             f"{report['time_modules_after_compilation_s']:.1f} s (compare_compiled, its "
             f"first call: {report['compare_compiled_s']:.1f} s"
             + (f"; the model's own first call, compiling: {report['user_compile_s']:.1f} s"
                if report.get("user_compile_s") is not None else "") + ")", "",
             "| block | compiled ms | eager ms | speed-up | launches eager -> compiled | "
             "alone ms | in model / alone | alone, channels-last ms | in model / alone "
             "(channels-last) | kernels crossing its boundary (ms) |",
             "|---|---:|---:|---:|---|---:|---:|---:|---:|---|"]

    def num(value: Any, form: str = ".3f") -> str:
        return "" if value is None else format(value, form)

    for row in report["blocks"]:
        alone, last = row.get("alone_ms"), row.get("alone_channels_last_ms")
        crossed = (f"{len(row['crossing'])} ({row['crossing_ms']:.3f})" if row["crossing"]
                   else "none")
        lines.append(
            f"| {row['block']} | {row['compiled_ms']:.3f} | {num(row['eager_ms'])} | "
            f"{num(row['speedup'], '.2f')} | {num(row['eager_launches'], '.0f')} -> "
            f"{num(row['compiled_launches'], '.0f')} | {num(alone)} | "
            f"{num(row['compiled_ms'] / alone if alone else None)} | {num(last)} | "
            f"{num(row['compiled_ms'] / last if last else None)} | {crossed} |")
    lines += ["", "| fused kernel | ms | booked to | fuses work of |", "|---|---:|---|---|"]
    for row in report["fused_across"][:12]:
        lines.append(f"| `{row['kernel']}` | {row['ms']:.4f} | {row['booked_to']} | "
                     f"{', '.join(row['fused_across'])} |")
    lines.append(f"\n({len(report['fused_across'])} fused-across kernels in all)")
    lines += ["", "Blocks against themselves compiled alone, by the kernels they ran (device "
              "kernels booked inside the block; generated kernels less their graph's number):",
              "", "| block | in model ms | alone: the same kernels? | in model / alone | "
              "alone, channels-last: the same kernels? | in model / alone (channels-last) | "
              "what differs (in model only / alone only) |", "|---|---:|---|---:|---|---:|---|"]
    for row in report["blocks"]:
        if "alone_difference" not in row and "alone_channels_last_difference" not in row:
            continue
        cells = []
        differs = []
        for suffix in ("", "_channels_last"):
            difference = row.get(f"alone{suffix}_difference")
            alone = row.get(f"alone{suffix}_ms")
            if difference is None:
                cells += ["", ""]
                continue
            same = not any(difference.values())
            cells += ["same" if same else "different",
                      num(row["compiled_ms"] / alone if alone else None)]
            if not same:
                differs.append(_differs(difference))
        lines.append(f"| {row['block']} | {row['compiled_ms']:.3f} | {' | '.join(cells)} | "
                     f"{'; '.join(differs)} |")
    return "\n".join(lines) + "\n"


def _differs(difference: dict[str, dict[str, int]]) -> str:
    """A kernel difference in a table cell: ``+name x2`` in the model only, ``-name`` alone
    only (names cut to 48 characters)."""
    def cut(name: str) -> str:
        return name if len(name) <= 48 else name[:45] + "..."

    parts = [f"+`{cut(name)}`" + (f" x{count}" if count > 1 else "")
             for name, count in sorted(difference["in_model_only"].items())]
    parts += [f"-`{cut(name)}`" + (f" x{count}" if count > 1 else "")
              for name, count in sorted(difference["alone_only"].items())]
    return " ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--models", default="resnet50,gpt2,vit_b_16,llama")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--no-probes", action="store_true")
    parser.add_argument("--mode", default="default", help="torch.compile's mode")
    parser.add_argument("--no-first-call", action="store_true",
                        help="skip the model's own first call (its compile, timed)")
    parser.add_argument("--stem", default=None,
                        help="the results' file name without suffix (default: by mode)")
    args = parser.parse_args()
    global CUDA, OPTIONS
    CUDA = torch.device(args.device)
    if args.mode != "default":  # a slow set-up would leave a budget one traced iteration
        OPTIONS = TimingOptions(num_iters=8, drop_first=2, progress=False)
    stem = args.stem or ("gpu_compile_clock" if args.mode == "default"
                         else f"gpu_compile_clock_{args.mode.replace('-', '_')}")
    out: dict[str, Any] = {"probes": {} if args.no_probes else probes(), "models": []}
    print(json.dumps(out["probes"], indent=1, default=str), flush=True)

    def write() -> None:
        if args.out is None:
            return
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{stem}.json").write_text(json.dumps(out, indent=1,
                                                                    default=str))
        (args.out / f"{stem}.md").write_text(
            "".join(map(markdown, out["models"])) + "\n## probes\n\n```json\n"
            + json.dumps(out["probes"], indent=1, default=str) + "\n```\n")

    write()
    for name in args.models.split(","):
        started = time.perf_counter()
        out["models"].append({"model": name, "error": "unfinished", "traceback": ""})

        def partial(report: dict[str, Any], started: float = started) -> None:
            # a run stopped early keeps what it had
            out["models"][-1] = {**report, "wall_s": time.perf_counter() - started}
            write()

        try:
            report = measure(name, args.mode, not args.no_first_call, partial)
        except Exception as error:  # one model's failure is reported, the others still run
            report = {"model": name, "error": f"{type(error).__name__}: {error}",
                      "traceback": traceback.format_exc()}
        report["wall_s"] = time.perf_counter() - started
        out["models"][-1] = report
        print(markdown(report), flush=True)
        write()


if __name__ == "__main__":
    main()
