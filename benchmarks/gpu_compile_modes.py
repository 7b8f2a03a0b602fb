"""The compiled clock on a GPU beyond mode ``default``: compiled submodules inside an eager
model, CUDA graphs (``reduce-overhead``) and ``max-autotune`` (bf16, forward).

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
  eager: coverage, device time per forward, speed-up, kernels, graph launches.

Usage: ``PYTHONPATH=. python benchmarks/gpu_compile_modes.py --out results/``
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
from torch import nn

from moduleprofiler.timing import TimingOptions, time_modules
from moduleprofiler.timing.clocks.compiled import CompiledClock, CompiledProgram

OPTIONS = TimingOptions(max_seconds=3.0, progress=False)
CUDA = torch.device("cuda")


def resnet50() -> tuple[nn.Module, torch.Tensor, list[str]]:
    from torchvision.models import resnet50 as build

    return (build(weights=None), torch.randn(32, 3, 224, 224),
            ["conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4",
             "avgpool", "fc"])


def llama() -> tuple[nn.Module, torch.Tensor, list[str]]:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=512, intermediate_size=1408, num_hidden_layers=8,
                         num_attention_heads=8, num_key_value_heads=4, vocab_size=32000,
                         max_position_embeddings=1024, use_cache=False)
    return (LlamaForCausalLM(config), torch.randint(0, 32000, (8, 512)),
            ["model.embed_tokens", *(f"model.layers.{i}" for i in range(8)), "model.norm",
             "lm_head"])


def gpt2() -> tuple[nn.Module, torch.Tensor, list[str]]:
    from transformers import GPT2Config, GPT2LMHeadModel

    return (GPT2LMHeadModel(GPT2Config(use_cache=False)), torch.randint(0, 50257, (8, 512)),
            ["transformer.wte", *(f"transformer.h.{i}" for i in range(12)),
             "transformer.ln_f", "lm_head"])


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(256, 256)
        self.norm = nn.LayerNorm(256)
        self.out = nn.Linear(256, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.norm(self.fc(x))) + x)


def ready(build: Callable[[], tuple[nn.Module, torch.Tensor, list[str]]], bf16: bool = True
          ) -> tuple[nn.Module, torch.Tensor, list[str]]:
    model, x, blocks = build()
    model = model.eval().to(CUDA, torch.bfloat16 if bf16 else torch.float32)
    x = x.to(CUDA)
    if x.is_floating_point() and bf16:
        x = x.to(torch.bfloat16)
    return model, x, blocks


def _value(frame: pd.DataFrame, row: str, column: str) -> float | None:
    if column not in frame or row not in frame.index or pd.isna(frame.loc[row, column]):
        return None
    return float(frame.loc[row, column])


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
        "device_ms": _value(frame, "__root__", "device_ms"),
        "launches": _value(frame, "__root__", "device_launches"),
        "graphs": clock.graphs, "kernels": len(clock.kernels()),
        "breaks": [dict(module=r.breaks_in, reason=r.reason) for r in facts.breaks]
        if facts else [],
        "blocks": {block: {"device_ms": _value(frame, block, "device_ms"),
                           "launches": _value(frame, block, "device_launches")}
                   for block in blocks},
        "unmatched": sorted(clock.booking.unmatched)[:8] if clock.booking else [],
        "notes": list(timing.warnings)}


def eager(model: nn.Module, x: Any, blocks: list[str]) -> dict[str, Any]:
    """The eager model under the kernel clock."""
    timing = time_modules(model, x, clock="kernels", options=OPTIONS)
    frame = timing.to_df("module").set_index("module")
    return {"device_ms": _value(frame, "__root__", "device_ms"),
            "blocks": {block: _value(frame, block, "device_ms") for block in blocks}}


def small_reduce_overhead() -> dict[str, Any]:
    model, x, blocks = ready(lambda: (Small(), torch.randn(64, 256), ["fc", "norm", "out"]),
                             bf16=False)
    out = timed(torch.compile(model, mode="reduce-overhead"), x, blocks)
    out["eager"] = eager(model, x, blocks)
    return out


def partly(build: Callable[[], tuple[nn.Module, torch.Tensor, list[str]]],
           compile_parts: Callable[[nn.Module], None]) -> dict[str, Any]:
    model, x, blocks = ready(build)
    before = eager(model, x, blocks)
    compile_parts(model)
    out = timed(model, x, blocks)
    out["eager"] = before
    return out


def resnet50_layer3() -> dict[str, Any]:
    def parts(model: nn.Module) -> None:
        model.layer3 = torch.compile(model.layer3)

    out = partly(resnet50, parts)
    out["blocks"]["layer3._orig_mod"] = out["blocks"].pop("layer3", None)
    return out


def llama_layers() -> dict[str, Any]:
    def parts(model: nn.Module) -> None:
        for layer in model.model.layers:
            layer.compile()

    return partly(llama, parts)


def whole(build: Callable[[], tuple[nn.Module, torch.Tensor, list[str]]], mode: str
          ) -> dict[str, Any]:
    model, x, blocks = ready(build)
    out = timed(torch.compile(model, mode=mode), x, blocks)
    out["default"] = timed(torch.compile(model), x, blocks)
    out["eager"] = eager(model, x, blocks)
    out["speedup_vs_eager"] = (out["eager"]["device_ms"] / out["device_ms"]
                               if out["device_ms"] else None)
    out["speedup_vs_default"] = (out["default"]["device_ms"] / out["device_ms"]
                                 if out["device_ms"] else None)
    return out


SECTIONS: dict[str, Callable[[], dict[str, Any]]] = {
    "small_reduce_overhead": small_reduce_overhead,
    "resnet50_layer3": resnet50_layer3,
    "llama_layers": llama_layers,
    "llama_reduce_overhead": lambda: whole(llama, "reduce-overhead"),
    "llama_max_autotune": lambda: whole(llama, "max-autotune"),
    "gpt2_max_autotune": lambda: whole(gpt2, "max-autotune"),
    "resnet50_max_autotune": lambda: whole(resnet50, "max-autotune"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--sections", default=",".join(SECTIONS))
    parser.add_argument("--budget", type=float, default=400.0)
    args = parser.parse_args()
    started = time.perf_counter()
    report: dict[str, Any] = {"torch": torch.__version__,
                              "device": torch.cuda.get_device_name(), "sections": {}}
    for name in args.sections.split(","):
        if time.perf_counter() - started > args.budget:
            report["sections"][name] = {"skipped": "out of budget"}
            continue
        began = time.perf_counter()
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
            (args.out / "gpu_compile_modes.json").write_text(
                json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
