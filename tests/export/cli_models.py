"""Model factories for the command-line tests (``tests/export/cli_models.py:tiny``)."""

from __future__ import annotations

import torch
from torch import Tensor, nn


def tiny(width: int = 8) -> nn.Module:
    """4 -> width -> 2 MLP: (4 * width + width) + (width * 2 + 2) parameters."""
    return nn.Sequential(nn.Linear(4, width), nn.ReLU(), nn.Linear(width, 2))


def repeated() -> nn.Module:
    """Three identical 4 -> 4 layers: their rows fold into one."""
    return nn.Sequential(*(nn.Linear(4, 4) for _ in range(3)))


def with_weights(*, weights: str | None = "download") -> nn.Module:
    """Fails unless the command line passed ``weights=None`` (as torchvision builders need)."""
    if weights is not None:
        raise RuntimeError("would download weights")
    return tiny()


def with_backbone_weights(*, weights: str | None = "download",
                          weights_backbone: str | None = "download") -> nn.Module:
    """Fails unless both are ``None``: torchvision's detection and segmentation builders
    download ImageNet backbone weights by default, ``weights=None`` or not."""
    if weights is not None or weights_backbone is not None:
        raise RuntimeError(f"would download weights (weights={weights!r}, "
                           f"weights_backbone={weights_backbone!r})")
    return tiny()


model = tiny()
"""A model itself, not a factory (``cli_models.py:model``)."""


def embedder() -> nn.Module:
    """Takes integer token ids."""
    return nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 2))


class Boom(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        raise ValueError("boom")


class ReadsValues(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x * 2 if bool(x.max() > 0) else x  # a value: the meta device has none


def reads_values() -> nn.Module:
    """Its module ``0`` reads its input's values."""
    return nn.Sequential(ReadsValues())


class GroupedExperts(nn.Module):
    """Two experts' products in one grouped GEMM, as mixture-of-experts layers run them: the
    meta kernel of ``torch._grouped_mm`` takes bfloat16 only (the CPU's and a GPU's also take
    float32)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(2, 16, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        offsets = torch.tensor([x.shape[0] // 2, x.shape[0]], dtype=torch.int32, device=x.device)
        return torch._grouped_mm(x, self.weight, offs=offsets)


def grouped_experts() -> nn.Module:
    """A grouped-GEMM layer in float32, which torch's meta kernel refuses."""
    return GroupedExperts()


def raises() -> nn.Module:
    """Its forward raises inside the module ``1``."""
    return nn.Sequential(nn.Linear(4, 4), Boom())


def broken() -> nn.Module:
    raise RuntimeError("factory failed")


def not_a_module() -> int:
    return 42


def two_inputs() -> nn.Module:
    class Add(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(4, 3)
            self.b = nn.Linear(5, 3)

        def forward(self, x: Tensor, y: Tensor) -> Tensor:
            return self.a(x) + self.b(y)

    return Add()


__all__ = ["broken", "embedder", "model", "not_a_module", "raises", "tiny", "torch", "two_inputs",
           "with_backbone_weights", "with_weights"]


class _Opaque(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return torch.linalg.matrix_exp(x)  # an operator without a formula


def opaque() -> nn.Module:
    """A Linear, then work no formula counts: the totals are lower bounds."""
    return nn.Sequential(nn.Linear(4, 4), _Opaque())
