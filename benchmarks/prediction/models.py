"""The model zoo of the prediction proof: 15 models built from code or config objects (no
weights, nothing downloaded), each with an input maker for a batch size."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn


@dataclass(frozen=True)
class ZooModel:
    """A model of the zoo: its family, a builder and an input maker."""

    name: str
    family: str
    build: Callable[[], nn.Module]
    make_input: Callable[[int, torch.device, torch.dtype], Any]

    def loss(self, output: Any) -> torch.Tensor:
        """The training step's loss: the model's own where it has one, else a mean."""
        if isinstance(output, torch.Tensor):
            return output.float().mean()
        logits = output.logits if hasattr(output, "logits") else output.last_hidden_state
        return logits.float().mean()


def _image(batch: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(batch, 3, 224, 224, device=device, dtype=dtype)


def _tokens(batch: int, device: torch.device, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 1000, (batch, 128), generator=generator)
    return {"input_ids": ids.to(device)}


def _torchvision(name: str) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import torchvision
        return getattr(torchvision.models, name)(weights=None)
    return build


def _timm(name: str) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import timm
        return timm.create_model(name, pretrained=False)
    return build


def _bert() -> nn.Module:
    from transformers import BertConfig, BertModel
    return BertModel(BertConfig())


def _gpt2() -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel
    return GPT2LMHeadModel(GPT2Config())


def _llama() -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM
    return LlamaForCausalLM(LlamaConfig(
        hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
        num_key_value_heads=16, vocab_size=32000))


def _llama_gqa() -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM
    return LlamaForCausalLM(LlamaConfig(
        hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
        num_key_value_heads=4, vocab_size=32000))


def _mixtral() -> nn.Module:
    """A mixture-of-experts decoder of the Llama's size: 8 experts a layer, 2 per token,
    grouped-query attention (Mixtral's layout)."""
    from transformers import MixtralConfig, MixtralForCausalLM
    return MixtralForCausalLM(MixtralConfig(
        hidden_size=1024, intermediate_size=2816, num_hidden_layers=8, num_attention_heads=16,
        num_key_value_heads=4, vocab_size=32000, num_local_experts=8, num_experts_per_tok=2))


ZOO: tuple[ZooModel, ...] = (
    ZooModel("resnet18", "torchvision CNN", _torchvision("resnet18"), _image),
    ZooModel("resnet50", "torchvision CNN", _torchvision("resnet50"), _image),
    ZooModel("mobilenet_v3_large", "torchvision CNN", _torchvision("mobilenet_v3_large"),
             _image),
    ZooModel("efficientnet_b0", "torchvision CNN", _torchvision("efficientnet_b0"), _image),
    ZooModel("convnext_tiny", "torchvision CNN", _torchvision("convnext_tiny"), _image),
    ZooModel("vit_b_16", "torchvision ViT", _torchvision("vit_b_16"), _image),
    ZooModel("swin_t", "torchvision ViT", _torchvision("swin_t"), _image),
    ZooModel("deit_small", "timm ViT", _timm("deit_small_patch16_224"), _image),
    ZooModel("regnety_016", "timm CNN", _timm("regnety_016"), _image),
    ZooModel("mixer_b16", "timm MLP", _timm("mixer_b16_224"), _image),
    ZooModel("bert_base", "HF encoder", _bert, _tokens),
    ZooModel("gpt2", "HF decoder", _gpt2, _tokens),
    ZooModel("llama_8x1024", "HF decoder", _llama, _tokens),
    ZooModel("llama_gqa_8x1024", "HF decoder", _llama_gqa, _tokens),
    ZooModel("mixtral_8x1024", "HF decoder", _mixtral, _tokens),
)
"""The zoo, in the order the tables list it."""

TRAINED: tuple[str, ...] = ("resnet50", "vit_b_16", "bert_base", "gpt2")
"""The models whose training step (forward, loss, backward) is also measured."""

BATCHES: tuple[int, ...] = (1, 8, 64)
TRAIN_BATCHES: tuple[int, ...] = (8, 32)
DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16}


def by_name(name: str) -> ZooModel:
    """The zoo model called ``name``."""
    return next(model for model in ZOO if model.name == name)
