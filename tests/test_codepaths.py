"""Code paths that hooks change: the fused TransformerEncoderLayer path, found and reported by
the passes whose numbers it changes (timing: tests/timing/test_forward.py; memory here)."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from moduleprofiler.codepaths import CodePathWarning, fast_path_changes
from moduleprofiler.memory import measure_memory


def _encoder(batch_first: bool = True) -> nn.Module:
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=batch_first)
    return nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)


def test_the_fused_layers_are_found_by_path() -> None:
    model = _encoder()
    assert fast_path_changes(model, eval=True, grad_enabled=False) == ["layers.0", "layers.1"]
    # no fast path with gradients, in training mode, or with sequence-first inputs
    assert fast_path_changes(model, eval=True, grad_enabled=True) == []
    assert fast_path_changes(model.train(), eval=False, grad_enabled=False) == []
    assert fast_path_changes(_encoder(batch_first=False), eval=True, grad_enabled=False) == []


def test_measuring_memory_says_the_hooks_change_the_path() -> None:
    with pytest.warns(CodePathWarning, match=r"fast path of TransformerEncoderLayer at "
                                             r"\['layers.0', 'layers.1'\]"):
        measure_memory(_encoder(), torch.zeros(2, 3, 16))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CodePathWarning)
        measure_memory(_encoder(batch_first=False), torch.zeros(3, 2, 16))


def test_measuring_memory_on_meta_under_autocast_says_autocast_is_left_out() -> None:
    """Autocast casts only tensors of its own device type: on the meta device the passes run
    in float32, so the bytes are those of the CPU without autocast, and the warning says so."""
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
    x = torch.randn(4, 8)
    with warnings.catch_warnings(record=True) as caught, \
            torch.autocast("cpu", dtype=torch.bfloat16):
        warnings.simplefilter("always")
        meta = measure_memory(model, x, train=True, device="meta")
    said = [str(w.message) for w in caught if issubclass(w.category, CodePathWarning)]
    assert len(said) == 1 and "torch.autocast('cpu')" in said[0] and "meta" in said[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plain = measure_memory(model, x, train=True)  # float32 on the CPU: nothing to say
    assert not [w for w in caught if issubclass(w.category, CodePathWarning)]
    assert meta.training is not None and plain.training is not None
    # Float32 both: the first Linear's output 4*16*4 = 256 bytes, saved by ReLU; under
    # autocast it would be bfloat16 (128 bytes).
    assert meta.training.peak_bytes == plain.training.peak_bytes
    assert meta.training.saved_bytes == plain.training.saved_bytes == 256
