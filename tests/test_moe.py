"""Mixture of experts: Hugging Face MoE blocks counted by hand.

Hugging Face's expert layers (transformers >= 5) store every expert's weights in one 3-D tensor and
run them with one ``torch._grouped_mm`` per projection (``experts_implementation="grouped_mm"``,
the default where the kernel exists), with per-expert ``bmm`` (``"batched_mm"``) or with a Python
loop of ``F.linear`` over the experts that were hit (``"eager"``). FlopCounterMode has no formula
for ``aten._grouped_mm`` and counts it as 0: on the default path it sees only the router (and
any dense shared expert), none of the routed experts' work. moduleprofiler prices
``_grouped_mm`` at ``rows x in x out`` like any matrix product, so every path gives the hand count:
only the (token, chosen expert) pairs do work, ``tokens x top_k`` of them, whatever the routing.
(``tests/test_models.py`` checks a whole Mixtral for completeness and per-Linear counts; this file
checks the expert arithmetic.)
"""

from __future__ import annotations

import pytest
import torch

from moduleprofiler import ModuleProfiler
from tests.conftest import decomposed_flops

transformers = pytest.importorskip("transformers")
moe = pytest.importorskip("transformers.integrations.moe")
if not hasattr(torch, "_grouped_mm") or "grouped_mm" not in moe.ALL_EXPERTS_FUNCTIONS:
    pytest.skip("needs torch._grouped_mm and transformers' grouped_mm experts",
                allow_module_level=True)

TOKENS = 16  # batch 1 x sequence 16
HIDDEN = 64
EXPERTS = 4
TOP_K = 2

IMPLEMENTATIONS = ["grouped_mm", "batched_mm", "eager"]


def mixtral_block(implementation: str) -> torch.nn.Module:
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

    config = transformers.MixtralConfig(
        hidden_size=HIDDEN, intermediate_size=128, num_local_experts=EXPERTS,
        num_experts_per_tok=TOP_K, num_hidden_layers=1, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=100, experts_implementation=implementation)
    block = MixtralSparseMoeBlock(config).eval()
    for parameter in block.parameters():  # the block's weights start uninitialised
        torch.nn.init.normal_(parameter, std=0.02)
    return block


def qwen2_moe_block(implementation: str) -> torch.nn.Module:
    from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock

    config = transformers.Qwen2MoeConfig(
        hidden_size=HIDDEN, moe_intermediate_size=32, shared_expert_intermediate_size=48,
        num_experts=EXPERTS, num_experts_per_tok=TOP_K, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, vocab_size=100,
        experts_implementation=implementation)
    block = Qwen2MoeSparseMoeBlock(config).eval()
    for parameter in block.parameters():
        torch.nn.init.normal_(parameter, std=0.02)
    return block


# Mixtral block, hidden 64, 4 experts of intermediate size 128, top-2, 16 tokens:
#   router    tokens x hidden x experts               = 16 x 64 x 4            =   4,096
#   experts   tokens x top_k x per-expert MACs, where one expert is
#             gate_up (hidden -> 2 x 128) + down (128 -> hidden)
#             = 64 x 256 + 128 x 64 = 24,576          = 16 x 2 x 24,576        = 786,432
#   total                                                                      = 790,528 MACs
MIXTRAL_ROUTER = TOKENS * HIDDEN * EXPERTS
MIXTRAL_EXPERTS = TOKENS * TOP_K * (HIDDEN * 2 * 128 + 128 * HIDDEN)
assert (MIXTRAL_ROUTER, MIXTRAL_EXPERTS) == (4_096, 786_432)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_mixtral_block_equals_the_hand_count(implementation: str) -> None:
    block = mixtral_block(implementation)
    x = torch.randn(1, TOKENS, HIDDEN)
    profile = ModuleProfiler().profile(block, x)
    assert profile.complete
    assert profile.total_macs == MIXTRAL_ROUTER + MIXTRAL_EXPERTS == 790_528
    assert profile.calls("gate")[0].self_macs == MIXTRAL_ROUTER
    assert profile.calls("experts")[0].self_macs == MIXTRAL_EXPERTS

    reference = decomposed_flops(lambda: block(x))
    if implementation == "grouped_mm":
        # FlopCounterMode counts aten._grouped_mm as 0: it sees the router's mm and none of
        # the 786,432 expert MACs.
        assert reference == 2 * MIXTRAL_ROUTER == 8_192
    else:
        # bmm / F.linear per expert: FlopCounterMode has formulas for these and agrees.
        assert reference == 2 * (MIXTRAL_ROUTER + MIXTRAL_EXPERTS)


# Qwen2-MoE block: 4 routed experts of intermediate size 32 (top-2) beside a dense shared
# expert of intermediate size 48 behind a sigmoid gate, hidden 64, 16 tokens:
#   router          16 x 64 x 4                                          =   4,096
#   routed experts  16 x 2 x (64 x 2 x 32 + 32 x 64)  = 16 x 2 x 6,144   = 196,608
#   shared expert   16 x (64 x 48 + 64 x 48 + 48 x 64) = 16 x 9,216      = 147,456
#                   (gate_proj, up_proj, down_proj: nn.Linear modules)
#   shared gate     16 x 64 x 1                                          =   1,024
#   total                                                                = 349,184 MACs
QWEN_ROUTER = TOKENS * HIDDEN * EXPERTS
QWEN_EXPERTS = TOKENS * TOP_K * (HIDDEN * 2 * 32 + 32 * HIDDEN)
QWEN_SHARED = TOKENS * 3 * HIDDEN * 48 + TOKENS * HIDDEN * 1
assert (QWEN_ROUTER, QWEN_EXPERTS, QWEN_SHARED) == (4_096, 196_608, 148_480)


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
def test_qwen2_moe_block_equals_the_hand_count(implementation: str) -> None:
    block = qwen2_moe_block(implementation)
    x = torch.randn(1, TOKENS, HIDDEN)
    profile = ModuleProfiler().profile(block, x)
    assert profile.complete
    assert profile.total_macs == QWEN_ROUTER + QWEN_EXPERTS + QWEN_SHARED == 349_184
    assert profile.calls("experts")[0].self_macs == QWEN_EXPERTS

    reference = decomposed_flops(lambda: block(x))
    if implementation == "grouped_mm":
        # FlopCounterMode sees the router and the dense shared expert (plain mm) but counts
        # the routed experts' aten._grouped_mm as 0: it misses 196,608 of 349,184 MACs.
        assert reference == 2 * (QWEN_ROUTER + QWEN_SHARED) == 305_152
    else:
        assert reference == 2 * (QWEN_ROUTER + QWEN_EXPERTS + QWEN_SHARED)


def test_whole_mixtral_differs_from_the_reference_by_the_experts_only() -> None:
    # 2 decoder layers, 16 tokens, experts of intermediate size 512, hidden 64, top-2: the
    # reference misses exactly 16 x 2 x 2 x (64 x 1024 + 512 x 64) expert MACs (what the zoo
    # sweep, benchmarks/zoo.py, reports as the reference's blind spot for every HF MoE model).
    config = transformers.MixtralConfig(
        hidden_size=HIDDEN, intermediate_size=512, num_local_experts=EXPERTS,
        num_experts_per_tok=TOP_K, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=100, experts_implementation="grouped_mm")
    model = transformers.MixtralModel(config).eval()
    ids = torch.randint(0, 100, (1, TOKENS))
    profile = ModuleProfiler().profile(model, {"input_ids": ids})
    assert profile.complete
    reference = decomposed_flops(lambda: model(input_ids=ids))
    missed = TOKENS * TOP_K * 2 * (HIDDEN * 2 * 512 + 512 * HIDDEN)
    assert missed == 6_291_456
    assert profile.total_flops - reference == 2 * missed
