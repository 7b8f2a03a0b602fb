"""Key/value cache bytes from the tensors held, against 2 x layers x kv_heads x head_dim x
tokens x batch x dtype size, for dynamic, static, encoder-decoder and legacy caches."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from moduleprofiler.language import (
    hf_config,
    hf_model,
    kv_cache_size,
    predict_kv_cache_bytes,
    profile_generation,
    text_inputs,
)
from tests.language.tiny import FLOAT32, HEAD_DIM, KV_HEADS, LAYERS, llama

transformers = pytest.importorskip("transformers")
NEEDS_TRANSFORMERS_5_24 = pytest.mark.skipif(
    tuple(int(part) for part in transformers.__version__.split(".")[:2]) < (5, 24),
    reason="the language extra needs transformers >= 5.24 (older versions build other "
           "attention and cache code paths)")


def formula(tokens: int, batch: int = 1, bytes_per_value: int = FLOAT32) -> int:
    return 2 * LAYERS * KV_HEADS * HEAD_DIM * tokens * batch * bytes_per_value


def test_dynamic_cache_with_grouped_query_attention() -> None:
    model = llama()
    result = profile_generation(model, text_inputs(model, 2, 6), max_new_tokens=3,
                                min_new_tokens=3)
    cache = result.steps[-1].kv_cache
    assert cache is not None and cache.cache_type == "DynamicCache"
    # 2 x 2 layers x 2 key/value heads (not the 4 query heads) x 16 x 8 tokens x batch 2
    # x 4 bytes = 8,192
    assert cache.total_bytes == formula(8, batch=2) == 8_192
    assert cache.total_bytes == predict_kv_cache_bytes(model.config, 8, batch_size=2,
                                                       dtype=torch.float32)
    frame = cache.to_df()
    assert list(frame["kv_cache_bytes"]) == [4_096, 4_096]
    assert list(frame["key_bytes"]) == [2_048, 2_048]
    # the tokens a layer holds, as a generation's steps table names them: 8 each
    assert list(frame.columns) == ["layer", "kind", "context_tokens", "capacity", "key_bytes",
                                   "value_bytes", "kv_cache_bytes", "bytes_per_token"]
    assert list(frame["context_tokens"]) == [8, 8] == [result.steps[-1].context_tokens] * 2
    with pytest.warns(DeprecationWarning, match=r"KVCacheSize.to_df\(\)'s column 'tokens' "
                                                r"is deprecated .* use 'context_tokens'"):
        assert list(frame["tokens"]) == [8, 8]
    # per token position: 8,192 / 8 = 1,024 (both sequences of the batch); at 1,000 tokens
    assert cache.bytes_per_token == 1_024
    assert cache.predict_bytes(1_000) == formula(1_000, batch=2) == 1_024_000
    assert [step.kv_cache.tokens for step in result.steps if step.kv_cache] == [6, 7, 8]


@NEEDS_TRANSFORMERS_5_24
def test_static_cache_holds_its_full_length_from_the_start() -> None:
    model = llama()
    cache = transformers.StaticCache(config=model.config, max_cache_len=12)
    ids = text_inputs(model, 1, 4)["input_ids"]

    def loop() -> None:
        out = model(input_ids=ids, cache=cache, use_cache=True)
        for _ in range(2):
            out = model(input_ids=out.logits[:, -1:].argmax(-1), cache=cache,
                        use_cache=True)

    result = profile_generation(model, run=loop)
    sizes = [step.kv_cache for step in result.steps]
    # room for 12 tokens from the first step: 2 x 2 x 2 x 16 x 12 x 4 bytes = 6,144
    assert [size.total_bytes for size in sizes if size] == [formula(12)] * 3 == [6_144] * 3
    assert [size.tokens for size in sizes if size] == [4, 5, 6]
    assert [size.capacity for size in sizes if size] == [12, 12, 12]
    # a static cache attends over all its positions: every decode step costs the same
    decode = [step.profile.total_macs for step in result.decode]
    assert decode[0] == decode[1]


def test_half_precision_and_the_legacy_tuple_form() -> None:
    keys = torch.zeros(1, KV_HEADS, 10, HEAD_DIM, dtype=torch.float16)
    legacy = tuple((keys.clone(), keys.clone()) for _ in range(LAYERS))
    size = kv_cache_size(legacy)
    # 2 x 2 x 2 x 16 x 10 tokens x 2 bytes = 2,560
    assert size.total_bytes == formula(10, bytes_per_value=2) == 2_560
    config = hf_config("llama", num_hidden_layers=LAYERS, hidden_size=64,
                       num_attention_heads=4, num_key_value_heads=KV_HEADS)
    assert predict_kv_cache_bytes(config, 10, dtype=torch.float16) == 2_560


def test_views_of_one_storage_count_once() -> None:
    # a sliding window keeps a view of a longer tensor: the cache holds the whole storage
    full = torch.zeros(1, KV_HEADS, 20, HEAD_DIM)
    window = full[:, :, -8:]
    size = kv_cache_size([(window, full[:, :, :8])])
    assert size.layers[0].capacity == 8
    # keys and values each hold the 20-position storage: 2 x 2 x 20 x 16 x 4 = 5,120
    assert size.total_bytes == 5_120


def test_predictions_from_the_configuration() -> None:
    # Llama-2-7B's shape: 32 layers, 32 heads of 128 (no grouping): 2 x 32 x 32 x 128 x 4,096
    # tokens x 2 bytes (float16) = 2 GiB
    config = hf_config("llama")
    assert predict_kv_cache_bytes(config, 4_096, dtype=torch.float16) == 2 * 1024 ** 3
    # GPT-2 small: 12 layers x 12 heads x 64: 2 x 12 x 12 x 64 x 1,024 x 4 = 75,497,472
    assert predict_kv_cache_bytes(hf_config("gpt2"), 1_024, dtype=torch.float32) == 75_497_472
    # T5-small's decoder: 6 layers, 8 heads of d_kv 64, its self-attention alone without the
    # encoder's length, and said
    with pytest.warns(UserWarning, match=r"encoder-decoder, .* cross-attention keys and values "
                      r"of every encoder token \(24,576 bytes per encoder token\)"):
        assert predict_kv_cache_bytes(hf_config("t5"), 100, dtype=torch.float32) == \
            2 * 6 * 8 * 64 * 100 * 4
    # with it: 100 decoder and 30 encoder positions per layer: 2 x 6 x 8 x 64 x 130 x 4
    assert predict_kv_cache_bytes(hf_config("t5"), 100, dtype=torch.float32,
                                  encoder_tokens=30) == 2 * 6 * 8 * 64 * 130 * 4
    with pytest.raises(ValueError, match="encoder_tokens must be a non-negative int"):
        predict_kv_cache_bytes(hf_config("t5"), 100, encoder_tokens=-1)
    # a decoder alone has no cross-attention cache: the argument is refused, not ignored
    with pytest.raises(ValueError, match="encoder_tokens=30: GPT2Config is no encoder-decoder"):
        predict_kv_cache_bytes(hf_config("gpt2"), 100, dtype=torch.float32, encoder_tokens=30)
    with pytest.raises(ValueError, match="encoder_tokens must be a non-negative int"):
        predict_kv_cache_bytes(hf_config("gpt2"), 100, dtype=torch.float32, encoder_tokens=-1)


@pytest.mark.parametrize("family", ["t5", "bart"])
def test_an_encoder_decoders_prediction_is_its_measured_cache(family: str) -> None:
    # 3 decoder layers (2 encoder layers: the decoder's count is the one that caches), batch
    # 2, 5 decoder and 7 encoder tokens, float32: T5 with 4 heads of d_kv 8, BART with 2
    # decoder heads of 32 / 2 = 16 (4 encoder heads)
    if family == "t5":
        model = transformers.T5ForConditionalGeneration(transformers.T5Config(
            vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=3,
            num_heads=4))
    else:
        model = transformers.BartForConditionalGeneration(transformers.BartConfig(
            vocab_size=100, d_model=32, encoder_layers=2, decoder_layers=3,
            encoder_attention_heads=4, decoder_attention_heads=2, encoder_ffn_dim=64,
            decoder_ffn_dim=64, max_position_embeddings=64))
    with torch.no_grad():
        output = model.eval()(input_ids=torch.randint(3, 100, (2, 7)),
                              decoder_input_ids=torch.zeros(2, 5, dtype=torch.long))
    measured = kv_cache_size(output)
    # self: 2 x 3 x (4 x 8 = 2 x 16 = 32) x 5 x 2 x 4 = 7,680; cross: the same x 7 / 5, 10,752
    assert measured.total_bytes == 7_680 + 10_752
    assert predict_kv_cache_bytes(model.config, 5, batch_size=2, dtype=torch.float32,
                                  encoder_tokens=7) == measured.total_bytes


def test_the_dtype_is_the_configurations_else_the_assumption_is_said() -> None:
    # the configuration's bfloat16: 2 bytes, 2 GiB for Llama-2-7B at 4,096 tokens (as above)
    assert predict_kv_cache_bytes(hf_config("llama", dtype="bfloat16"), 4_096) == 2 * 1024 ** 3
    # none named: float32 assumed, and said: 4 GiB
    with pytest.warns(UserWarning, match="names no dtype, so float32 .* was assumed; pass dtype="):
        assert predict_kv_cache_bytes(hf_config("llama"), 4_096) == 4 * 1024 ** 3


def test_bad_input_is_refused() -> None:
    with pytest.raises(TypeError, match="cache"):
        kv_cache_size(torch.zeros(3))
    with pytest.raises(ValueError, match="tokens"):
        predict_kv_cache_bytes(hf_config("gpt2"), -1)
    with pytest.raises(ValueError, match="batch_size"):
        predict_kv_cache_bytes(hf_config("gpt2"), 1, batch_size=0)
    # a bool is no batch size (True was taken as a batch of 1), as every other count refuses it
    with pytest.raises(ValueError, match="batch_size must be a positive int, got True"):
        predict_kv_cache_bytes(hf_config("gpt2"), 1, batch_size=True)
    # a dtype name (the command line's --dtype takes them) raised torch's "empty(): argument
    # 'dtype' must be torch.dtype, not str"
    with pytest.raises(TypeError, match=r"dtype must be a torch\.dtype such as torch\.bfloat16 or "
                                        "None, got str 'bf16'"):
        predict_kv_cache_bytes(hf_config("gpt2"), 1, dtype="bf16")  # type: ignore[arg-type]


def test_the_cache_column_in_the_step_views() -> None:
    model = llama()
    result = profile_generation(model, text_inputs(model, 1, 6), max_new_tokens=2,
                                min_new_tokens=2)
    step = result.steps[1]
    # 2 x 2 x 2 x 16 x 7 tokens x 4 bytes = 3,584
    assert step.profile.roots[0].metrics["kv_cache_bytes"] == formula(7) == 3_584
    assert step.profile.to_df("module").loc[0, "kv_cache_bytes"] == 3_584
    assert "KV cache" in step.profile.to_text(columns=["macs", "kv_cache_bytes"], max_depth=0)
    # over the whole run the model's value is its largest: the last step's
    assert result.profile.to_df("module").loc[0, "kv_cache_bytes"] == formula(7)


TINY = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
            vocab_size=100)
# each case: a model type, its configuration overrides and the bytes its cache holds after a prompt
# of 6 tokens and 3 generated (8 positions; the third token's keys are not cached), batch 2,
# float32 (4 bytes); a key/value head of 16 holds 2 x 16 x 2 x 4 = 256 bytes a position
CACHES = {
    # both layers slide with a window of 4: 2 layers x 4 positions x 2 heads x 256 = 4,096
    # (the full-attention formula said 2 x 8 x 2 x 256 = 8,192)
    "mistral": ("mistral", dict(num_key_value_heads=2, sliding_window=4), 4_096),
    # one sliding layer (4 positions) and one full (8): (4 + 8) x 2 heads x 256 = 6,144
    "gemma2": ("gemma2", dict(num_key_value_heads=2, head_dim=16, sliding_window=4), 6_144),
    "gemma3_text": ("gemma3_text", dict(
        num_key_value_heads=2, head_dim=16, sliding_window=4,
        layer_types=["sliding_attention", "full_attention"]), 6_144),
    # a Mamba layer and an attention layer: 1 layer x 8 x 2 heads x 256 = 4,096 (not 8,192)
    "jamba": ("jamba", dict(
        num_key_value_heads=2, attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2,
        expert_layer_offset=1, num_experts=4, mamba_d_state=4, mamba_expand=2,
        mamba_dt_rank=8), 4_096),
    # latent attention caches kv_lora_rank 16 + qk_rope_head_dim 8 = 24 values a position:
    # 2 layers x 8 x 24 x 2 x 4 = 3,072 (keys and values of 4 heads would be 2 x 8 x 4 x 256
    # = 16,384; the old formula's head_dim, 8 rope dims, said 8,192)
    "deepseek_v3": ("deepseek_v3", dict(
        num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=8,
        qk_nope_head_dim=8, v_head_dim=16, n_routed_experts=4, num_experts_per_tok=2,
        moe_intermediate_size=32, first_k_dense_replace=1, n_group=1, topk_group=1), 3_072),
    # Falcon-7B's multi-query attention: one key/value head of the 4: 2 x 8 x 1 x 256 = 4,096
    # (the formula took all 4 heads: 16,384)
    "falcon-multi-query": ("falcon", dict(
        multi_query=True, new_decoder_architecture=False, ffn_hidden_size=128,
        intermediate_size=None), 4_096),
    # Falcon's new decoder architecture caches its 2 key/value heads repeated to all 4
    # query heads: 2 x 8 x 4 x 256 = 16,384
    "falcon-new-architecture": ("falcon", dict(
        new_decoder_architecture=True, num_kv_heads=2, ffn_hidden_size=128,
        intermediate_size=None), 16_384),
}


@NEEDS_TRANSFORMERS_5_24
@pytest.mark.parametrize("family", sorted(CACHES))
def test_the_prediction_is_the_measured_cache_of_each_attention_kind(family: str) -> None:
    model_type, overrides, expected = CACHES[family]
    kwargs = {key: value for key, value in {**TINY, **overrides}.items() if value is not None}
    torch.manual_seed(0)
    model = hf_model(model_type, device="cpu", **kwargs)
    run = profile_generation(model, text_inputs(model, 2, 6), max_new_tokens=3,
                             min_new_tokens=3)
    cache = run.steps[-1].kv_cache
    assert cache is not None and cache.tokens == 8
    assert cache.total_bytes == expected
    assert predict_kv_cache_bytes(model.config, 8, batch_size=2,
                                  dtype=torch.float32) == expected
    # and at 4,096 tokens the measured cache and the configuration agree: sliding layers stay
    # at their window (gemma2: (4 + 4,096) x 2 heads x 256 = 2,099,200; mistral 4,096 as
    # measured, where scaling 4,096 bytes over 3 positions said 5,592,405)
    assert cache.predict_bytes(4_096) == predict_kv_cache_bytes(
        model.config, 4_096, batch_size=2, dtype=torch.float32)
    if family == "gemma2":
        assert cache.predict_bytes(4_096) == 2_099_200
    if family == "mistral":
        assert cache.predict_bytes(4_096) == 4_096


def test_windows_and_state_layers_at_full_size() -> None:
    # Mistral-7B: 32 layers of 8 key/value heads x 128 sliding over 4,096 tokens, bfloat16:
    # 2 x 32 x 8 x 128 x 2 bytes = 131,072 bytes a position, at most 4,096 positions held;
    # at 32,768 tokens 131,072 x 4,096 = 512 MiB (the full-attention formula: 4 GiB)
    mistral = hf_config("mistral")
    assert predict_kv_cache_bytes(mistral, 32_768, dtype=torch.bfloat16) == 512 * 1024 ** 2
    assert predict_kv_cache_bytes(mistral, 1_000, dtype=torch.bfloat16) == 131_072 * 1_000
    # Mamba: no layer attends, nothing grows with the context
    assert predict_kv_cache_bytes(hf_config("mamba"), 4_096, dtype=torch.float32) == 0


def test_an_unknown_latent_layout_is_refused_not_guessed() -> None:
    # DeepSeek-V2 caches its decompressed keys: another layout than DeepSeek-V3's latent one
    with pytest.raises(ValueError, match=r"model_type 'deepseek_v2'.*latent attention "
                                         r"\(kv_lora_rank=512\).*kv_cache_size\(\)"):
        predict_kv_cache_bytes(hf_config("deepseek_v2"), 16, dtype=torch.float32)


def test_transformers_shared_layer_arguments_give_the_same_prediction(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers.cache_utils as cache_utils

    # Transformers before 5.24 returns one dict of arguments for every layer, not a list: the
    # prediction zipped the kinds with the dict's keys, and gave 0 bytes for Llama (an empty
    # dict) and a TypeError for Mistral ("string indices must be integers")
    per_layer = cache_utils.get_layer_types_and_kwargs

    def shared(config: Any) -> tuple[list[str], dict[str, Any]]:
        kinds, extras = per_layer(config)  # per layer from 5.24 on, one dict before
        if isinstance(extras, dict):
            return list(kinds), extras
        return list(kinds), dict(extras[0]) if extras else {}

    monkeypatch.setattr(cache_utils, "get_layer_types_and_kwargs", shared)
    # the full-size numbers above: Llama-2-7B 2 GiB at 4,096 float16 tokens, Mistral-7B
    # 512 MiB at 32,768 bfloat16 tokens (a 4,096 window)
    assert predict_kv_cache_bytes(hf_config("llama"), 4_096, dtype=torch.float16) == \
        2 * 1024 ** 3
    assert predict_kv_cache_bytes(hf_config("mistral"), 32_768, dtype=torch.bfloat16) == \
        512 * 1024 ** 2
