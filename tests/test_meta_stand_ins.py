"""Operators whose meta kernel refuses what a GPU runs still count and predict on meta."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from moduleprofiler import Profiler
from moduleprofiler.meta_stand_ins import meta_stand_in


class Experts(nn.Module):
    """Four experts' (6 x 16) weights over 8 rows, two each, in one grouped product."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(4, 6, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        offsets = torch.arange(1, 5, dtype=torch.int32, device=x.device) * 2
        return torch._grouped_mm(x, self.weight.transpose(-2, -1), offsets)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_grouped_product_counts_on_meta_in_fp32_as_in_bf16(dtype: torch.dtype) -> None:
    model = Experts().to("meta", dtype)
    x = torch.empty(8, 16, device="meta", dtype=dtype)
    profile = Profiler().profile(model, x)
    # 8 rows of 16 times a 16 x 6 weight: 8 * 16 * 6 = 768 MACs
    call = profile.calls("__root__")[0]
    assert call.macs == 768
    assert call.output_shapes == (8, 6)


def test_no_stand_in_where_the_meta_kernel_would_be_right() -> None:
    x = torch.empty(8, 16, device="meta", dtype=torch.float16)
    offsets = torch.empty(4, device="meta", dtype=torch.int32)
    # a dtype the meta kernel takes is not stood in for; nor is any other operator
    assert meta_stand_in(torch.ops.aten._grouped_mm.default,
                         (x, torch.empty(4, 16, 6, device="meta", dtype=torch.float16),
                          offsets), {}) is None
    assert meta_stand_in(torch.ops.aten.mm.default, (x, x.T), {}) is None
