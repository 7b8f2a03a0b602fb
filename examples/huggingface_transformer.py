"""Profile a Hugging Face GPT-2 built from its config (no download), forward and backward:
attention inside the Hugging Face modules is counted from the operators it runs.

    python examples/huggingface_transformer.py
"""

from __future__ import annotations

import os

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from moduleprofiler import ModuleProfiler


def main() -> None:
    fast = os.environ.get("MODULEPROFILER_FAST") == "1"
    config = GPT2Config(n_layer=2, n_embd=128, n_head=4) if fast else GPT2Config()
    model = GPT2LMHeadModel(config)
    ids = torch.randint(0, config.vocab_size, (1, 64))
    profile = ModuleProfiler().profile(model, {"input_ids": ids}, backward=True)
    print(profile.top(6, by="ops"))
    by_source = profile.to_df().groupby("ops_source")["self_ops"].sum()
    print(by_source)  # formula (Conv1D, LayerNorm, ...) vs operator (attention, residual adds)
    print(f"forward {profile.total_flops:,} FLOPs, backward {2 * profile.total_backward_macs:,} "
          f"FLOPs, {profile.total_params:,} parameters (tied embedding once)")


if __name__ == "__main__":
    main()
