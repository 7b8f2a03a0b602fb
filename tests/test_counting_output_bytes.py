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



class Sparsifies(nn.Module):
    def __init__(self, layout: torch.layout) -> None:
        super().__init__()
        self.layout = layout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.to_sparse(layout=self.layout)


@pytest.mark.parametrize(("layout", "expected"), [
    # 3 stored entries: int64 indices 2 x 3 x 8 = 48 bytes, float32 values 3 x 4 = 12
    (torch.sparse_coo, 48 + 12),
    # row pointers (4 rows + 1) x 8 = 40, column indices 3 x 8 = 24, values 12
    (torch.sparse_csr, 40 + 24 + 12),
])
def test_a_sparse_output_is_its_indices_and_values(layout: torch.layout, expected: int) -> None:
    x = torch.zeros(4, 8)  # dense: 4 x 8 x 4 = 128 bytes
    x[0, 1], x[2, 3], x[3, 7] = 1.0, 2.0, 3.0
    profile = ModuleProfiler().profile(Sparsifies(layout), x)
    assert profile.records[0].output_bytes == expected
