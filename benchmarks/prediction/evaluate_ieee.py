"""Predicted against measured device time of forwards in plain fp32 (TF32 off for matrix
products, PyTorch's default), from two calibrations: the one before the IEEE tables and the
one with them. Models the calibration never saw: ViT-B/16 at 64 x 64 (batch 4) and at
224 x 224 (batch 8), GPT-2 small and BERT-base (8 x 128 tokens, built from their configs), a
Llama-shaped decoder (8 x 128 tokens, 1024 wide, 8 layers) and ResNet-50 (batch 8; its
convolutions run in TF32, cuDNN's default, so it should not move).

    PYTHONPATH=. python3 benchmarks/prediction/evaluate_ieee.py BEFORE.json AFTER.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torchvision
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))  # run from anywhere
from moduleprofiler import Profiler, TimingOptions


def models() -> Iterator[tuple[str, nn.Module, Any]]:
    """(name, model, input) on the CPU."""
    from transformers import BertConfig, BertModel, GPT2Config, GPT2Model, LlamaConfig, LlamaModel

    tokens = torch.randint(0, 1000, (8, 128))
    yield "vit_b_16 64px b4", torchvision.models.vit_b_16(image_size=64), \
        torch.randn(4, 3, 64, 64)
    yield "vit_b_16 224px b8", torchvision.models.vit_b_16(), torch.randn(8, 3, 224, 224)
    yield "gpt2 8x128", GPT2Model(GPT2Config()), tokens
    yield "bert 8x128", BertModel(BertConfig()), tokens
    yield "llama 1024x8 8x128", LlamaModel(LlamaConfig(
        hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
        num_key_value_heads=4, vocab_size=32000)), tokens
    yield "resnet50 b8", torchvision.models.resnet50(), torch.randn(8, 3, 224, 224)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("before")
    parser.add_argument("after")
    args = parser.parse_args()
    assert not torch.backends.cuda.matmul.allow_tf32, "TF32 must be off (PyTorch's default)"
    profiler = Profiler()
    errors: dict[str, list[float]] = {"before": [], "after": []}
    print(f"{'model':22} {'measured ms':>12} {'before':>9} {'after':>9}")
    for name, model, example in models():
        model = model.cuda().eval()
        x = example.cuda()
        measured = profiler.time_modules(model, x, TimingOptions(max_seconds=3.0))
        truth = float(measured.to_df("module").set_index("module").loc["__root__", "device_ms"])
        row = [f"{name:22} {truth:12.3f}"]
        for label, path in (("before", args.before), ("after", args.after)):
            predicted = profiler.predict(model, x, device=path, dtype="fp32")
            ms = float(predicted.to_df("module").set_index("module").loc[
                "__root__", "predicted_device_ms"])
            errors[label].append(abs(ms / truth - 1))
            row.append(f"{ms / truth:9.3f}")
        print(" ".join(row), flush=True)
        del model, x
        torch.cuda.empty_cache()
    for label, found in errors.items():
        print(f"{label}: median |error| {100 * statistics.median(found):.1f} %, "
              f"worst {100 * max(found):.1f} %")


if __name__ == "__main__":
    main()
