"""The compiled clock on a GPU beyond the forward in mode ``default``: compiled submodules
inside an eager model, CUDA graphs (``reduce-overhead``), ``max-autotune`` and the training
step (bf16).

Sections, in order, each skipped once ``--budget`` seconds have gone (a section's failure is
reported and the next one runs):

* ``small_reduce_overhead``: a three-layer model under ``reduce-overhead``: coverage, the
  kernels per module, the CUDA graph launches (the notes);
* ``resnet50_layer3`` / ``llama_layers``: ResNet-50 (batch 32) with ``layer3 =
  torch.compile(layer3)``, and the Llama-style decoder (8 x 512 tokens) with every decoder
  layer compiled in place (``.compile()``): coverage of the program's kernel time, each
  top-level block's device time against the same model eager (the kernel clock), graphs;
* ``llama_reduce_overhead``, ``llama_max_autotune``, ``gpt2_max_autotune``,
  ``resnet50_max_autotune``: the whole model compiled in that mode against ``default`` and
  eager: coverage, device time per forward, speed-up, kernels, graph launches;
* ``<model>_train`` (``llama``, ``gpt2``, ``resnet50``, ``vit_b_16``; ``_max_autotune`` for
  that mode): ``train_step_times`` of the compiled model, its backward booked through the
  compiled backward graphs: coverage of the forward's and of the backward's kernel time,
  each top-level block's forward and backward device time against the eager model's (the
  kernel clock), the seconds the pass took;
* ``<model>_train_blocks``: the same, without the second pass, and each of some top-level
  blocks compiled alone, a training step on the input it gets in the model, against its
  forward and backward in the model, the kernels crossing each block's boundary (forward and
  backward) and the kernels fused across modules;
* ``llama_replay_order``: under ``reduce-overhead``, one traced iteration's device kernels in
  the order the device ran them beside the graph's kernels in call order, with the module
  each was booked to.

Usage: ``PYTHONPATH=. python benchmarks/gpu_compile_modes.py --out results/``
(``--markdown results/gpu_compile_training_blocks.json``: its block tables, no device needed)
"""

from __future__ import annotations

import argparse
import json
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from compile_blocks import MODELS, alone_train, block_inputs, crossing, inside, value
from torch import nn

from moduleprofiler.timing import TimingOptions, time_modules, train_step_times
from moduleprofiler.timing.clocks.compiled import CompiledClock, CompiledProgram
from moduleprofiler.timing.compiled.booking import book_compiled
from moduleprofiler.timing.compiled.trace import trace_compiled

OPTIONS = TimingOptions(max_seconds=3.0, progress=False)
STEPS = TimingOptions(num_iters=10, drop_first=2, progress=False)
"""Training steps: a fixed count (the clock's compile of a training step takes longer than
a budget's worth of seconds)."""
CUDA = torch.device("cuda")


def ready(name: str, bf16: bool = True) -> tuple[nn.Module, torch.Tensor, list[str], list[str]]:
    """``compile_blocks``' model ``name`` on the device (bf16 unless told): the model, its
    input, its top-level blocks and those also compiled alone."""
    model, x, blocks, alone = MODELS[name]()
    model = model.eval().to(CUDA, torch.bfloat16 if bf16 else torch.float32)
    x = x.to(CUDA)
    if x.is_floating_point() and bf16:
        x = x.to(torch.bfloat16)
    return model, x, blocks, alone


def timed(model: nn.Module, x: Any, blocks: list[str]) -> dict[str, Any]:
    """The compiled clock's timing of ``model`` (compiled whole or in part)."""
    started = time.perf_counter()
    with torch.no_grad():
        model(x)  # the model's own first call (compiling what it compiles)
    torch.cuda.synchronize()
    first_s = time.perf_counter() - started
    started = time.perf_counter()
    clock = CompiledClock(CUDA, CompiledProgram.of(model, x))
    timing = time_modules(model, x, clock=clock, options=OPTIONS)
    frame = timing.to_df("module").set_index("module")
    facts = timing.timing.compiled
    return {
        "first_call_s": first_s, "time_modules_s": time.perf_counter() - started,
        "coverage": clock.coverage,
        "coverage_all": (timing.timing.device_booked_ms / timing.timing.device_total_ms
                         if timing.timing.device_total_ms else None),
        "device_ms": value(frame, "__root__", "device_ms"),
        "launches": value(frame, "__root__", "device_launches"),
        "graphs": clock.graphs, "kernels": len(clock.kernels()),
        "breaks": [dict(module=r.breaks_in, reason=r.reason) for r in facts.breaks]
        if facts else [],
        "blocks": {block: {"device_ms": value(frame, block, "device_ms"),
                           "launches": value(frame, block, "device_launches")}
                   for block in blocks},
        "unmatched": sorted(clock.booking.unmatched)[:8] if clock.booking else [],
        "notes": list(timing.warnings)}


def eager(model: nn.Module, x: Any, blocks: list[str]) -> dict[str, Any]:
    """The eager model under the kernel clock."""
    timing = time_modules(model, x, clock="kernels", options=OPTIONS)
    frame = timing.to_df("module").set_index("module")
    return {"device_ms": value(frame, "__root__", "device_ms"),
            "blocks": {block: value(frame, block, "device_ms") for block in blocks}}


def small_reduce_overhead() -> dict[str, Any]:
    model, x, blocks, _ = ready("small", bf16=False)
    out = timed(torch.compile(model, mode="reduce-overhead"), x, blocks)
    out["eager"] = eager(model, x, blocks)
    return out


def partly(name: str, compile_parts: Callable[[nn.Module], None]) -> dict[str, Any]:
    model, x, blocks, _ = ready(name)
    before = eager(model, x, blocks)
    compile_parts(model)
    out = timed(model, x, blocks)
    out["eager"] = before
    return out


def resnet50_layer3() -> dict[str, Any]:
    def parts(model: nn.Module) -> None:
        model.layer3 = torch.compile(model.layer3)

    out = partly("resnet50", parts)
    out["blocks"]["layer3._orig_mod"] = out["blocks"].pop("layer3", None)
    return out


def llama_layers() -> dict[str, Any]:
    def parts(model: nn.Module) -> None:
        for layer in model.model.layers:
            layer.compile()

    return partly("llama", parts)


def whole(name: str, mode: str) -> dict[str, Any]:
    model, x, blocks, _ = ready(name)
    out = timed(torch.compile(model, mode=mode), x, blocks)
    out["default"] = timed(torch.compile(model), x, blocks)
    out["eager"] = eager(model, x, blocks)
    out["speedup_vs_eager"] = (out["eager"]["device_ms"] / out["device_ms"]
                               if out["device_ms"] else None)
    out["speedup_vs_default"] = (out["default"]["device_ms"] / out["device_ms"]
                                 if out["device_ms"] else None)
    return out


def _phases(frame: pd.DataFrame, block: str) -> dict[str, float | None]:
    return {"forward_ms": value(frame, block, "device_ms"),
            "backward_ms": value(frame, block, "backward_device_ms")}


def train(name: str, mode: str = "default", again: bool = True, alone: bool = False
          ) -> dict[str, Any]:
    """``train_step_times`` of the model compiled in ``mode`` (its backward booked through
    the compiled backward graphs) against the eager model's (the kernel clock).

    ``again``: a second pass (Inductor's cache) is timed too. ``alone``: each block of the
    model's list compiled alone, a training step with the input it gets in the model (same
    dtype, layout and ``requires_grad``), against its forward and backward in the model, with
    the kernels crossing its boundary; the kernels fused across modules are listed."""
    model, x, blocks, alone_blocks = ready(name)
    model.train()
    compiled = torch.compile(model, mode=mode)
    started = time.perf_counter()
    clock = CompiledClock(CUDA, CompiledProgram.of(compiled, x), backward=True)
    timing = train_step_times(compiled, x, clock=clock, options=STEPS)
    wall_s = time.perf_counter() - started
    print(f"  compiled step timed in {wall_s:.1f} s", flush=True)
    frame = timing.to_df("module").set_index("module")
    rows = clock.kernels()
    out: dict[str, Any] = {"mode": mode, "train_step_times_s": wall_s}
    if again:
        started = time.perf_counter()
        repeated = train_step_times(compiled, x, clock=CompiledClock(
            CUDA, CompiledProgram.of(compiled, x), backward=True), options=STEPS)
        out["train_step_times_again_s"] = time.perf_counter() - started
        out["again_model"] = _phases(repeated.to_df("module").set_index("module"), "__root__")
    eager_timing = train_step_times(model, x, clock="kernels" if CUDA.type == "cuda" else "cpu",
                                    options=STEPS)
    plain = eager_timing.to_df("module").set_index("module")
    out.update({
        "clock": timing.clock, "coverage": clock.coverage,
        "backward_coverage": clock.backward_coverage,
        "forward_kernels": sum(not row.backward for row in rows),
        "backward_kernels": sum(row.backward for row in rows),
        "backward_fused_across": sum(row.backward and bool(row.fused_across) for row in rows),
        "model": _phases(frame, "__root__"), "eager_model": _phases(plain, "__root__"),
        "blocks": {block: {"compiled": _phases(frame, block), "eager": _phases(plain, block)}
                   for block in blocks},
        "backward_root_kernels": sorted(
            ((row.name, round(row.time_ms, 4)) for row in rows
             if row.backward and row.module == "" and not row.fused_across),
            key=lambda item: -item[1])[:10],
        "unmatched": sorted(clock.booking.unmatched)[:8] if clock.booking else [],
        "notes": list(timing.warnings)})
    if not alone:
        return out
    for block in blocks:
        found = out["blocks"][block]
        found["forward_kernels"] = sum(not r.backward and inside(r.module, block) for r in rows)
        found["backward_kernels"] = sum(r.backward and inside(r.module, block) for r in rows)
        for phase, backward in (("forward", False), ("backward", True)):
            crossed = crossing(rows, block, backward)
            found[f"{phase}_crossing"] = [kernel for kernel, _ in crossed]
            found[f"{phase}_crossing_ms"] = sum(ms for _, ms in crossed)
    out["fused_across"] = [
        {"kernel": k.name, "backward": k.backward, "ms": k.time_ms,
         "booked_to": k.module or "__root__", "fused_across": list(k.fused_across)}
        for k in sorted(clock.fused_across(), key=lambda k: -k.time_ms)]
    inputs = block_inputs(model, x, alone_blocks, grad=True)
    for block in alone_blocks:
        args, kwargs = inputs[block]
        try:
            out["blocks"][block]["alone"] = alone_train(model.get_submodule(block), args,
                                                        kwargs, CUDA, mode, STEPS)
        except Exception as error:  # one block's failure is reported, the rest runs
            out["blocks"][block]["alone"] = {"error": f"{type(error).__name__}: {error}"}
        print(f"  {block} alone: {out['blocks'][block]['alone']}", flush=True)
    return out


def replay_order(mode: str = "reduce-overhead") -> dict[str, Any]:
    """One traced iteration of the Llama-style decoder's program under CUDA graphs: the
    device kernels in the order they ran, the graph's kernels in call order, the modules'
    booked time."""
    model, x, _, _ = ready("llama")
    program = CompiledProgram.of(torch.compile(model, mode=mode), x)
    with torch.no_grad():
        for _ in range(4):
            program.compiled()
        torch.cuda.synchronize()
        trace = trace_compiled(program.compiled, 1, CUDA)
    recorder = program.recorder
    graphs = {graph.key: graph.kernels for graph in recorder.graphs}
    booking = book_compiled(recorder.by_key(), trace.calls, trace.ops, trace.kernels, 1,
                            recorder.versions(), trace.ranges)
    ran = [(record.name[:60], record.duration) for record in
           sorted(trace.kernels, key=lambda r: r.start)]
    return {"graph_kernels": {key: [(k.name[:60], k.position, k.module, k.extern_op)
                                    for k in kernels] for key, kernels in graphs.items()},
            "device_order": ran, "coverage": booking.coverage,
            "module_ns": {path: times[0] for path, times in booking.module_ns.items()}}


def rebook_replay(path: Path) -> dict[str, float]:
    """The ``llama_replay_order`` section of a results file booked again by today's rules (no
    device needed): each module's kernel time (us) in the recorded replay."""
    from moduleprofiler.timing.compiled.booking import GraphCall, KernelRecord
    from moduleprofiler.timing.compiled.kernels import CompiledKernel

    section = json.loads(path.read_text())["sections"]["llama_replay_order"]
    graphs = {key: [CompiledKernel(name, position, (module,))
                    for name, position, module, _ in kernels]
              for key, kernels in section["graph_kernels"].items()}
    (key,) = graphs
    # the first kernel is the input's copy, before the replay's one launch
    copy, *replay = section["device_order"]
    kernels = [KernelRecord(name, ns, 1, 50, start=100 + i) for i, (name, ns)
               in enumerate(replay)]
    booking = book_compiled(graphs, [GraphCall(key, 1, 0, 1000)], [], kernels, 1)
    out = {module: times[0] / 1e3 for module, times in booking.module_ns.items()}
    out[""] = out.get("", 0.0) + copy[1] / 1e3
    return out


def blocks_markdown(report: dict[str, Any]) -> str:
    """The ``<model>_train_blocks`` sections of a results file as tables: per top-level
    block, its forward and backward in the model against eager and against the block
    compiled alone, the kernels crossing its boundary; the longest kernels fused across
    modules."""
    def num(value: Any, form: str = ".3f") -> str:
        return "" if value is None else format(value, form)

    def crossed(block: dict[str, Any], phase: str) -> str:
        kernels = block.get(f"{phase}_crossing") or []
        return f"{len(kernels)} ({block[f'{phase}_crossing_ms']:.3f})" if kernels else "none"

    lines = []
    for name, section in report["sections"].items():
        if not name.endswith("_train_blocks") or "blocks" not in section:
            continue
        model, eager_model = section["model"], section["eager_model"]
        lines += [
            f"## {name[:-len('_train_blocks')]} (torch {report['torch']}, {report['device']}, "
            f"bf16, torch.compile mode {section['mode']}, training step)", "",
            f"- coverage of the compiled graphs' kernel time by modules: forward "
            f"{section['coverage']:.4f}, backward {section['backward_coverage']:.4f}",
            f"- forward {model['forward_ms']:.3f} ms (eager {eager_model['forward_ms']:.3f}), "
            f"backward {model['backward_ms']:.3f} ms (eager {eager_model['backward_ms']:.3f}); "
            f"kernels {section['forward_kernels']} / {section['backward_kernels']}; "
            f"the model's compiled step timed in {section['train_step_times_s']:.1f} s", "",
            "| block | fwd ms (eager) | fwd speed-up | bwd ms (eager) | bwd speed-up | kernels "
            "fwd / bwd | alone fwd ms | in model / alone, fwd | alone bwd ms | in model / "
            "alone, bwd | crossing kernels fwd (ms) | crossing kernels bwd (ms) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
        for block, found in section["blocks"].items():
            compiled, eager_block = found["compiled"], found["eager"]
            alone = found.get("alone") or {}
            fwd, bwd = compiled["forward_ms"], compiled["backward_ms"]
            lines.append(
                f"| {block} | {num(fwd)} ({num(eager_block['forward_ms'])}) | "
                f"{num(eager_block['forward_ms'] / fwd if fwd else None, '.2f')} | "
                f"{num(bwd)} ({num(eager_block['backward_ms'])}) | "
                f"{num(eager_block['backward_ms'] / bwd if bwd else None, '.2f')} | "
                f"{found['forward_kernels']} / {found['backward_kernels']} | "
                f"{num(alone.get('forward_ms'))} | "
                f"{num(fwd / alone['forward_ms'] if alone.get('forward_ms') else None)} | "
                f"{num(alone.get('backward_ms'))} | "
                f"{num(bwd / alone['backward_ms'] if alone.get('backward_ms') else None)} | "
                f"{crossed(found, 'forward')} | {crossed(found, 'backward')} |")
        fused = section.get("fused_across", [])
        lines += ["", f"{sum(not k['backward'] for k in fused)} forward and "
                  f"{sum(k['backward'] for k in fused)} backward kernels fused across "
                  "modules; the longest:", "",
                  "| kernel | phase | ms | booked to | fuses work of |", "|---|---|---:|---|---|"]
        for kernel in fused[:10]:
            spans = ", ".join(kernel["fused_across"])
            lines.append(f"| `{kernel['kernel'][:70]}` | "
                         f"{'bwd' if kernel['backward'] else 'fwd'} | {kernel['ms']:.4f} | "
                         f"{kernel['booked_to']} | {spans[:160]} |")
        lines.append("")
    return "\n".join(lines) + "\n"


SECTIONS: dict[str, Callable[[], dict[str, Any]]] = {
    "llama_train": lambda: train("llama"),
    "gpt2_train": lambda: train("gpt2"),
    "resnet50_train": lambda: train("resnet50"),
    "vit_b_16_train": lambda: train("vit_b_16"),
    **{f"{name}_train_blocks": lambda name=name: train(name, again=False, alone=True)
       for name in ("resnet50", "gpt2", "vit_b_16", "llama")},
    "llama_replay_order": replay_order,
    "llama_train_max_autotune": lambda: train("llama", "max-autotune"),
    "small_reduce_overhead": small_reduce_overhead,
    "resnet50_layer3": resnet50_layer3,
    "llama_layers": llama_layers,
    "llama_reduce_overhead": lambda: whole("llama", "reduce-overhead"),
    "llama_max_autotune": lambda: whole("llama", "max-autotune"),
    "gpt2_max_autotune": lambda: whole("gpt2", "max-autotune"),
    "resnet50_max_autotune": lambda: whole("resnet50", "max-autotune"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--sections", default=",".join(SECTIONS))
    parser.add_argument("--budget", type=float, default=400.0)
    parser.add_argument("--name", default="gpu_compile_modes",
                        help="the results file's name (.json) under --out")
    parser.add_argument("--rebook", type=Path, default=None,
                        help="book a results file's recorded replay again and stop")
    parser.add_argument("--markdown", type=Path, default=None,
                        help="print a results file's _train_blocks sections as tables and stop")
    args = parser.parse_args()
    if args.markdown is not None:
        print(blocks_markdown(json.loads(args.markdown.read_text())), end="")
        return
    if args.rebook is not None:
        print(json.dumps(rebook_replay(args.rebook), indent=1))
        return
    started = time.perf_counter()
    report: dict[str, Any] = {"torch": torch.__version__,
                              "device": torch.cuda.get_device_name(), "sections": {}}
    for name in args.sections.split(","):
        if time.perf_counter() - started > args.budget:
            report["sections"][name] = {"skipped": "out of budget"}
            continue
        began = time.perf_counter()
        print(f"{name}: started at {began - started:.0f} s", flush=True)
        try:
            result = SECTIONS[name]()
        except Exception as error:  # one section's failure is reported, the next runs
            result = {"error": f"{type(error).__name__}: {error}",
                      "traceback": traceback.format_exc()[-3000:]}
        result["wall_s"] = time.perf_counter() - began
        report["sections"][name] = result
        print(name, json.dumps(result, default=str)[:1500], flush=True)
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"{args.name}.json").write_text(
                json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
