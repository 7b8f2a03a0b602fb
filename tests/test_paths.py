"""The same model and input give the same totals whichever kernels PyTorch picks: no_grad,
grad (backward pass), inference_mode, eval and train mode, CPU and the meta device."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler, Profile
from tests.conftest import decomposed_flops

torchvision = pytest.importorskip("torchvision")
transformers = pytest.importorskip("transformers")


class Functional(nn.Module):
    """Only functional calls: every op is counted from aten operators."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 32))
        self.k = nn.Parameter(torch.randn(8, 8, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(torch.nn.functional.linear(x, self.w.t()))  # (4, 32)
        seq = torch.nn.functional.conv1d(h.view(4, 8, 4), self.k, padding=1).view(4, 32)
        attn = torch.softmax(h @ h.t(), dim=-1) @ h
        return torch.nn.functional.scaled_dot_product_attention(
            attn[None, None], h[None, None], seq[None, None])


def vit() -> tuple[nn.Module, Any]:
    model = torchvision.models.VisionTransformer(
        image_size=32, patch_size=16, num_layers=2, num_heads=2, hidden_dim=64, mlp_dim=128)
    return model, torch.randn(2, 3, 32, 32)


def encoder() -> tuple[nn.Module, Any]:
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False), torch.randn(2, 5, 32)


def gpt2() -> tuple[nn.Module, Any]:
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128,
                                     n_positions=32, resid_pdrop=0.0, embd_pdrop=0.0,
                                     attn_pdrop=0.0)
    return transformers.GPT2LMHeadModel(config), {"input_ids": torch.randint(0, 128, (2, 8))}


def bert() -> tuple[nn.Module, Any]:
    config = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                     intermediate_size=128, vocab_size=128,
                                     max_position_embeddings=32, hidden_dropout_prob=0.0,
                                     attention_probs_dropout_prob=0.0)
    # no attention_mask: Hugging Face's mask code reads mask values, which meta tensors lack
    return transformers.BertModel(config), {"input_ids": torch.randint(0, 128, (2, 8))}


MODELS: dict[str, Callable[[], tuple[nn.Module, Any]]] = {
    "vit": vit,
    "transformer_encoder": encoder,
    "lstm": lambda: (nn.LSTM(8, 16, num_layers=2, batch_first=True), torch.randn(2, 5, 8)),
    "gpt2": gpt2,
    "bert": bert,
    "functional": lambda: (Functional(), torch.randn(4, 16)),
}


def totals(profile: Profile) -> tuple[int | float, int | float, bool]:
    return profile.total_macs, profile.total_ops, profile.complete


def to_meta(example: Any) -> Any:
    if isinstance(example, dict):
        return {key: value.to("meta") for key, value in example.items()}
    return example.to("meta")


@pytest.mark.parametrize("name", sorted(MODELS))
def test_same_totals_on_every_path(name: str) -> None:
    torch.manual_seed(0)
    model, example = MODELS[name]()
    profiler = ModuleProfiler()
    reference = totals(profiler.profile(model, example))
    assert reference[2], "every operator and module should be counted"
    with torch.inference_mode():
        assert totals(profiler.profile(model, example)) == reference
    # grad mode (the fused fast paths and flash kernels are not taken)
    assert totals(profiler.profile(model, example, backward=True))[:2] == reference[:2]
    # train mode: dropout is 0, so the math is the same
    assert totals(profiler.profile(model, example, eval=False)) == reference
    with torch.backends.mha.flags(fast_path_enabled=False) if hasattr(
            torch.backends.mha, "flags") else torch.no_grad():
        assert totals(profiler.profile(model, example)) == reference
    # meta device: same counts, nothing allocated
    meta_model = model.to("meta")
    assert totals(profiler.profile(meta_model, to_meta(example))) == reference
    # and the macs equal FlopCounterMode on the decomposed path
    model, example = MODELS[name]()
    call = (lambda: model(**example)) if isinstance(example, dict) else (lambda: model(example))
    assert 2 * reference[0] == decomposed_flops(call)
