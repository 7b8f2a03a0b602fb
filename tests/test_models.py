"""Real models (built from code and configs, no downloads) profile without error, with
parameters exact and ``2 * total_macs`` equal to FlopCounterMode on the decomposed path."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler
from tests.conftest import decomposed_flops
from tests.fixtures.state import assert_unchanged, snapshot

torchvision = pytest.importorskip("torchvision")
transformers = pytest.importorskip("transformers")


def gpt2() -> tuple[nn.Module, Any]:
    config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=500,
                                     n_positions=64)
    return transformers.GPT2LMHeadModel(config), {"input_ids": torch.randint(0, 500, (2, 16))}


def bert() -> tuple[nn.Module, Any]:
    config = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                                     intermediate_size=128, vocab_size=500,
                                     max_position_embeddings=64)
    ids = torch.randint(0, 500, (2, 16))
    return transformers.BertModel(config), {"input_ids": ids,
                                            "attention_mask": torch.ones_like(ids)}


MODELS: dict[str, Callable[[], tuple[nn.Module, Any]]] = {
    "resnet18": lambda: (torchvision.models.resnet18(weights=None), torch.randn(1, 3, 64, 64)),
    "mobilenet_v2": lambda: (torchvision.models.mobilenet_v2(weights=None),
                             torch.randn(1, 3, 64, 64)),
    "vit_b_16": lambda: (torchvision.models.vit_b_16(weights=None), torch.randn(1, 3, 224, 224)),
    "gpt2": gpt2,
    "bert": bert,
}


def call(model: nn.Module, example: Any) -> Any:
    return model(**example) if isinstance(example, dict) else model(example)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_real_model_profiles_exactly(name: str) -> None:
    model, example = MODELS[name]()
    model.eval()
    before = snapshot(model)
    profile = ModuleProfiler().profile(model, example)
    assert_unchanged(model, before)
    # tied weights (GPT-2's wte / lm_head) once
    assert profile.total_params == sum(p.numel() for p in model.parameters())
    assert profile.uncalled == () or all(path for path in profile.uncalled)
    reference = decomposed_flops(lambda: call(model, example))
    assert profile.total_flops == reference


def llama() -> tuple[nn.Module, Any]:
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2,
                                      vocab_size=100)
    return transformers.LlamaForCausalLM(config), {"input_ids": torch.randint(0, 100, (1, 8))}


def mixtral() -> tuple[nn.Module, Any]:
    config = transformers.MixtralConfig(hidden_size=64, intermediate_size=128,
                                        num_hidden_layers=1, num_attention_heads=4,
                                        num_key_value_heads=2, vocab_size=100,
                                        num_local_experts=4, num_experts_per_tok=2)
    return transformers.MixtralForCausalLM(config), {"input_ids": torch.randint(0, 100, (1, 8))}


def t5() -> tuple[nn.Module, Any]:
    config = transformers.T5Config(d_model=64, d_ff=128, num_layers=2, num_heads=4,
                                   vocab_size=100, d_kv=16)
    return transformers.T5ForConditionalGeneration(config), {
        "input_ids": torch.randint(0, 100, (1, 8)),
        "decoder_input_ids": torch.randint(0, 100, (1, 4))}


@pytest.mark.parametrize("build", [llama, mixtral, t5], ids=["llama", "mixtral", "t5"])
def test_more_architectures_are_counted_completely(build: Callable[[], tuple[nn.Module, Any]]
                                                   ) -> None:
    model, example = build()
    model.eval()
    before = snapshot(model)
    profile = ModuleProfiler().profile(model, example, backward=True)
    assert_unchanged(model, before)
    assert profile.complete, (profile.unsupported_ops, profile.backward_unsupported_ops)
    assert profile.total_params == sum(p.numel() for p in model.parameters())
    # every Linear's own macs: rows * in_features * out_features, read from its traced shapes
    linears = [r for r in profile.records if r.type_name == "Linear"]
    assert linears
    for record in linears:
        *leading, in_features = record.input_shapes[0]
        rows = 1
        for size in leading:
            rows *= size
        assert record.self_macs == rows * in_features * record.output_shapes[-1]
