"""Generate with a small Llama built from its configuration (nothing is downloaded) and see
every step: prefill and decode FLOPs, time, the key/value cache, the cache off for comparison,
and the cache a long context would need.

    python examples/language_model.py
"""

from __future__ import annotations

import os

import torch

from moduleprofiler.language import (
    hf_model,
    predict_kv_cache_bytes,
    profile_generation,
    text_inputs,
)


def main() -> None:
    fast = os.environ.get("MODULEPROFILER_FAST") == "1"
    layers, hidden, new_tokens = (2, 64, 4) if fast else (4, 256, 16)
    torch.manual_seed(0)
    model = hf_model("llama", device="cpu", num_hidden_layers=layers, hidden_size=hidden,
                     num_attention_heads=4, num_key_value_heads=2,
                     intermediate_size=2 * hidden, vocab_size=1000)
    prompt = text_inputs(model, batch_size=1, seq_len=32)
    options = {"max_new_tokens": new_tokens, "min_new_tokens": new_tokens}
    cached = profile_generation(model, prompt, time=True, repeats=2 if fast else 5, **options)
    columns = ["step", "phase", "input_tokens", "context_tokens", "flops", "time_ms",
               "kv_cache_bytes"]
    print(cached.to_df()[columns].to_string(index=False))
    uncached = profile_generation(model, prompt, use_cache=False, **options)
    with_cache, without = cached.totals(), uncached.totals()
    print(f"per generated token: {with_cache['flops_per_token']:,.0f} FLOPs with the cache, "
          f"{without['flops_per_token']:,.0f} without "
          f"({without['flops_per_token'] / with_cache['flops_per_token']:.1f}x), "
          f"{with_cache['ms_per_token']:.2f} ms")
    context = 8192
    print(f"KV cache at {context:,} tokens: "
          f"{predict_kv_cache_bytes(model.config, context) / 2**20:.1f} MiB "
          f"(measured now: {with_cache['kv_cache_bytes']:,} bytes)")


if __name__ == "__main__":
    main()
