"""On a CUDA device: a composite operator that arrives whole under ``inference_mode`` counts a
profiler's own formula for its parts as ``no_grad`` does, and keeps its direct formula where
its parts reach none of them (the decomposition runs on fake tensors of the inputs' device).

    PYTHONPATH=. python3 benchmarks/gpu_composite_parts.py

Prints one line per case: the totals under ``no_grad`` and ``inference_mode``, with and
without the own formula, and whether they agree as they should.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from moduleprofiler import ModuleProfiler

aten = torch.ops.aten


def thousand(args: Any, kwargs: Any, out: Any) -> tuple[int, int]:
    return 1000, 7


class Call(nn.Module):
    def __init__(self, fn: Any) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args: Any) -> Any:
        return self.fn(*args)


def totals(profiler: ModuleProfiler, model: nn.Module, inputs: tuple[Any, ...],
           mode: Any) -> tuple[Any, Any]:
    with mode():
        profile = profiler.profile(model, inputs)
    return profile.total_ops, profile.total_macs


def main() -> None:
    device = torch.device("cuda")
    x = torch.randn(2, 3, device=device)
    q = torch.randn(1, 2, 64, 32, device=device, dtype=torch.float16)
    image = torch.randn(1, 2, 3, 3, device=device)
    cases = [
        ("linear, own addmm", Call(F.linear), (x, torch.randn(4, 3, device=device),
                                                torch.randn(4, device=device)), aten.addmm),
        ("linear, own relu (unrelated)", Call(F.linear),
         (x, torch.randn(4, 3, device=device), torch.randn(4, device=device)), aten.relu),
        ("sdpa fp16, own bmm", Call(F.scaled_dot_product_attention), (q, q, q), aten.bmm),
        ("interpolate, own relu (unrelated)",
         Call(lambda t: F.interpolate(t, scale_factor=2.0, mode="bilinear")), (image,),
         aten.relu),
        ("interpolate, own upsample_bilinear2d",
         Call(lambda t: F.interpolate(t, scale_factor=2.0, mode="bilinear")), (image,),
         aten.upsample_bilinear2d.default),
    ]
    failed = 0
    for name, model, inputs, part in cases:
        mine = ModuleProfiler()
        mine.operator_fn_map[part] = thousand
        plain = {mode.__name__: totals(ModuleProfiler(), model, inputs, mode)
                 for mode in (torch.no_grad, torch.inference_mode)}
        own = {mode.__name__: totals(mine, model, inputs, mode)
               for mode in (torch.no_grad, torch.inference_mode)}
        agree = own["no_grad"] == own["inference_mode"]
        failed += not agree
        print(f"{'ok  ' if agree else 'FAIL'} {name}: built-in {plain}, own {own}")
    print(f"{len(cases) - failed} of {len(cases)} agree")


if __name__ == "__main__":
    main()
