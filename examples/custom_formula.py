"""Count your own layer: register an ops and a macs formula for its type (subclasses inherit
them), and compare with what operator-level accounting finds without a formula.

    python examples/custom_formula.py
"""

from __future__ import annotations

import torch
from torch import nn

from moduleprofiler import ModuleProfiler, register_macs, register_ops, unregister_ops


class LowRankLinear(nn.Module):
    """y = x @ U @ V with U (in, rank) and V (rank, out)."""

    def __init__(self, in_features: int, rank: int, out_features: int) -> None:
        super().__init__()
        self.u = nn.Parameter(torch.randn(in_features, rank) / in_features**0.5)
        self.v = nn.Parameter(torch.randn(rank, out_features) / rank**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.u @ self.v


def low_rank_macs(module: LowRankLinear, inputs: tuple[torch.Tensor, ...], output: torch.Tensor
                  ) -> int:
    """rows * rank * (in + out)."""
    rows = inputs[0].shape[:-1].numel()
    (in_features, rank), out_features = module.u.shape, module.v.shape[1]
    return rows * rank * (in_features + out_features)


def low_rank_ops(module: LowRankLinear, inputs: tuple[torch.Tensor, ...], output: torch.Tensor
                 ) -> int:
    """rows * (rank * (2 in - 1) + out * (2 rank - 1))."""
    rows = inputs[0].shape[:-1].numel()
    (in_features, rank), out_features = module.u.shape, module.v.shape[1]
    return rows * (rank * (2 * in_features - 1) + out_features * (2 * rank - 1))


def main() -> None:
    model = nn.Sequential(LowRankLinear(256, 16, 256), nn.GELU(), nn.Linear(256, 10))
    x = torch.randn(32, 256)
    without = ModuleProfiler().profile(model, x)  # counted from the aten.mm operators
    register_ops(LowRankLinear)(low_rank_ops)
    register_macs(LowRankLinear)(low_rank_macs)
    try:
        with_formula = ModuleProfiler().profile(model, x)
    finally:
        unregister_ops(LowRankLinear)
    for label, profile in (("operators", without), ("formula", with_formula)):
        record = profile.calls("0")[0]
        print(f"{label:>9}: ops {record.self_ops:,} macs {record.self_macs:,} "
              f"({record.ops_source})")
    assert without.calls("0")[0].self_macs == with_formula.calls("0")[0].self_macs


if __name__ == "__main__":
    main()
