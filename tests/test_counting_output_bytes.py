"""Output bytes of a call with one tensor in and one out: the memory its output occupies that
was not there before the call, 0 where the output shares its storage with the input or with one
of the module's parameters or buffers."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler


class Returns(nn.Module):
    """Returns a new tensor, its buffer, a view or a detached alias of the buffer, a view of
    its input, or its input changed in place."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.register_buffer("table", torch.zeros(2, 3))
        self.how = how

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.how == "new":
            return x + 1
        if self.how == "buffer":
            return self.table
        if self.how == "buffer view":
            return self.table.view(6)
        if self.how == "buffer detached":
            return self.table.detach()
        if self.how == "input view":
            return x.view(6)
        return x.mul_(2)  # "in place"


@pytest.mark.parametrize(("how", "expected"), [
    ("new", 24),  # 2 * 3 float32 elements, 4 bytes each: 24
    ("buffer", 0),
    ("buffer view", 0),
    ("buffer detached", 0),
    ("input view", 0),
    ("in place", 0),
])
def test_output_bytes_count_only_a_storage_no_input_parameter_or_buffer_holds(
        how: str, expected: int) -> None:
    profile = ModuleProfiler().profile(Returns(how), torch.randn(2, 3))
    assert profile.records[0].output_bytes == expected

