"""What the compiled clock's GPU proofs share (``gpu_compile_clock.py``,
``gpu_compile_modes.py``): the four models with their top-level blocks, a block compiled
alone with the input it gets in the model (forward, or a training step), and the kernels
crossing a block's boundary.

Not a command: the scripts beside it import it (``benchmarks/`` is their ``sys.path[0]``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import pandas as pd
import torch
from torch import nn

from moduleprofiler.timing import TimingOptions, time_modules, train_step_times
from moduleprofiler.timing.clocks.compiled import CompiledClock, CompiledProgram

COMPILE = TimingOptions(num_iters=2, drop_first=1, warmup_seconds=0.0, measure_overhead=False,
                        progress=False)
"""A pass that only compiles (the compiled clock's compile, kept for the next pass)."""

Built = tuple[nn.Module, Any, list[str], list[str]]
"""A model, its input, its top-level blocks, and the blocks also compiled alone."""


def resnet50() -> Built:
    from torchvision.models import resnet50 as build

    blocks = ["conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4",
              "avgpool", "fc"]
    return (build(weights=None), torch.randn(32, 3, 224, 224), blocks,
            ["conv1", "layer1", "layer2", "layer3", "layer4", "fc"])


def vit_b_16() -> Built:
    from torchvision.models import vit_b_16 as build

    layers = [f"encoder.layers.encoder_layer_{i}" for i in range(12)]
    return (build(weights=None), torch.randn(32, 3, 224, 224),
            ["conv_proj", "encoder.dropout", *layers, "encoder.ln", "heads"],
            ["conv_proj", layers[0], layers[11], "heads"])


def gpt2() -> Built:
    from transformers import GPT2Config, GPT2LMHeadModel

    blocks = ["transformer.wte", "transformer.wpe", "transformer.drop",
              *(f"transformer.h.{i}" for i in range(12)), "transformer.ln_f", "lm_head"]
    return (GPT2LMHeadModel(GPT2Config(use_cache=False)), torch.randint(0, 50257, (8, 512)),
            blocks, ["transformer.h.0", "transformer.h.11", "lm_head"])


def llama() -> Built:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=512, intermediate_size=1408, num_hidden_layers=8,
                         num_attention_heads=8, num_key_value_heads=4, vocab_size=32000,
                         max_position_embeddings=1024, use_cache=False)
    blocks = ["model.embed_tokens", *(f"model.layers.{i}" for i in range(8)), "model.norm",
              "lm_head"]
    return (LlamaForCausalLM(config), torch.randint(0, 32000, (8, 512)), blocks,
            ["model.layers.0", "model.layers.7", "lm_head"])


class Small(nn.Module):
    """A model small enough to try the scripts on a CPU."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(256, 256)
        self.norm = nn.LayerNorm(256)
        self.out = nn.Linear(256, 256)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.norm(self.fc(x))) + x)


def small() -> Built:
    return Small(), torch.randn(64, 256), ["fc", "norm", "out"], ["fc", "out"]


MODELS: dict[str, Callable[[], Built]] = {
    "resnet50": resnet50, "vit_b_16": vit_b_16, "gpt2": gpt2, "llama": llama,
    "small": small}


class Bound(nn.Module):
    """A block called with the keyword arguments it got in the model."""

    def __init__(self, block: nn.Module, kwargs: dict[str, Any]) -> None:
        super().__init__()
        self.block = block
        self.kwargs = kwargs

    def forward(self, *args: Any) -> Any:
        return self.block(*args, **self.kwargs)


def _kept(value: Any) -> Any:
    """A tensor detached from the model's graph, requiring grad as it did in the model."""
    if isinstance(value, torch.Tensor):
        return value.detach().requires_grad_(value.requires_grad)
    if isinstance(value, tuple):
        return tuple(map(_kept, value))
    return value


def block_inputs(model: nn.Module, x: Any, paths: Iterable[str], grad: bool = False
                 ) -> dict[str, tuple[Any, Any]]:
    """Each block's (args, kwargs) in one forward of ``model`` (pre-hooks, removed after).

    ``grad``: the forward records autograd, and each tensor the block got requires grad as it
    did in the model (an activation does, the image or the token ids do not), so that the
    block's training step alone computes the same input gradients as in the model."""
    seen: dict[str, tuple[Any, Any]] = {}
    handles = []
    for path in paths:
        def keep(module: nn.Module, args: Any, kwargs: Any, path: str = path) -> None:
            seen.setdefault(path, (_kept(args), {k: _kept(v) for k, v in kwargs.items()}))
        handles.append(model.get_submodule(path).register_forward_pre_hook(
            keep, with_kwargs=True))
    try:
        with torch.set_grad_enabled(grad):
            model(x)
    finally:
        for handle in handles:
            handle.remove()
    return seen


def value(frame: pd.DataFrame, row: str, column: str) -> float | None:
    """A frame's value, ``None`` where it is missing or unknown."""
    if column not in frame or row not in frame.index or pd.isna(frame.loc[row, column]):
        return None
    return float(frame.loc[row, column])


def inside(path: str, block: str) -> bool:
    """Whether module ``path`` is ``block`` or under it."""
    return path == block or path.startswith(block + ".")


def crossing(kernels: Iterable[Any], block: str, backward: bool = False
             ) -> list[tuple[str, float]]:
    """The kernels (of the forward, or of the backward) that fuse work of ``block`` with work
    outside it, booked to an ancestor: (name, ms per iteration)."""
    return [(k.name, k.time_ms) for k in kernels
            if k.backward == backward and any(inside(m, block) for m in k.fused_across)
            and not inside(k.module, block)]


_GRAPH_INDEX = re.compile(r"_\d+$")
"""The number Inductor gives a generated kernel within its graph (``..._relu_7``)."""


def kernel_multiset(kernels: Iterable[Any], block: str, backward: bool = False) -> Counter[str]:
    """The device kernels booked inside ``block`` (the kernels crossing its boundary, booked to
    an ancestor, left out, as its time leaves them out), by name, counted once per graph
    kernel: an extern kernel by the cuDNN / cuBLAS kernels it ran, a generated kernel by its
    name less the number its graph gave it."""
    names: Counter[str] = Counter()
    for row in kernels:
        if row.backward != backward or not inside(row.module, block):
            continue
        for name in row.device_kernels or (row.name,):
            names[_GRAPH_INDEX.sub("", name) if name.startswith("triton_") else name] += 1
    return names


def kernel_difference(in_model: Counter[str], alone: Counter[str]) -> dict[str, dict[str, int]]:
    """What differs between two kernel multisets: the kernels only in the model's block, and
    only in the block compiled alone (empty both: the same kernels)."""
    return {"in_model_only": dict(in_model - alone), "alone_only": dict(alone - in_model)}


def alone_forward(block: nn.Module, args: Any, kwargs: Any, device: torch.device,
                  mode: str, options: TimingOptions) -> dict[str, Any]:
    """``block`` compiled alone in ``mode``: its forward device time (ms, inclusive), kernels
    per forward and their multiset (:func:`kernel_multiset`), booked by the compiled clock."""
    compiled = torch.compile(Bound(block, kwargs), mode=mode)
    # a first pass compiles, so that the measured one (which calls the compile kept for it)
    # spends no time budget compiling: a budget spent compiling leaves one traced iteration
    time_modules(compiled, tuple(args), options=COMPILE)
    clock = CompiledClock(device, CompiledProgram.of(compiled, tuple(args)))
    timing = time_modules(compiled, tuple(args), clock=clock, options=options)
    frame = timing.to_df("module").set_index("module")
    return {"ms": value(frame, "block", "device_ms"),
            "launches": value(frame, "block", "device_launches"),
            "iterations": timing.iterations,
            "kernels": dict(kernel_multiset(clock.kernels(), "block"))}


def alone_train(block: nn.Module, args: Any, kwargs: Any, device: torch.device, mode: str,
                options: TimingOptions) -> dict[str, float | None]:
    """``block`` compiled alone in ``mode``, a training step (the default loss over its
    output): its forward and backward device time (ms, inclusive) and kernels, booked by the
    compiled clock through the compiled backward graphs."""
    compiled = torch.compile(Bound(block, kwargs), mode=mode)
    clock = CompiledClock(device, CompiledProgram.of(compiled, tuple(args)), backward=True)
    timing = train_step_times(compiled, tuple(args), clock=clock, options=options)
    frame = timing.to_df("module").set_index("module")
    rows = clock.kernels()
    return {"forward_ms": value(frame, "block", "device_ms"),
            "backward_ms": value(frame, "block", "backward_device_ms"),
            "forward_kernels": sum(not r.backward and inside(r.module, "block") for r in rows),
            "backward_kernels": sum(r.backward and inside(r.module, "block") for r in rows),
            "coverage": clock.coverage, "backward_coverage": clock.backward_coverage}
