"""Compiled models, module by module, on a GPU: ResNet-50 and GPT-2 small, torch.compile's
default mode, forward in bf16.

For each model it prints and writes (``--out``):

* the coverage of the compiled graphs' kernel time by modules (target 0.99-1.01);
* per top-level block: its compiled kernel time (inclusive) against its eager kernel time
  (``time_modules``' kernel clock), and the speed-up;
* per top-level block, its time compiled alone (its input recorded from an eager forward),
  and the kernels that cross its boundary in the whole model (fused with work outside it);
* the kernels fused across modules (longest first);
* how long ``time_compiled`` takes on the model once it is compiled (a second call: the
  graphs come from Inductor's cache), against the first call (compiling).

Usage: ``PYTHONPATH=. python benchmarks/gpu_compile_modules.py --out results/``
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from pathlib import Path
from typing import Any

import torch
from torch import nn

from moduleprofiler.compiled import CompiledTiming, time_compiled
from moduleprofiler.timing import time_modules

ALONE = {"resnet50": ["conv1", "layer1", "layer2", "layer3", "layer4", "fc"],
         "gpt2": ["transformer.h.0", "transformer.h.5", "transformer.h.11", "lm_head"]}
"""The blocks compiled alone as well (a subset: each is one more compile)."""


def resnet50() -> tuple[nn.Module, Any, list[str]]:
    from torchvision.models import resnet50 as build

    model = build(weights=None).eval()
    blocks = ["conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4",
              "avgpool", "fc"]
    return model, torch.randn(32, 3, 224, 224), blocks


def gpt2() -> tuple[nn.Module, Any, list[str]]:
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config(use_cache=False)).eval()  # no cache grows per call
    blocks = ["transformer.wte", "transformer.wpe", "transformer.drop",
              *(f"transformer.h.{i}" for i in range(12)), "transformer.ln_f", "lm_head"]
    return model, torch.randint(0, 50257, (8, 512)), blocks


def eager_device_ms(model: nn.Module, x: Any) -> dict[str, float]:
    """Per module: its eager inclusive kernel time (median per call), from time_modules."""
    timing = time_modules(model, x, clock="kernels", max_seconds=8.0, progress=False)
    frame = timing.to_df("module")
    return dict(zip(frame["module"], frame["inclusive_median_ms"], strict=True))


def block_inputs(model: nn.Module, x: Any, paths: list[str]) -> dict[str, tuple[Any, Any]]:
    """Each block's (args, kwargs) in one eager forward (pre-hooks, removed after)."""
    seen: dict[str, tuple[Any, Any]] = {}
    handles = []
    for path in paths:
        def keep(module: nn.Module, args: Any, kwargs: Any, path: str = path) -> None:
            seen.setdefault(path, (args, kwargs))
        handles.append(model.get_submodule(path).register_forward_pre_hook(
            keep, with_kwargs=True))
    try:
        with torch.no_grad():
            model(x)
    finally:
        for handle in handles:
            handle.remove()
    return seen


def crossing(result: CompiledTiming, block: str) -> list[tuple[str, float]]:
    """Kernels that fuse work of ``block`` with work outside it: (name, ms)."""
    inside = lambda path: path == block or path.startswith(block + ".")  # noqa: E731
    return [(row.name, row.time_ms) for row in result.kernels
            if any(map(inside, row.fused_across)) and not inside(row.module)]


def measure(name: str, model: nn.Module, x: Any, blocks: list[str]) -> dict[str, Any]:
    device = torch.device("cuda")
    model = model.to(device, torch.bfloat16)
    x = x.to(device)
    if x.is_floating_point():
        x = x.to(torch.bfloat16)
    compiled = torch.compile(model)
    started = time.perf_counter()
    first = time_compiled(compiled, x, iterations=20)
    first_s = time.perf_counter() - started
    started = time.perf_counter()
    result: CompiledTiming = time_compiled(compiled, x, iterations=20)
    again_s = time.perf_counter() - started
    eager = eager_device_ms(model, x)
    inputs = block_inputs(model, x, ALONE[name])
    alone = {}
    for block, (args, kwargs) in inputs.items():
        alone[block] = time_compiled(model.get_submodule(block), *args, iterations=20,
                                     **kwargs).inclusive_ms("")
    rows = []
    for block in blocks:
        compiled_ms = result.inclusive_ms(block)
        eager_ms = eager.get(block)
        crossed = crossing(result, block)
        rows.append({"block": block, "compiled_ms": compiled_ms, "eager_ms": eager_ms,
                     "speedup": (eager_ms / compiled_ms) if eager_ms and compiled_ms else None,
                     "alone_ms": alone.get(block),
                     "crossing": [k for k, _ in crossed],
                     "crossing_ms": sum(ms for _, ms in crossed)})
    fused = [{"kernel": row.name, "ms": row.time_ms, "booked_to": row.module or "__root__",
              "fused_across": list(row.fused_across)} for row in result.fused_across()]
    return {
        "model": name, "torch": torch.__version__, "device": torch.cuda.get_device_name(),
        "coverage": result.coverage, "compiled_kernel_ms": result.compiled_ms,
        "eager_kernel_ms": eager.get("__root__"), "iteration_ms": result.iteration_ms,
        "graphs": result.graphs, "kernels": len(result.kernels),
        "outside_ms": result.outside_ms, "break_reasons": result.break_reasons,
        "time_compiled_first_s": first_s, "compile_s": first.compile_s,
        "time_compiled_after_compilation_s": again_s,
        "blocks_sum_ms": sum(r["compiled_ms"] for r in rows),
        "blocks": rows, "fused_across": fused,
        "unmatched_ms": dict(sorted(result.unmatched.items(), key=lambda kv: -kv[1])[:10]),
        "notes": result.notes,
    }


def markdown(report: dict[str, Any]) -> str:
    lines = [f"## {report['model']} (torch {report['torch']}, {report['device']}, bf16, "
             "torch.compile mode default, forward)", "",
             f"- coverage of the compiled graphs' kernel time by modules: "
             f"{report['coverage']:.4f}",
             f"- compiled kernel time per forward: {report['compiled_kernel_ms']:.3f} ms "
             f"(eager: {report['eager_kernel_ms']:.3f} ms); graphs: {report['graphs']}, "
             f"kernels: {report['kernels']}",
             f"- time_compiled: first call {report['time_compiled_first_s']:.1f} s (of which "
             f"the first forward, compiling: {report['compile_s']:.1f} s); after compilation "
             f"{report['time_compiled_after_compilation_s']:.1f} s", "",
             f"- kernel time outside the compiled graphs: {report['outside_ms']:.3f} ms; "
             f"graph breaks: {sum(report['break_reasons'].values())}", "",
             "| block | compiled ms (in the model) | eager ms | speed-up | compiled alone ms "
             "| in model / alone | kernels crossing its boundary (ms) |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for row in report["blocks"]:
        eager = f"{row['eager_ms']:.3f}" if row["eager_ms"] is not None else "n/a"
        speed = f"{row['speedup']:.2f}x" if row["speedup"] is not None else "n/a"
        alone = row.get("alone_ms")
        ratio = (f"{row['compiled_ms'] / alone:.3f}" if alone else "")
        crossed = (f"{len(row['crossing'])} ({row['crossing_ms']:.3f})"
                   if row["crossing"] else "none")
        lines.append(f"| {row['block']} | {row['compiled_ms']:.3f} | {eager} | {speed} | "
                     f"{'' if alone is None else f'{alone:.3f}'} | {ratio} | {crossed} |")
    lines += ["", "| fused kernel | ms | booked to | fuses work of |", "|---|---:|---|---|"]
    for row in report["fused_across"][:15]:
        lines.append(f"| `{row['kernel']}` | {row['ms']:.4f} | {row['booked_to']} | "
                     f"{', '.join(row['fused_across'])} |")
    lines.append(f"\n({len(report['fused_across'])} fused-across kernels in all)")
    if report["unmatched_ms"]:
        lines.append(f"\nunmatched kernels (ms per forward): {report['unmatched_ms']}")
    if report["notes"]:
        lines.append(f"\nnotes: {report['notes']}")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--models", default="resnet50,gpt2")
    args = parser.parse_args()
    builders = {"resnet50": resnet50, "gpt2": gpt2}
    reports = []
    for name in args.models.split(","):
        model, x, blocks = builders[name]()
        try:
            report = measure(name, model, x, blocks)
        except Exception as error:  # one model's failure is reported, the others still run
            report = {"model": name, "error": f"{type(error).__name__}: {error}",
                      "traceback": traceback.format_exc()}
            print(json.dumps(report))
            continue
        reports.append(report)
        print(markdown(report), flush=True)
        if args.out is not None:  # after each model: a run cut short keeps what it measured
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "gpu_compile_modules.json").write_text(json.dumps(reports, indent=1))
            (args.out / "gpu_compile_modules.md").write_text("".join(map(markdown, reports)))


if __name__ == "__main__":
    main()
