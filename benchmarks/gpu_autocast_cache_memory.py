"""Why ``measure_memory(train=True)`` under ``torch.autocast`` read 1.7 % above the allocator on
ResNet-18 (bf16, batch 8, 64 px). The allocator's peak increase of one bare training step
three ways (the backward after the autocast block, as PyTorch's recipe has it; inside it;
inside it with autocast's cache cleared first), and ``measure_memory``'s, each twice and
interleaved (a first run in the process may choose other convolution algorithms), in bf16
autocast and in fp32.

    PYTHONPATH=. python benchmarks/gpu_autocast_cache_memory.py
"""

from __future__ import annotations

import copy

import torch
import torchvision

from moduleprofiler import Profiler


def loss_of(output: torch.Tensor) -> torch.Tensor:
    return output.float().pow(2).mean()


def step_peak(model: torch.nn.Module, x: torch.Tensor, where: str, bf16: bool) -> int:
    """Allocator peak increase of one step: ``where`` is ``outside`` (the backward after the
    autocast block), ``inside`` (in it), or ``cleared`` (in it, its cache cleared first)."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    with torch.autocast("cuda", torch.bfloat16, enabled=bf16):
        loss = loss_of(model(x))
        if where == "cleared":
            torch.clear_autocast_cache()
        if where != "outside":
            loss.backward()
    if where == "outside":
        loss.backward()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - base


def measured(model: torch.nn.Module, x: torch.Tensor, bf16: bool) -> str:
    with torch.autocast("cuda", torch.bfloat16, enabled=bf16):
        report = Profiler().measure_memory(model, x, train=True, loss_fn=loss_of,
                                           keep_output=False)
    step = report.training
    assert step is not None
    call = step.peak_call
    return f"{step.peak_bytes - step.baseline_bytes:,} B (peak at {call})"


def main() -> None:
    torch.manual_seed(0)
    cpu_model = torchvision.models.resnet18(weights=None)
    x = torch.randn(8, 3, 64, 64, device="cuda")
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, ResNet-18, batch 8, "
          "64 px, one training step (no optimizer), peak increase over the step's start")
    for bf16 in (True, False):
        print("bf16 autocast" if bf16 else "fp32")
        for _ in range(2):
            for where in ("outside", "inside", "cleared"):
                model = copy.deepcopy(cpu_model).cuda().train()
                print(f"  allocator, backward {where:8s} the autocast block: "
                      f"{step_peak(model, x, where, bf16):,} B")
            model = copy.deepcopy(cpu_model).cuda().train()
            print(f"  measure_memory(train=True) under the block: {measured(model, x, bf16)}")


if __name__ == "__main__":
    main()
