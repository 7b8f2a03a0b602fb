"""Tiny Transformers models built from configurations (no download), shared by the tests of
:mod:`moduleprofiler.language`. Built once per test session; generation leaves them unchanged.

Sizes (the hand arithmetic in the tests uses these names):
  GPT-2    2 layers, hidden 64, 4 heads of 16, MLP 256, vocabulary 100
  Llama    2 layers, hidden 64, 4 query heads and 2 key/value heads of 16, MLP 128, vocab 100
  Mixtral  Llama's attention, 4 experts of intermediate size 128, top-2
  T5       2 encoder and 2 decoder layers, d_model 64, 4 heads of d_kv 16, d_ff 128, vocab 100
"""

from __future__ import annotations

import functools
import os

import pytest
import torch

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing here may reach the network
pytest.importorskip("transformers")

from moduleprofiler.language import hf_model

LAYERS, HIDDEN, HEADS, HEAD_DIM, KV_HEADS, VOCAB = 2, 64, 4, 16, 2, 100
FLOAT32 = 4  # bytes


@functools.cache
def gpt2() -> torch.nn.Module:
    torch.manual_seed(0)
    # bos/eos inside the tiny vocabulary (GPT-2's own 50256 is not)
    return hf_model("gpt2", device="cpu", n_layer=LAYERS, n_embd=HIDDEN, n_head=HEADS,
                    vocab_size=VOCAB, n_positions=64, bos_token_id=0, eos_token_id=0)


@functools.cache
def llama() -> torch.nn.Module:
    torch.manual_seed(0)
    return hf_model("llama", device="cpu", num_hidden_layers=LAYERS, hidden_size=HIDDEN,
                    num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                    intermediate_size=128, vocab_size=VOCAB)


@functools.cache
def mixtral() -> torch.nn.Module:
    torch.manual_seed(0)
    return hf_model("mixtral", device="cpu", num_hidden_layers=LAYERS, hidden_size=HIDDEN,
                    num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                    intermediate_size=128, vocab_size=VOCAB, num_local_experts=4,
                    num_experts_per_tok=2)


@functools.cache
def t5() -> torch.nn.Module:
    torch.manual_seed(0)
    return hf_model("t5", device="cpu", num_layers=LAYERS, d_model=HIDDEN, d_ff=128,
                    num_heads=HEADS, d_kv=HEAD_DIM, vocab_size=VOCAB,
                    decoder_start_token_id=0)
