"""Mixture of experts: per-expert token counts against the router's own assignments, load
balance, and active against total parameters."""

from __future__ import annotations

import pytest
import torch

from moduleprofiler import ModuleProfiler
from moduleprofiler.language import (
    ExpertLoad,
    hf_model,
    moe_parameters,
    profile_generation,
    text_inputs,
)
from tests.language.tiny import HIDDEN, LAYERS, VOCAB, mixtral

TOKENS = 16
EXPERTS, TOP_K, INTERMEDIATE = 4, 2, 128


def router_choices(model: torch.nn.Module, call: object) -> dict[str, list[int]]:
    """The reference: each router's top-k indices as it returns them, counted per layer."""
    counts: dict[str, list[int]] = {}
    handles = []
    for name, module in model.named_modules():
        if type(module).__name__ == "MixtralTopKRouter":
            layer = name.rsplit(".", 1)[0] + ".experts"

            def hook(module: torch.nn.Module, args: object, output: tuple[torch.Tensor, ...],
                     layer: str = layer) -> None:
                found = torch.bincount(output[2].reshape(-1), minlength=EXPERTS).tolist()
                counts[layer] = [a + b for a, b in zip(counts.get(layer, [0] * EXPERTS),
                                                       found, strict=True)]

            handles.append(module.register_forward_hook(hook))
    try:
        call()  # type: ignore[operator]
    finally:
        for handle in handles:
            handle.remove()
    return counts


def test_expert_counts_are_the_router_assignments() -> None:
    model = mixtral()
    inputs = text_inputs(model, 1, TOKENS)
    load = ExpertLoad()
    profile = ModuleProfiler().profile(model, inputs, listeners=[load])
    assert profile.complete
    with torch.no_grad():
        expected = router_choices(model, lambda: model(**inputs))
    assert load.counts == expected
    assert len(load.counts) == LAYERS
    # every token goes to top-2 experts: 16 x 2 = 32 assignments per layer
    assert all(sum(counts) == TOKENS * TOP_K for counts in load.counts.values())
    frame = load.to_df()
    assert len(frame) == LAYERS * EXPERTS
    assert frame.groupby("module")["tokens_share"].sum().round(12).eq(1.0).all()
    balance = load.balance()
    for row in balance.itertuples():
        counts = expected[row.module]
        assert row.max_tokens == max(counts) and row.min_tokens == min(counts)
        assert row.max_over_mean == max(counts) / (TOKENS * TOP_K / EXPERTS)
        assert row.top_k == TOP_K and row.assignments == 32
    # the experts' MACs are those of the 32 assignments: 32 x (64 x 256 + 128 x 64) per layer
    experts_macs = [record.self_macs for record in profile.records if record.type_name ==
                    "MixtralExperts"]
    assert experts_macs == [TOKENS * TOP_K * (HIDDEN * 2 * INTERMEDIATE
                                              + INTERMEDIATE * HIDDEN)] * LAYERS


def test_expert_tables_name_the_module_as_every_table_does() -> None:
    # the experts module's path was the column "layer" (a cache table's "layer" is a position),
    # the balance's expert count "experts" (MoEParameters.num_experts): the old names
    # still select their column until 0.3.0, with a DeprecationWarning naming the new one
    model = mixtral()
    load = ExpertLoad()
    ModuleProfiler().profile(model, text_inputs(model, 1, TOKENS), listeners=[load])
    frame, balance = load.to_df(), load.balance()
    assert list(frame.columns) == ["module", "expert", "tokens", "tokens_share"]
    assert list(balance.columns)[:2] == ["module", "num_experts"]
    assert list(balance["num_experts"]) == [EXPERTS] * LAYERS
    with pytest.warns(DeprecationWarning, match=r"ExpertLoad.to_df\(\)'s column 'layer' is "
                                                r"deprecated and will be removed in "
                                                r"moduleprofiler 0.3.0; use 'module'"):
        assert list(frame["layer"]) == list(frame["module"])
    with pytest.warns(DeprecationWarning, match=r"column 'experts' .* use 'num_experts'"):
        assert list(balance.experts) == [EXPERTS] * LAYERS
    with pytest.warns(DeprecationWarning, match="'layer'"):
        assert list(balance[["layer", "top_k"]].columns) == ["module", "top_k"]
    # "share" read as the subtree twin of self_share (a module's self time over its time)
    with pytest.warns(DeprecationWarning, match=r"column 'share' .* use 'tokens_share'"):
        assert list(frame["share"]) == list(frame["tokens_share"])


def test_expert_load_over_a_generation() -> None:
    model = mixtral()
    load = ExpertLoad()
    result = profile_generation(model, text_inputs(model, 1, 6), max_new_tokens=3,
                                min_new_tokens=3, listeners=[load])
    assert len(result.steps) == 3
    # 6 prompt tokens, then one token per decode step: (6 + 1 + 1) x top-2 = 16 per layer
    assert all(sum(counts) == 16 for counts in load.counts.values())
    assert all(calls == 3 for calls in load.calls.values())


def test_active_and_total_parameters() -> None:
    model = mixtral()
    moe = moe_parameters(model)
    # one expert: gate_up 2 x 128 x 64 + down 64 x 128 = 24,576; 4 experts in 2 layers
    expert = LAYERS * EXPERTS * (2 * INTERMEDIATE * HIDDEN + HIDDEN * INTERMEDIATE)
    assert moe.expert == expert == 196_608
    assert moe.total == sum(p.numel() for p in model.parameters())
    # a token uses 2 of the 4 experts of each layer: total - 196,608 + 2 x 2 x 24,576
    assert moe.active == moe.total - expert + LAYERS * TOP_K * 24_576
    assert (moe.layers, moe.num_experts, moe.top_k) == (LAYERS, EXPERTS, TOP_K)
    assert moe_parameters(model, top_k=1).active == moe.total - expert + LAYERS * 24_576


def test_mixtral_8x7b_on_meta() -> None:
    # Mixtral-8x7B's published shape (32 layers, hidden 4,096, 8 experts of 14,336, top-2,
    # vocabulary 32,000): 46.7 B parameters, 12.9 B active
    model = hf_model("mixtral", vocab_size=32_000, dtype=torch.bfloat16)
    moe = moe_parameters(model)
    assert moe.total == 46_702_792_704
    assert moe.expert == 32 * 8 * 3 * 4_096 * 14_336
    assert moe.active == 12_879_925_248
    load = ExpertLoad()
    ModuleProfiler().profile(model, text_inputs(model, 1, 4), listeners=[load])
    assert load.counts == {} and len(load.unknown) == 32  # meta tensors have no values


def test_dense_model_has_no_experts() -> None:
    moe = moe_parameters(torch.nn.Linear(VOCAB, 3))
    assert (moe.expert, moe.layers, moe.active) == (0, 0, None)
    with pytest.raises(ValueError, match="top_k"):
        moe_parameters(mixtral(), top_k=0)
