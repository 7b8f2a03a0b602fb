"""Small helpers shared by the formula families."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn


def no_macs(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> int:
    """macs = 0: the module does no matmul- or convolution-type work."""
    return 0


def numel_of_first(inputs: tuple[Any, ...]) -> int:
    """Number of elements of the first positional input (0 when it is missing or not a tensor)."""
    if inputs and isinstance(inputs[0], torch.Tensor):
        return int(inputs[0].numel())
    return 0
