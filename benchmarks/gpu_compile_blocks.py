"""Top-level blocks of a compiled model against themselves compiled alone, kernel by kernel,
with each kernel's launch configuration; and the compiled training step per block.

Sections (``--sections``, in order; each skipped once ``--deadline`` seconds have gone, a
section's failure reported and the next one run; results written to ``--out``/``--name``
``.json`` and ``.md`` after every step, so that a run stopped early keeps what it had):

* ``<model>_<mode>`` (``vit_b_16_max_autotune``, ``resnet50_default``, ``small_default``):
  the forward of the model compiled whole in that mode, timed by the compiled clock on the
  compile kept from a first pass: coverage, per top-level block its device time, its kernels
  (each graph kernel's device kernels with their launch configurations: grid, block,
  registers per thread, shared memory) and the kernels crossing its boundary (booked to an
  ancestor). Then some blocks compiled alone, on the input they got in the model, in
  variants: ``recorded`` (as the model gave it), ``channels_last`` (a 4-d input converted),
  ``channels_last_warm`` (also written by a ReLU of its own just before the block, booked
  outside it: the input hot in the L2 cache, as the previous block's output is in the
  model). Per block and variant: whether the block alone ran the same kernels (by name, and
  by name and launch configuration), what differs, and the block's kernels matched one to
  one (same names and configurations) between the model and alone: their times in each.
  Last, the model measured again (the drift over the section);
  ``vit_b_16_max_autotune_tail`` is the same with the last encoder layer and ``heads``
  alone;
* ``<model>_train_<mode>`` (``vit_b_16_train_max_autotune``, ``resnet50_train_max_autotune``,
  ``gpt2_train_max_autotune``, ``small_train_default``): ``train_step_times`` of the model
  compiled whole (forward, loss, compiled backward): coverage of the forward's and
  backward's kernel time by modules, per top-level block its forward and backward device
  time against the eager model's (the kernel clock on CUDA), the kernels crossing each
  block's boundary, the kernels fused across modules; then a second pass on the compile
  kept from the first (its seconds: the "again" time).

The models and the blocks' inputs are ``compile_blocks.py``'s.

Usage: ``PYTHONPATH=. python benchmarks/gpu_compile_blocks.py --out results/ --sections
vit_b_16_max_autotune,resnet50_default`` (``--device cpu --sections small_default,
small_train_default`` tries it on a CPU). A ``max-autotune`` compile may outlast one run (the
ResNet-50 training step's took over 500 s): with ``TORCHINDUCTOR_CACHE_DIR`` set, a second run
given that directory resumes from what the first compiled and autotuned.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch
from compile_blocks import (
    COMPILE,
    MODELS,
    Bound,
    block_inputs,
    crossing,
    inside,
    kernel_difference,
    kernel_multiset,
    value,
)
from torch import nn

from moduleprofiler.timing import TimingOptions, time_modules, train_step_times
from moduleprofiler.timing.clocks.compiled import CompiledClock, CompiledProgram

MEASURE = TimingOptions(max_seconds=3.0, progress=False)
"""A measured pass on a kept compile: its budget goes on rounds."""
STEPS = TimingOptions(num_iters=10, drop_first=2, progress=False)
"""Training steps: a fixed count, as the earlier training proofs."""
DEVICE = torch.device("cuda")
STARTED = time.perf_counter()
DEADLINE = 540.0
"""Seconds after which no new step starts (``--deadline``)."""


SECTION_DEADLINE: float | None = None
"""Seconds after which the running section starts no new step (``--sections key:seconds``),
so that the sections after it keep their time."""


def late() -> bool:
    elapsed = time.perf_counter() - STARTED
    return elapsed > DEADLINE or (SECTION_DEADLINE is not None and elapsed > SECTION_DEADLINE)


def _sync() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


_GRAPH_INDEX = re.compile(r"_\d+$")


def _graph_index_free(name: str) -> str:
    """A generated kernel's name less the number its graph gave it (as ``compile_blocks``'
    kernel multisets name it)."""
    return _GRAPH_INDEX.sub("", name) if name.startswith("triton_") else name


def signature(row: Any) -> tuple[tuple[str, str], ...]:
    """A graph kernel as the device ran it: its device kernels (generated ones less their
    graph's number), each with its launch configuration (``""``: none recorded, as for a
    memset), sorted."""
    configured = {name for name, _ in row.launch_configs}
    pairs = {(_graph_index_free(name), config) for name, config in row.launch_configs}
    pairs |= {(_graph_index_free(name), "") for name in row.device_kernels or (row.name,)
              if name not in configured}
    return tuple(sorted(pairs))


def row_facts(row: Any) -> dict[str, Any]:
    return {"name": row.name, "module": row.module, "ms": row.time_ms,
            "launches": row.launches, "device_kernels": list(row.device_kernels),
            "launch_configs": [list(pair) for pair in row.launch_configs],
            "fused_across": list(row.fused_across)}


def config_multiset(rows: Iterable[Any]) -> Counter[str]:
    """The block's device kernels by name and launch configuration, counted once per graph
    kernel (as :func:`compile_blocks.kernel_multiset` counts names)."""
    out: Counter[str] = Counter()
    for row in rows:
        for name, config in signature(row):
            out[f"{name} [{config or 'no configuration'}]"] += 1
    return out


def matched(in_model: Sequence[Any], alone: Sequence[Any]) -> dict[str, Any]:
    """The block's graph kernels paired one to one between the model and alone, by
    :func:`signature` (in graph order): the paired kernels' time in each, and those left."""
    waiting: dict[tuple[tuple[str, str], ...], list[Any]] = defaultdict(list)
    for row in alone:
        waiting[signature(row)].append(row)
    pairs, model_only = [], []
    for row in in_model:
        queue = waiting.get(signature(row))
        if queue:
            pairs.append((row, queue.pop(0)))
        else:
            model_only.append(row)
    alone_only = [row for queue in waiting.values() for row in queue]
    model_ms = sum(a.time_ms for a, _ in pairs)
    alone_ms = sum(b.time_ms for _, b in pairs)
    return {"pairs": len(pairs), "model_ms": model_ms, "alone_ms": alone_ms,
            "ratio": model_ms / alone_ms if alone_ms else None,
            "per_pair": [(a.name, round(a.time_ms, 5), round(b.time_ms, 5)) for a, b in pairs],
            "model_only": [(r.name, round(r.time_ms, 5)) for r in model_only],
            "alone_only": [(r.name, round(r.time_ms, 5)) for r in alone_only]}


class Warm(Bound):
    """A block whose first input is written by a ReLU kernel of the wrapper's own just before
    the block runs (an input that is a ReLU's output already keeps its values): the block
    reads it hot in the L2 cache, as it reads the previous block's output in the model."""

    def forward(self, *args: Any) -> Any:
        return self.block(torch.relu(args[0]), *args[1:], **self.kwargs)


def ready(name: str) -> tuple[nn.Module, Any, list[str]]:
    model, x, blocks, _ = MODELS[name]()
    dtype = torch.bfloat16 if DEVICE.type == "cuda" else torch.float32
    model = model.eval().to(DEVICE, dtype)
    x = x.to(DEVICE, dtype) if x.is_floating_point() else x.to(DEVICE)
    return model, x, blocks


def measured(compiled: nn.Module, x: Any, program: CompiledProgram,
             options: TimingOptions = MEASURE) -> tuple[CompiledClock, Any, float]:
    started = time.perf_counter()
    clock = CompiledClock(DEVICE, program)
    timing = time_modules(compiled, x, clock=clock, options=options)
    return clock, timing, time.perf_counter() - started


def _inputs_facts(args: Sequence[Any]) -> dict[str, Any]:
    first = args[0] if args and isinstance(args[0], torch.Tensor) else None
    if first is None:
        return {}
    return {"shape": list(first.shape), "stride": list(first.stride()),
            "dtype": str(first.dtype), "mb": first.numel() * first.element_size() / 1e6}


def variant_args(args: tuple[Any, ...], variant: str) -> tuple[Any, ...] | None:
    """The block's input for a variant (``None``: it does not apply)."""
    if not variant.startswith("channels_last"):
        return args
    if not args or not isinstance(args[0], torch.Tensor) or args[0].dim() != 4:
        return None
    return (args[0].contiguous(memory_format=torch.channels_last), *args[1:])


def alone(block: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], mode: str,
          warm: bool) -> tuple[dict[str, Any], list[Any]]:
    """``block`` compiled alone: its device time (ms, inclusive) on a kept compile and its
    kernel rows (those booked inside it)."""
    wrapper = (Warm if warm else Bound)(block, kwargs)
    compiled = torch.compile(wrapper, mode=mode)
    started = time.perf_counter()
    time_modules(compiled, args, options=COMPILE)
    compile_s = time.perf_counter() - started
    clock, timing, seconds = measured(compiled, args, CompiledProgram.of(compiled, args))
    frame = timing.to_df("module").set_index("module")
    rows = [row for row in clock.kernels() if not row.backward and inside(row.module, "block")]
    return ({"ms": value(frame, "block", "device_ms"), "iterations": timing.iterations,
             "coverage": clock.coverage, "compile_s": compile_s, "time_modules_s": seconds,
             "outside_block_ms": sum(row.time_ms for row in clock.kernels()
                                     if not inside(row.module, "block")),
             "input": _inputs_facts(args)}, rows)


def forward_blocks(name: str, mode: str, alone_blocks: list[str], variants: list[str],
                   write: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    model, x, blocks = ready(name)
    compiled = torch.compile(model, mode=mode)
    started = time.perf_counter()
    time_modules(compiled, x, options=COMPILE)
    _sync()
    out: dict[str, Any] = {"model": name, "mode": mode, "compile_s": time.perf_counter() - started}
    print(f"  {name} {mode}: compiled in {out['compile_s']:.1f} s", flush=True)
    program = CompiledProgram.of(compiled, x)
    clock, timing, seconds = measured(compiled, x, program)
    frame = timing.to_df("module").set_index("module")
    rows = [row for row in clock.kernels() if not row.backward]
    out.update({
        "coverage": clock.coverage, "iterations": timing.iterations,
        "time_modules_s": seconds, "compiled_ms": value(frame, "__root__", "device_ms"),
        "kernels": len(rows),
        "kernels_with_launch_configs": sum(bool(row.launch_configs) for row in rows),
        "blocks": {}, "fused_across": [
            {"kernel": k.name, "ms": k.time_ms, "booked_to": k.module or "__root__",
             "fused_across": list(k.fused_across)} for k in clock.fused_across()[:40]]})
    for block in blocks:
        inner = [row for row in rows if inside(row.module, block)]
        out["blocks"][block] = {
            "ms": value(frame, block, "device_ms"),
            "launches": value(frame, block, "device_launches"),
            "crossing": [(k, round(ms, 5)) for k, ms in crossing(rows, block)],
            "names": dict(kernel_multiset(rows, block)),
            "configs": dict(config_multiset(inner)),
            "rows": [row_facts(row) for row in inner], "alone": {}}
    write(out)
    inputs = block_inputs(model, x, alone_blocks)
    for block in alone_blocks:
        args, kwargs = inputs[block]
        in_model = [row for row in rows if inside(row.module, block)]
        for variant in variants:
            given = variant_args(tuple(args), variant)
            if given is None:
                continue
            if late():
                out["blocks"][block]["alone"][variant] = {"skipped": "past the deadline"}
                continue
            try:
                found, alone_rows = alone(model.get_submodule(block), given, kwargs, mode,
                                          warm=variant.endswith("_warm"))
            except Exception as error:  # one block's failure is reported, the rest runs
                out["blocks"][block]["alone"][variant] = {
                    "error": f"{type(error).__name__}: {error}",
                    "traceback": traceback.format_exc()[-2000:]}
                write(out)
                continue
            model_ms = out["blocks"][block]["ms"]
            found.update({
                "ratio": model_ms / found["ms"] if model_ms and found["ms"] else None,
                "names": kernel_difference(Counter(out["blocks"][block]["names"]),
                                           kernel_multiset(alone_rows, "block")),
                "configs": kernel_difference(Counter(out["blocks"][block]["configs"]),
                                             config_multiset(alone_rows)),
                "matched": matched(in_model, alone_rows),
                "rows": [row_facts(row) for row in alone_rows]})
            found["same_names"] = not any(found["names"].values())
            found["same_configs"] = not any(found["configs"].values())
            out["blocks"][block]["alone"][variant] = found
            print(f"  {block} alone ({variant}): {found['ms']} ms, in model / alone "
                  f"{found['ratio']}, same names {found['same_names']}, same configurations "
                  f"{found['same_configs']}, matched {found['matched']['ratio']}", flush=True)
            write(out)
    _, again, seconds = measured(compiled, x, program)
    frame = again.to_df("module").set_index("module")
    out["again"] = {"time_modules_s": seconds, "compiled_ms": value(frame, "__root__",
                                                                    "device_ms"),
                    "blocks": {block: value(frame, block, "device_ms") for block in blocks}}
    return out


def _phases(frame: Any, block: str) -> dict[str, float | None]:
    return {"forward_ms": value(frame, block, "device_ms"),
            "backward_ms": value(frame, block, "backward_device_ms")}


def train_blocks(name: str, mode: str, write: Callable[[dict[str, Any]], None]
                 ) -> dict[str, Any]:
    model, x, blocks = ready(name)
    model.train()
    compiled = torch.compile(model, mode=mode)
    started = time.perf_counter()
    clock = CompiledClock(DEVICE, CompiledProgram.of(compiled, x), backward=True)
    timing = train_step_times(compiled, x, clock=clock, options=STEPS)
    wall_s = time.perf_counter() - started
    print(f"  {name} {mode}: compiled step timed in {wall_s:.1f} s", flush=True)
    frame = timing.to_df("module").set_index("module")
    rows = clock.kernels()
    out: dict[str, Any] = {
        "model": name, "mode": mode, "train_step_times_s": wall_s, "clock": timing.clock,
        "coverage": clock.coverage, "backward_coverage": clock.backward_coverage,
        "iterations": timing.iterations,
        "forward_kernels": sum(not row.backward for row in rows),
        "backward_kernels": sum(row.backward for row in rows),
        "model_ms": _phases(frame, "__root__"), "blocks": {},
        "fused_across": [
            {"kernel": k.name, "backward": k.backward, "ms": k.time_ms,
             "booked_to": k.module or "__root__", "fused_across": list(k.fused_across)}
            for k in sorted(clock.fused_across(), key=lambda k: -k.time_ms)],
        "notes": list(timing.warnings)}
    for block in blocks:
        found: dict[str, Any] = {"compiled": _phases(frame, block)}
        for phase, backward in (("forward", False), ("backward", True)):
            found[f"{phase}_kernels"] = sum(r.backward == backward and inside(r.module, block)
                                            for r in rows)
            crossed = crossing(rows, block, backward)
            found[f"{phase}_crossing"] = [(k, round(ms, 5)) for k, ms in crossed]
        out["blocks"][block] = found
    write(out)
    if late():
        out["eager_skipped"] = "past the deadline"
        return out
    eager = train_step_times(model, x, clock="kernels" if DEVICE.type == "cuda" else "cpu",
                             options=STEPS)
    plain = eager.to_df("module").set_index("module")
    out["eager_model_ms"] = _phases(plain, "__root__")
    for block in blocks:
        out["blocks"][block]["eager"] = _phases(plain, block)
    write(out)
    if late():
        out["again_skipped"] = "past the deadline"
        return out
    # a second pass on the compile kept from the first (the docs' "again" column)
    started = time.perf_counter()
    repeated = train_step_times(compiled, x, clock=CompiledClock(
        DEVICE, CompiledProgram.of(compiled, x), backward=True), options=STEPS)
    out["again"] = {"train_step_times_s": time.perf_counter() - started,
                    "model_ms": _phases(repeated.to_df("module").set_index("module"),
                                        "__root__")}
    print(f"  {name} {mode}: again in {out['again']['train_step_times_s']:.1f} s", flush=True)
    return out


ViT_LAYERS = [f"encoder.layers.encoder_layer_{i}" for i in (0, 1, 10, 11)]
RESNET_LAYERS = ["layer1", "layer2", "layer3", "layer4"]


def sections() -> dict[str, Callable[[Callable[[dict[str, Any]], None]], dict[str, Any]]]:
    return {
        "vit_b_16_max_autotune": lambda w: forward_blocks(
            "vit_b_16", "max-autotune", ViT_LAYERS, ["recorded"], w),
        "resnet50_default": lambda w: forward_blocks(
            "resnet50", "default", RESNET_LAYERS, ["channels_last", "channels_last_warm"], w),
        "vit_b_16_train_max_autotune": lambda w: train_blocks("vit_b_16", "max-autotune", w),
        "vit_b_16_max_autotune_tail": lambda w: forward_blocks(
            "vit_b_16", "max-autotune", [*ViT_LAYERS[3:], "heads"], ["recorded"], w),
        "resnet50_train_max_autotune": lambda w: train_blocks("resnet50", "max-autotune", w),
        "gpt2_train_max_autotune": lambda w: train_blocks("gpt2", "max-autotune", w),
        "small_default": lambda w: forward_blocks(
            "small", "default", ["fc", "out"], ["recorded", "channels_last", "recorded_warm"],
            w),
        "small_train_default": lambda w: train_blocks("small", "default", w),
    }


def _num(value: Any, form: str = ".3f") -> str:
    return "" if value is None else format(value, form)


def _cut(name: str, size: int = 60) -> str:
    return name if len(name) <= size else name[:size - 3] + "..."


def _modules(paths: Iterable[str]) -> str:
    return ", ".join(path or "__root__" for path in paths)


def _differs(difference: dict[str, dict[str, int]]) -> str:
    parts = [f"+`{_cut(n)}`" + (f" x{c}" if c > 1 else "")
             for n, c in sorted(difference["in_model_only"].items())]
    parts += [f"-`{_cut(n)}`" + (f" x{c}" if c > 1 else "")
              for n, c in sorted(difference["alone_only"].items())]
    return " ".join(parts)


def forward_markdown(key: str, section: dict[str, Any]) -> list[str]:
    lines = [f"## {key}: {section['model']}, forward, torch.compile mode {section['mode']}", "",
             f"- compiled in {section['compile_s']:.1f} s (first pass); measured on the kept "
             f"compile in {section['time_modules_s']:.1f} s, {section['iterations']} traced "
             f"iterations",
             f"- coverage of the compiled graphs' kernel time by modules: "
             f"{_num(section['coverage'], '.4f')}; compiled device time "
             f"{_num(section['compiled_ms'])} ms per forward; {section['kernels']} kernels, "
             f"{section['kernels_with_launch_configs']} with launch configurations recorded"]
    again = section.get("again")
    if again:
        lines.append(f"- measured again after the blocks alone: {_num(again['compiled_ms'])} "
                     f"ms per forward")
    lines += ["", "| block | in model ms | again ms | kernels | crossing kernels (ms) |",
              "|---|---:|---:|---:|---|"]
    for block, found in section["blocks"].items():
        crossed = found["crossing"]
        lines.append(
            f"| {block} | {_num(found['ms'])} | "
            f"{_num((again or {}).get('blocks', {}).get(block))} | {len(found['rows'])} | "
            + (f"{len(crossed)} ({sum(ms for _, ms in crossed):.3f}): "
               + ", ".join(f"`{_cut(k, 70)}`" for k, _ in crossed) if crossed else "none")
            + " |")
    lines += ["", "Blocks against themselves compiled alone (input as the model gave it, or "
              "channels-last; `warm`: written by a ReLU of its own just before the block):",
              "", "| block | variant | in model ms | alone ms | in model / alone | same names | "
              "same names and launch configurations | matched kernels: in model / alone ms "
              "(ratio) | unmatched in model / alone |",
              "|---|---|---:|---:|---:|---|---|---|---|"]
    for block, found in section["blocks"].items():
        for variant, run in found["alone"].items():
            if "ms" not in run:
                lines.append(f"| {block} | {variant} | {_num(found['ms'])} | "
                             f"{run.get('skipped') or run.get('error', '')[:80]} | | | | | |")
                continue
            m = run["matched"]
            configs = ("not recorded" if not section["kernels_with_launch_configs"]
                       else "yes" if run["same_configs"] else "no")
            lines.append(
                f"| {block} | {variant} | {_num(found['ms'])} | {_num(run['ms'])} | "
                f"{_num(run['ratio'])} | {'yes' if run['same_names'] else 'no'} | "
                f"{configs} | {m['pairs']} kernels: "
                f"{m['model_ms']:.3f} / {m['alone_ms']:.3f} ({_num(m['ratio'])}) | "
                f"{len(m['model_only'])} ({sum(ms for _, ms in m['model_only']):.3f}) / "
                f"{len(m['alone_only'])} ({sum(ms for _, ms in m['alone_only']):.3f}) |")
    lines += ["", "What differs (`+` in the model only, `-` alone only), by name, and by name "
              "and launch configuration:", ""]
    for block, found in section["blocks"].items():
        for variant, run in found["alone"].items():
            if "ms" not in run:
                continue
            if not run["same_names"]:
                lines.append(f"- {block} ({variant}), names: {_differs(run['names'])}")
            if not run["same_configs"]:
                lines.append(f"- {block} ({variant}), launch configurations: "
                             f"{_differs(run['configs'])}")
    lines += ["", "| fused kernel | ms | booked to | fuses work of |", "|---|---:|---|---|"]
    for row in section["fused_across"][:15]:
        lines.append(f"| `{_cut(row['kernel'], 70)}` | {row['ms']:.4f} | {row['booked_to']} | "
                     f"{_cut(_modules(row['fused_across']), 200)} |")
    return [*lines, ""]


def train_markdown(key: str, section: dict[str, Any]) -> list[str]:
    model, eager = section["model_ms"], section.get("eager_model_ms") or {}
    again = section.get("again")
    lines = [f"## {key}: {section['model']}, training step, torch.compile mode "
             f"{section['mode']}", "",
             f"- coverage of the compiled graphs' kernel time by modules: forward "
             f"{_num(section['coverage'], '.4f')}, backward "
             f"{_num(section['backward_coverage'], '.4f')}",
             f"- forward {_num(model['forward_ms'])} ms (eager {_num(eager.get('forward_ms'))}),"
             f" backward {_num(model['backward_ms'])} ms (eager "
             f"{_num(eager.get('backward_ms'))}); kernels {section['forward_kernels']} / "
             f"{section['backward_kernels']}; {section['iterations']} traced steps; the "
             f"compiled step (compile included) timed in {section['train_step_times_s']:.1f} s"
             + (f", again (the compile kept) in {again['train_step_times_s']:.1f} s: forward "
                f"{_num(again['model_ms']['forward_ms'])} ms, backward "
                f"{_num(again['model_ms']['backward_ms'])} ms" if again else ""),
             "", "| block | fwd ms (eager) | bwd ms (eager) | speed-up fwd / bwd | kernels fwd / "
             "bwd | crossing kernels fwd (ms) | crossing kernels bwd (ms) |",
             "|---|---:|---:|---:|---:|---|---|"]

    def crossed(found: dict[str, Any], phase: str) -> str:
        kernels = found[f"{phase}_crossing"]
        return (f"{len(kernels)} ({sum(ms for _, ms in kernels):.3f})" if kernels else "none")

    for block, found in section["blocks"].items():
        fwd, bwd = found["compiled"]["forward_ms"], found["compiled"]["backward_ms"]
        plain = found.get("eager") or {}
        efwd, ebwd = plain.get("forward_ms"), plain.get("backward_ms")
        lines.append(
            f"| {block} | {_num(fwd)} ({_num(efwd)}) | {_num(bwd)} ({_num(ebwd)}) | "
            f"{_num(efwd / fwd if efwd and fwd else None, '.2f')} / "
            f"{_num(ebwd / bwd if ebwd and bwd else None, '.2f')} | "
            f"{found['forward_kernels']} / {found['backward_kernels']} | "
            f"{crossed(found, 'forward')} | {crossed(found, 'backward')} |")
    fused = section["fused_across"]
    lines += ["", f"{sum(not k['backward'] for k in fused)} forward and "
              f"{sum(k['backward'] for k in fused)} backward kernels fused across modules; "
              "the longest:", "", "| kernel | phase | ms | booked to | fuses work of |",
              "|---|---|---:|---|---|"]
    for row in fused[:15]:
        lines.append(f"| `{_cut(row['kernel'], 70)}` | {'bwd' if row['backward'] else 'fwd'} "
                     f"| {row['ms']:.4f} | {row['booked_to']} | "
                     f"{_cut(_modules(row['fused_across']), 200)} |")
    return [*lines, ""]


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# command: {report['command']}", "",
             f"torch {report['torch']}, {report['device']}, "
             f"{'bf16' if report['device'] != 'cpu' else 'float32'}", ""]
    for key, section in report["sections"].items():
        if "error" in section:
            lines += [f"## {key}: failed", "", "```", section.get("traceback", section["error"]),
                      "```", ""]
        elif "skipped" in section:
            lines += [f"## {key}: {section['skipped']}", ""]
        elif "blocks" in section and "rows" in next(iter(section["blocks"].values()), {}):
            lines += forward_markdown(key, section)
        elif "blocks" in section:
            lines += train_markdown(key, section)
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--name", default="gpu_compile_blocks")
    parser.add_argument("--sections", default="vit_b_16_max_autotune,resnet50_default",
                        help="comma-separated; key:seconds stops a section's new steps that "
                        "many seconds after the start")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--deadline", type=float, default=540.0,
                        help="seconds after which no new step starts")
    args = parser.parse_args()
    global DEVICE, DEADLINE
    DEVICE, DEADLINE = torch.device(args.device), args.deadline
    report: dict[str, Any] = {
        "command": "python " + " ".join(sys.argv), "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if DEVICE.type == "cuda" else str(DEVICE),
        "sections": {}}

    def write() -> None:
        if args.out is None:
            return
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / f"{args.name}.json").write_text(json.dumps(report, indent=1, default=str))
        (args.out / f"{args.name}.md").write_text(markdown(report))

    table = sections()
    global SECTION_DEADLINE
    for item in args.sections.split(","):
        key, _, until = item.partition(":")
        SECTION_DEADLINE = float(until) if until else None
        if late():
            report["sections"][key] = {"skipped": "past the deadline"}
            write()
            continue
        began = time.perf_counter()
        print(f"{key}: started at {began - STARTED:.0f} s", flush=True)

        def partial(section: dict[str, Any], key: str = key) -> None:
            report["sections"][key] = section
            write()

        try:
            result = table[key](partial)
        except Exception as error:  # one section's failure is reported, the next runs
            result = {"error": f"{type(error).__name__}: {error}",
                      "traceback": traceback.format_exc()[-3000:]}
        result["wall_s"] = time.perf_counter() - began
        report["sections"][key] = result
        write()
        print(f"{key}: done in {result['wall_s']:.0f} s", flush=True)
    print(markdown(report), flush=True)


if __name__ == "__main__":
    main()
