"""Count a model too big for this machine: build it on the meta device (nothing is allocated)
and profile it with meta inputs. A 6.7 B-parameter GPT-2 shape by default.

    python examples/meta_device.py
"""

from __future__ import annotations

import os

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from moduleprofiler import ModuleProfiler


def main() -> None:
    fast = os.environ.get("MODULEPROFILER_FAST") == "1"
    config = (GPT2Config(n_embd=256, n_layer=2, n_head=8) if fast
              else GPT2Config(n_embd=4096, n_layer=32, n_head=32, n_positions=2048))
    with torch.device("meta"):
        model = GPT2LMHeadModel(config)
    ids = torch.zeros(1, 128, dtype=torch.long, device="meta")  # values are never read
    profile = ModuleProfiler().profile(model, {"input_ids": ids})
    print(f"{profile.total_params:,} parameters, {profile.total_flops:,} FLOPs per 128 tokens")
    memory = ModuleProfiler().measure_memory(model, {"input_ids": ids})
    print(f"parameters {memory.param_bytes / 2**30:.1f} GiB, inference peak "
          f"{memory.peak_bytes / 2**30:.1f} GiB at {memory.peak_call}")


if __name__ == "__main__":
    main()
