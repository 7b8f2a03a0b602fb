"""Does the first ``measure_memory`` of a process read what later ones read?

In a fresh process, before anything else touched the GPU's libraries, measure the inference and
training passes of a model twice, then the bare training step's allocator peak after a warm-up
step: a one-time allocation (cuBLAS's workspace for a stream, cuDNN's handles) made inside the
first measured pass shows as a difference between the two measurements.

    PYTHONPATH=. python3 benchmarks/gpu_memory_first_pass.py [mlp|resnet18]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere
from moduleprofiler import Profiler


def build(name: str) -> tuple[nn.Module, torch.Tensor]:
    if name == "resnet18":
        import torchvision
        return torchvision.models.resnet18(weights=None).cuda(), torch.randn(8, 3, 224, 224,
                                                                             device="cuda")
    model = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).cuda()
    return model, torch.randn(64, 1024, device="cuda")


def bare_peak(model: nn.Module, x: torch.Tensor) -> int:
    """The allocator's peak increase of one training step, after one warm-up step."""
    for _step in range(2):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        model(x).float().pow(2).mean().backward()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        model.zero_grad(set_to_none=True)
    return peak


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "mlp"
    model, x = build(name)
    loss = lambda out: out.float().pow(2).mean()  # noqa: E731
    for attempt in (1, 2):
        report = Profiler().measure_memory(model, x, train=True, loss_fn=loss)
        inference, training = report.inference, report.training
        assert training is not None
        operator = training.operator_peak_bytes - training.operator_baseline_bytes
        print(f"{name} measure_memory #{attempt}: inference increase {inference.increase_bytes:,}"
              f" B (requested {inference.requested_increase_bytes:,}); training increase "
              f"{training.increase_bytes:,} B (requested {training.requested_increase_bytes:,};"
              f" operator accounting {operator:,})",
              flush=True)
    print(f"{name} bare training step after a warm-up: allocator increase "
          f"{bare_peak(model, x):,} B")


if __name__ == "__main__":
    main()
