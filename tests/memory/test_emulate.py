"""CUDA's kernel choices on the meta device: dropout keeps a bool mask, attention keeps the
output and a log-sum-exp instead of the seq x seq matrix."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from moduleprofiler.memory import measure_memory


class Attention(nn.Module):
    """One fused q/k/v projection, causal SDPA with dropout in training (batch 2, 2 heads of 8,
    32 positions)."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48, dtype=dtype)

    def forward(self, x: Tensor) -> Tensor:
        q, k, v = self.qkv(x).view(2, 32, 3, 2, 8).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.1 if self.training else 0.0,
                                              is_causal=True)


def _saved(model: nn.Module, x: Tensor, emulate: str | None) -> int:
    report = measure_memory(model, x, train=True, device="meta", emulate=emulate)  # type: ignore[arg-type]
    assert report.training is not None and report.training.saved_bytes is not None
    return report.training.saved_bytes


def test_dropout_saves_a_bool_mask() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.5), nn.Linear(16, 4))
    x = torch.randn(4, 8, device="meta")
    frame = {e: measure_memory(model, x, train=True, emulate=e).to_df().set_index("module")
             for e in (None, "cuda")}  # type: ignore[arg-type]
    assert frame[None].loc["1", "self_saved_bytes"] == 4 * 16 * 4  # float noise, CPU/meta
    assert frame["cuda"].loc["1", "self_saved_bytes"] == 4 * 16 * 1  # bool mask, CUDA


def test_float32_attention_takes_the_memory_efficient_kernel() -> None:
    x = torch.randn(2, 32, 16, device="meta")
    # The q/k/v projection's output 2*32*48*4 = 12288, the output 2*2*32*8*4 = 4096, the
    # log-sum-exp 2*2*32*4 = 512, the philox seed and offset 2 * 8.
    assert _saved(Attention(torch.float32), x, "cuda") == 12288 + 4096 + 512 + 16
    # The math path (CPU with dropout, meta) keeps 2*2*32*32 attention matrices and more.
    assert _saved(Attention(torch.float32), x, None) == 61440


def test_half_attention_takes_the_flash_kernel() -> None:
    x = torch.randn(2, 32, 16, device="meta", dtype=torch.float16)
    # projection 2*32*48*2 = 6144, output 2*2*32*8*2 = 2048, float32 log-sum-exp 512, the rng
    # state (2,) + () uint64 = 24.
    assert _saved(Attention(torch.float16), x, "cuda") == 6144 + 2048 + 512 + 24


def test_inference_is_not_changed() -> None:
    x = torch.randn(2, 32, 16, device="meta")
    plain = measure_memory(Attention(torch.float32), x, device="meta")
    emulated = measure_memory(Attention(torch.float32), x, device="meta", emulate="cuda")
    assert emulated.inference.peak_bytes <= plain.inference.peak_bytes
    assert emulated.training is None
