"""Does a memory pass under the caller's ``torch.autocast`` see the weight casts autocast caches?

``measure_memory`` runs an inference pass, then a training pass. Autocast keeps the
lower-precision copy of every weight it casts until the autocast context exits, so the
inference pass's copies may still be alive when the training pass takes its baseline. This
runs the training pass of ResNet-18 (bf16 autocast, CUDA) three ways: alone in a fresh
context, after an inference pass in the same context, and after an inference pass with the
autocast cache cleared between them; and the bare step's allocator increase for comparison.
It also prints the dtypes an LSTM's call records under bf16 autocast.

    PYTHONPATH=. python3 benchmarks/gpu_autocast_memory.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torchvision
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere
from moduleprofiler import Profiler
from moduleprofiler.memory.passes import run_pass


def increase(result: object) -> int:
    """The pass's peak above its baseline."""
    memory = result.memory  # type: ignore[attr-defined]
    return int(memory.peak_bytes - memory.baseline_bytes)


def main() -> None:
    device = torch.device("cuda")
    model = torchvision.models.resnet18().to(device)
    x = torch.randn(8, 3, 64, 64, device=device)
    common = {"pred_fn": None, "loss_fn": None, "device": device}

    def autocast() -> torch.autocast:
        return torch.autocast("cuda", dtype=torch.bfloat16)

    with autocast():
        alone = run_pass(model, x, train=True, **common)
    with autocast():
        run_pass(model, x, train=False, **common)
        after = run_pass(model, x, train=True, **common)
    with autocast():
        run_pass(model, x, train=False, **common)
        torch.clear_autocast_cache()
        cleared = run_pass(model, x, train=True, **common)
    bare = torchvision.models.resnet18().to(device).train()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    with autocast():
        out = bare(x)
        loss = out.float().pow(2).mean()
    loss.backward()
    torch.cuda.synchronize()
    truth = torch.cuda.max_memory_allocated() - base
    print(f"training pass alone:                  +{increase(alone):,} B")
    print(f"after an inference pass:              +{increase(after):,} B")
    print(f"after an inference pass, cache clear: +{increase(cleared):,} B")
    print(f"bare step (allocator):                +{truth:,} B")
    copies = sum(p.numel() * 2 for p in model.parameters() if p.dim() > 1)
    print(f"ResNet-18's bf16 weight copies:        {copies:,} B")

    lstm = nn.LSTM(64, 128, batch_first=True).to(device).eval()
    with autocast():
        profile = Profiler().profile(lstm, torch.randn(4, 32, 64, device=device))
        output = lstm(torch.randn(4, 32, 64, device=device))[0]
    record = profile.records[0]
    print(f"LSTM under bf16 autocast: inputs {record.input_dtypes}, outputs "
          f"{record.output_dtypes}; the bare call's output {output.dtype}")


if __name__ == "__main__":
    main()
