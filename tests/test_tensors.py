"""Helpers on a module's tensors: aliases, bytes by dtype, the quick parameter read."""

from __future__ import annotations

import torch
from torch import nn

from moduleprofiler.tensors import (
    bytes_by_dtype,
    distinct,
    module_tensor,
)


def test_aliases_count_once_and_bytes_by_dtype() -> None:
    base = torch.zeros(4, dtype=torch.float64)
    same = base.view(4)  # another tensor object, the same elements
    other = torch.zeros(3, dtype=torch.float16)
    assert len(distinct([base, same, other])) == 2
    # 4 * 8 = 32 float64 bytes; 3 * 2 = 6 float16 bytes
    assert bytes_by_dtype(distinct([base, same, other])) == {"float64": 32, "float16": 6}


def test_module_tensor_reads_what_getattr_reads() -> None:
    class Shadowed(nn.Linear):
        pass

    class Looked(nn.Linear):
        def __getattr__(self, name: str) -> object:
            return "mine" if name == "ghost" else super().__getattr__(name)

    plain, no_bias = nn.Linear(3, 2), nn.Linear(3, 2, bias=False)
    norm = nn.BatchNorm1d(2, track_running_stats=False)
    plain.scale = 3  # an ordinary attribute in the instance dict
    cases = [(plain, "weight"), (plain, "bias"), (plain, "scale"), (plain, "missing"),
             (no_bias, "bias"), (norm, "running_mean"), (nn.BatchNorm1d(2), "running_var"),
             (Looked(3, 2), "ghost"), (Looked(3, 2), "weight")]
    shadowed = Shadowed(3, 2)
    # a class attribute set after the bias was registered: ordinary lookup finds it first
    Shadowed.bias = property(lambda self: torch.full((2,), 7.0))  # type: ignore[assignment]
    cases.append((shadowed, "bias"))
    for module, name in cases:
        got, expected = module_tensor(module, name), getattr(module, name, None)
        if isinstance(expected, torch.Tensor):
            assert isinstance(got, torch.Tensor) and torch.equal(got, expected)
            assert (got is expected) == (type(module) is not Shadowed)  # the property makes anew
        else:
            assert got == expected
    assert module_tensor(no_bias, "bias") is None
    assert module_tensor(plain, "weight") is plain.weight
    assert module_tensor(Looked(3, 2), "ghost") == "mine"
    assert torch.equal(module_tensor(shadowed, "bias"), torch.full((2,), 7.0))
