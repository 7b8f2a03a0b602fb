"""Generation step by step: per-step counts against hand arithmetic and the reference, the
cache on and off, a user decode loop, encoder-decoders, time and memory."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler, Profiler, ProfilingError
from moduleprofiler.language import profile_generation, text_inputs
from tests.conftest import decomposed_flops
from tests.language.tiny import FLOAT32, HEAD_DIM, HEADS, HIDDEN, LAYERS, VOCAB, gpt2, t5
from tests.timing.helpers import Spin, no_hooks_left

PROMPT = 5
NEW = 4

# GPT-2 multiply-accumulates per token and layer: c_attn 64 -> 192, attention c_proj 64 -> 64,
# MLP 64 -> 256 -> 64: 3h^2 + h^2 + 4h^2 + 4h^2 = 12 x 64^2 = 49,152.
PER_TOKEN_LAYER = 12 * HIDDEN * HIDDEN
# Attention of q queries over c keys in one layer: Q.K^T and A.V, q x c x 64 each.
# generate() keeps only the last position's logits (logits_to_keep=1): one lm_head row, 64 x 100.
LM_HEAD = HIDDEN * VOCAB


def attention(queries: int, context: int) -> int:
    return 2 * queries * context * HIDDEN


def gpt2_step_macs(queries: int, context: int) -> int:
    return LAYERS * (queries * PER_TOKEN_LAYER + attention(queries, context)) + LM_HEAD


def test_prefill_and_decode_match_the_hand_count() -> None:
    model = gpt2()
    inputs = text_inputs(model, 1, PROMPT)
    result = profile_generation(model, inputs, max_new_tokens=NEW)
    assert [step.phase for step in result.steps] == ["prefill", "decode", "decode", "decode"]
    assert [step.input_tokens for step in result.steps] == [5, 1, 1, 1]
    assert [step.context_tokens for step in result.steps] == [5, 6, 7, 8]
    # prefill: 2 x (5 x 49,152 + 2 x 5 x 5 x 64) + 6,400 = 491,520 + 6,400 + 6,400 = 504,320
    assert result.steps[0].profile.total_macs == gpt2_step_macs(5, 5) == 504_320
    # decode with the cache: one query over the context c: 2 x (49,152 + 2 x c x 64) + 6,400;
    # c = 6: 98,304 + 1,536 + 6,400 = 106,240; each further token adds 2 x 2 x 64 = 256
    assert [step.profile.total_macs for step in result.decode] == [
        gpt2_step_macs(1, c) for c in (6, 7, 8)] == [106_240, 106_496, 106_752]
    assert all(step.profile.complete for step in result.steps)
    summary = result.totals()
    assert summary["new_tokens"] == NEW and summary["steps"] == NEW
    total = 2 * (504_320 + 106_240 + 106_496 + 106_752)
    assert summary["flops"] == total == 1_647_616
    assert summary["flops_per_token"] == total / NEW
    assert summary["prefill_flops"] == 2 * 504_320
    assert result.output.shape == (1, PROMPT + NEW)


def test_prefill_is_the_forward_on_the_prompt() -> None:
    # The same forward with all five positions' logits costs four more lm_head rows.
    model = gpt2()
    inputs = text_inputs(model, 1, PROMPT)
    result = profile_generation(model, inputs, max_new_tokens=1)
    forward = ModuleProfiler().profile(model, inputs)
    assert forward.total_macs - result.steps[0].profile.total_macs == (PROMPT - 1) * LM_HEAD


def test_cache_off_recomputes_the_whole_sequence() -> None:
    model = gpt2()
    inputs = text_inputs(model, 1, PROMPT)
    on = profile_generation(model, inputs, max_new_tokens=NEW)
    off = profile_generation(model, inputs, max_new_tokens=NEW, use_cache=False)
    assert [step.input_tokens for step in off.steps] == [5, 6, 7, 8]
    assert all(step.kv_cache is None for step in off.steps)
    # n tokens again at every step: 2 x (n x 49,152 + 2 x n x n x 64) + 6,400;
    # n = 6: 589,824 + 9,216 + 6,400 = 605,440
    assert [step.profile.total_macs for step in off.steps] == [
        gpt2_step_macs(n, n) for n in (5, 6, 7, 8)]
    assert off.steps[1].profile.total_macs == 605_440
    assert off.steps[0].profile.total_macs == on.steps[0].profile.total_macs
    # the same tokens come out either way
    assert torch.equal(on.output, off.output)


def test_cache_bytes_per_step() -> None:
    model = gpt2()
    result = profile_generation(model, text_inputs(model, 1, PROMPT), max_new_tokens=NEW)
    # 2 (keys, values) x 2 layers x 4 heads x 16 x c tokens x 4 bytes = 1,024 c
    expected = [2 * LAYERS * HEADS * HEAD_DIM * c * FLOAT32 for c in (5, 6, 7, 8)]
    assert list(result.to_df()["kv_cache_bytes"]) == expected == [5120, 6144, 7168, 8192]
    assert result.totals()["kv_cache_bytes"] == 8192


def test_a_user_decode_loop_matches_the_reference() -> None:
    transformers = pytest.importorskip("transformers")
    model = gpt2()
    ids = text_inputs(model, 1, PROMPT)["input_ids"]

    def loop() -> list[int]:
        cache = transformers.DynamicCache(config=model.config)
        out = model(input_ids=ids, cache=cache, use_cache=True)
        tokens = [int(out.logits[0, -1].argmax())]
        for _ in range(2):
            out = model(input_ids=torch.tensor([[tokens[-1]]]), cache=cache,
                        use_cache=True)
            tokens.append(int(out.logits[0, -1].argmax()))
        return tokens

    result = profile_generation(model, run=loop)
    assert [step.phase for step in result.steps] == ["prefill", "decode", "decode"]
    # the reference, step by step on a fresh cache (FlopCounterMode, decomposed attention)
    cache = transformers.DynamicCache(config=model.config)
    reference = [decomposed_flops(lambda: model(input_ids=ids, cache=cache))]
    for token in loop()[:2]:
        reference.append(decomposed_flops(
            lambda t=token: model(input_ids=torch.tensor([[t]]), cache=cache)))
    assert [step.profile.total_flops for step in result.steps] == reference
    # all positions' logits here: 2 x (2 x (5 x 49,152 + 2 x 5 x 5 x 64) + 5 x 6,400)
    assert reference[0] == 2 * (LAYERS * (5 * PER_TOKEN_LAYER + attention(5, 5)) + 5 * LM_HEAD)


def test_a_decode_loop_over_the_base_model_and_its_head_generates_tokens() -> None:
    transformers = pytest.importorskip("transformers")
    model = gpt2()
    ids = text_inputs(model, 1, PROMPT)["input_ids"]

    def loop() -> None:  # the trunk and the head called apart, the last position's logits
        cache = transformers.DynamicCache(config=model.config)
        hidden = model.transformer(input_ids=ids, cache=cache).last_hidden_state
        token = model.lm_head(hidden[:, -1:]).argmax(-1)
        for _ in range(2):
            hidden = model.transformer(input_ids=token, cache=cache).last_hidden_state
            token = model.lm_head(hidden[:, -1:]).argmax(-1)

    result = profile_generation(model, run=loop)
    # the trunk generates; the head called after it belongs to its step and adds no token
    assert [step.phase for step in result.steps] == ["prefill", "prefill", "decode", "decode",
                                                     "decode", "decode"]
    assert result.new_tokens == 3
    # the same work as generate()'s three steps: prefill 2 x (2 x (5 x 49,152 + 2 x 5 x 5 x
    # 64) + 6,400) = 1,008,640 FLOPs; decode 2 x (2 x (49,152 + 2 x c x 64) + 6,400) at
    # contexts 6 and 7: 212,480 + 212,992; over 3 tokens 478,037.33 FLOPs a token
    generated = profile_generation(model, text_inputs(model, 1, PROMPT), max_new_tokens=3,
                                   min_new_tokens=3)
    totals, reference = result.totals(), generated.totals()
    assert totals["prefill_flops"] == reference["prefill_flops"] == 2 * gpt2_step_macs(5, 5) \
        == 1_008_640
    assert totals["decode_flops"] == reference["decode_flops"] == 212_480 + 212_992
    assert totals["flops_per_token"] == reference["flops_per_token"] == 1_434_112 / 3


def test_beam_search_batch_is_the_beams_for_an_encoder_decoder_too() -> None:
    model = t5()
    ids = text_inputs(model, 1, 5)["input_ids"]
    result = profile_generation(model, {"input_ids": ids}, max_new_tokens=2, min_new_tokens=2,
                                num_beams=2)
    # the encoder reads the one prompt; the decoder runs both beams, as every step of a
    # decoder-only model does: 2 new tokens x 2 beams = 4 tokens generated
    assert [step.batch_size for step in result.steps] == [1, 2, 2]
    assert result.batch_size == 2
    totals = result.totals()
    assert totals["batch_size"] == 2
    assert totals["flops_per_token"] == totals["flops"] / (2 * 2)


def test_the_generation_config_given_is_the_one_generate_uses() -> None:
    transformers = pytest.importorskip("transformers")
    model = gpt2()
    inputs = text_inputs(model, 1, PROMPT)
    config = transformers.GenerationConfig(max_new_tokens=2, min_new_tokens=2, use_cache=False,
                                           do_sample=True, top_k=0, temperature=5.0)
    torch.manual_seed(3)
    result = profile_generation(model, inputs, generation_config=config)
    # its length and cache, not the defaults beside it (8 steps, the cache on): 2 steps, the
    # second reading all 6 tokens again: 2 x (2 x (6 x 49,152 + 2 x 6 x 6 x 64) + 6,400)
    assert [step.input_tokens for step in result.steps] == [PROMPT, PROMPT + 1]
    assert result.steps[1].profile.total_flops == 2 * gpt2_step_macs(6, 6) == 1_210_880
    # and its sampling, not greedy search: the tokens generate() samples from the same seed
    torch.manual_seed(3)
    sampled = model.generate(**inputs, generation_config=config)
    greedy = model.generate(**inputs, max_new_tokens=2, min_new_tokens=2, do_sample=False)
    assert torch.equal(result.output, sampled) and not torch.equal(sampled, greedy)
    # a length named beside it still wins, as in generate()
    assert profile_generation(model, inputs, max_new_tokens=3, min_new_tokens=3,
                              generation_config=config).new_tokens == 3


def test_a_tokenizers_batch_encoding_is_the_keyword_inputs() -> None:
    transformers = pytest.importorskip("transformers")
    model = gpt2()
    ids = text_inputs(model, 2, PROMPT)["input_ids"]
    mask = torch.ones_like(ids)
    mask[1, :2] = 0  # the second prompt left-padded by 2
    encoding = transformers.BatchEncoding({"input_ids": ids, "attention_mask": mask})
    result = profile_generation(model, encoding, max_new_tokens=2, min_new_tokens=2)
    reference = model.generate(**encoding, max_new_tokens=2, min_new_tokens=2, do_sample=False)
    assert torch.equal(result.output, reference)
    # padding included: batch 2 x (2 layers x (5 x 49,152 + 2 x 5 x 5 x 64) + 6,400) = 1,008,640
    assert result.steps[0].profile.total_macs == 2 * gpt2_step_macs(5, 5) == 1_008_640


def test_encoder_decoder_has_an_encode_step() -> None:
    model = t5()
    ids = text_inputs(model, 1, 7)["input_ids"]
    result = profile_generation(model, {"input_ids": ids}, max_new_tokens=3, min_new_tokens=3)
    assert [step.phase for step in result.steps] == ["encode", "prefill", "decode", "decode"]
    assert result.steps[0].path == "encoder"
    assert result.new_tokens == 3
    encoder = ModuleProfiler().profile(model.get_encoder(), {"input_ids": ids})
    assert result.steps[0].profile.total_macs == encoder.total_macs
    # after decode step 2 the decoder holds 3 tokens, the cross-attention the 7 encoder
    # outputs: 2 x 2 layers x 4 heads x 16 x (3 + 7) tokens x 4 bytes = 10,240
    last = result.steps[-1].kv_cache
    assert last is not None and (last.tokens, last.total_bytes) == (3, 10_240)


def test_time_and_memory_when_asked() -> None:
    model = gpt2()
    result = profile_generation(model, text_inputs(model, 1, PROMPT), max_new_tokens=3,
                                time=True, memory=True, repeats=1)
    frame = result.to_df()
    assert frame["time_ms"].notna().all() and (frame["time_ms"] > 0).all()
    parameter_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    # live memory counts the weights throughout, and the step's activations on top
    assert (frame["max_live_bytes"] > parameter_bytes).all()
    summary = result.totals()
    assert summary["ms_per_token"] == pytest.approx(frame["time_ms"].sum() / 3)
    untimed = profile_generation(model, text_inputs(model, 1, PROMPT), max_new_tokens=2)
    assert untimed.to_df()["time_ms"].isna().all() and untimed.totals()["time_ms"] is None
    # the one-row table: an untimed run's times are NaN in float columns, as the steps'
    row = untimed.summary()
    assert row["time_ms"].dtype == "float64" and row["time_ms"].isna().all()
    # untimed steps hold NaN in a float column (they held None, in an object column)
    times = untimed.to_df()["time_ms"]
    assert times.dtype == "float64" and all(math.isnan(value) for value in times.tolist())
    assert repr(result).startswith("<GenerationProfile GPT2LMHeadModel: 3 steps (1 prefill, "
                                   "2 decode), 3 new tokens x batch 1, ")
    assert repr(result).endswith(" ms>") or repr(result).endswith("us>")


def test_repr_is_one_line_of_totals() -> None:
    model = gpt2()
    result = profile_generation(model, text_inputs(model, 1, PROMPT), max_new_tokens=NEW)
    # MACs: prefill 504,320; decode at contexts 6, 7, 8: 2 x (49,152 + 2 x c x 64) + 6,400
    # each = 3 x 104,704 + 256 x 21 = 319,488; FLOPs 2 x 823,808 = 1,647,616 = 1.65M
    assert gpt2_step_macs(5, 5) + sum(gpt2_step_macs(1, c) for c in (6, 7, 8)) == 823_808
    assert repr(result) == ("<GenerationProfile GPT2LMHeadModel: 4 steps (1 prefill, "
                            "3 decode), 4 new tokens x batch 1, 1.65M FLOPs>")


def test_bad_arguments_are_named() -> None:
    model = gpt2()
    with pytest.raises(ValueError, match="max_new_tokens"):
        profile_generation(model, text_inputs(model), max_new_tokens=0)
    with pytest.raises(ValueError, match="inputs"):
        profile_generation(model)
    with pytest.raises(TypeError, match="generate"):
        profile_generation(torch.nn.Linear(2, 2), torch.zeros(1, 2))
    with pytest.raises(TypeError, match="run"):
        profile_generation(model, run=3)  # type: ignore[arg-type]
    with pytest.raises(ProfilingError):
        profile_generation(model, {"input_ids": torch.zeros(1, 3, dtype=torch.long)},
                           max_new_tokens=2, bad_option_name=1)
    # inputs beside run went nowhere; a run that never called the model returned a result
    # without steps whose summary() raised KeyError 'phase'
    ids = text_inputs(model, 1, 4)
    with pytest.raises(ValueError, match=r"pass inputs .* or run .*, not both"):
        profile_generation(model, ids, run=lambda: model(**ids))
    with pytest.raises(ProfilingError, match=r"run made no call of the model \(GPT2LMHeadModel\)"):
        profile_generation(model, run=lambda: None)


def test_the_model_is_left_as_it_was() -> None:
    model = gpt2()
    model.train()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    profile_generation(model, text_inputs(model, 1, 3), max_new_tokens=2)
    assert model.training
    assert all(torch.equal(before[name], p) for name, p in model.named_parameters())
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())
    model.eval()


def test_a_sampled_generation_leaves_the_random_number_generator_as_it_was() -> None:
    model = gpt2()
    ids = text_inputs(model, 1, 3)
    torch.manual_seed(4)
    expected = torch.rand(3)
    torch.manual_seed(4)
    # sampling draws every new token from the global generator
    profile_generation(model, ids, max_new_tokens=2, do_sample=True)
    assert torch.equal(torch.rand(3), expected)


def test_step_times_of_known_duration_come_from_the_measurement_loop() -> None:
    model = Spin(300)  # a 300 us busy-wait per call
    x = torch.zeros(1, 2)
    result = profile_generation(model, run=lambda: [model(x) for _ in range(3)], time=True,
                                repeats=3)
    times = [step.time_ms for step in result.steps]
    # three calls, three steps, each its 300 us (plus its call and two clock reads)
    assert len(times) == 3 and all(t is not None and 0.3 <= t < 0.3 * 1.5 + 0.2 for t in times)
    assert no_hooks_left(model) and torch.is_grad_enabled()


def test_summary_is_a_one_row_table_as_every_profiles() -> None:
    # GenerationProfile.summary() returned a dict where every Profile's summary() returns a
    # one-row DataFrame: the same numbers are its row now, under the same names, and the
    # dict is totals()
    model = gpt2()
    result = profile_generation(model, text_inputs(model, 1, PROMPT), max_new_tokens=NEW,
                                min_new_tokens=NEW)
    summary = result.summary()
    assert isinstance(summary, pd.DataFrame) and len(summary) == 1
    totals = result.totals()
    assert list(summary.columns) == list(totals)
    assert summary.columns[0] == "model" and totals["model"] == "GPT2LMHeadModel"
    # the tests above: 2 x (504,320 + 106,240 + 106,496 + 106,752) = 1,647,616 FLOPs
    assert summary.loc[0, "flops"] == totals["flops"] == 1_647_616
    assert summary["flops"].dtype == "Int64" and summary["complete"].dtype == bool
    # the model's summary row and the run's share their names: model, flops, macs, complete
    shared = set(Profiler().profile(nn.Linear(2, 2), torch.randn(1, 2)).summary().columns)
    assert {"model", "flops", "macs", "complete"} <= shared & set(summary.columns)


def test_the_summary_of_counts_past_64_bits_is_exact() -> None:
    from moduleprofiler.language.generation import GenerationProfile, Step
    # Linear(10**7, 10**7) without bias on 5 * 10**4 rows: 5e4 * 1e7 * 1e7 = 5 * 10**18 MACs
    # a step (under 2**63 ~ 9.22e18); two steps: 10**19 MACs and 2 * 10**19 FLOPs, past it
    step_profile = Profiler().profile(nn.Linear(10**7, 10**7, bias=False, device="meta"),
                                      torch.zeros(5 * 10**4, 10**7, device="meta"))
    steps = tuple(Step(index, phase, "", step_profile, 1, 1, 1, None)
                  for index, phase in enumerate(("prefill", "decode")))
    row = GenerationProfile(steps, step_profile).summary().iloc[0]
    assert (row["macs"], row["flops"]) == (10**19, 2 * 10**19)
    assert (row["prefill_flops"], row["decode_flops"]) == (10**19, 10**19)
