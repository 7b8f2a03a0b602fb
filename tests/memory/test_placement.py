"""Inputs moved to the device a memory pass runs on: namedtuples, packed sequences and
dataclass batches too."""

from __future__ import annotations

import dataclasses
from collections import namedtuple

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence, pack_padded_sequence

from moduleprofiler.errors import MixedDeviceError
from moduleprofiler.memory import measure_memory
from moduleprofiler.memory.placement import to_device

Pair = namedtuple("Pair", "a b")


class AddsPair(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, pair: Pair) -> torch.Tensor:
        return self.lin(pair.a) + pair.b


class ReadsPacked(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, packed: PackedSequence) -> torch.Tensor:
        return self.lin(packed.data)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_a_namedtuple_input_is_moved_to_the_pass_device(device: str) -> None:
    # the namedtuple stayed on the CPU: on meta the Linear raised (meta weight, CPU input).
    # Baseline: Linear(4, 4) 20 floats (80 B) + a and b, 12 floats each (96 B) = 176 B;
    # the Linear's 3x4 output (48 B) and the sum (48 B) on top: peak 272 B
    report = measure_memory(AddsPair(), Pair(torch.randn(3, 4), torch.randn(3, 4)),
                            device=device)
    assert report.inference.peak_bytes == 272
    assert report.inference.peak_bytes - report.inference.baseline_bytes == 96


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_a_packed_sequence_is_moved_with_its_batch_sizes_left_on_the_cpu(device: str) -> None:
    # moving it as a namedtuple raised ValueError (batch_sizes should always be on CPU).
    # Lengths 5 and 3: 8 packed rows of 4 floats (128 B) + the Linear's 80 B = 208 B baseline;
    # the 8x4 output on top: 128 B, peak 336 B
    packed = pack_padded_sequence(torch.randn(2, 5, 4), torch.tensor([5, 3]), batch_first=True)
    report = measure_memory(ReadsPacked(), packed, device=device)
    assert report.inference.peak_bytes == 336
    assert report.inference.peak_bytes - report.inference.baseline_bytes == 128


def test_a_moved_packed_sequence_keeps_its_class_and_cpu_batch_sizes() -> None:
    packed = pack_padded_sequence(torch.randn(2, 5, 4), torch.tensor([3, 5]), batch_first=True,
                                  enforce_sorted=False)
    moved = to_device((packed,), torch.device("meta"))[0]
    assert isinstance(moved, PackedSequence)
    assert moved.data.device.type == "meta" and moved.sorted_indices.device.type == "meta"
    assert moved.batch_sizes is packed.batch_sizes  # the class refuses them anywhere else


@dataclasses.dataclass
class Batch:
    x: torch.Tensor
    mask: torch.Tensor


class MasksLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, batch: Batch) -> torch.Tensor:
        return self.lin(batch.x) * batch.mask[..., None]


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_a_dataclass_batch_is_moved_to_the_pass_device(device: str) -> None:
    # its fields stayed on the CPU: on meta the Linear raised (meta weight, CPU input).
    # Baseline: Linear(4, 4) 80 B + x, 2x3x4 floats (96 B) + the mask, 6 bools (6 B) = 182 B;
    # the Linear's output (96 B) and the product (96 B; the mask's [..., None] is a view) on
    # top: peak 374 B
    batch = Batch(torch.randn(2, 3, 4), torch.ones(2, 3, dtype=torch.bool))
    report = measure_memory(MasksLinear(), batch, device=device)
    assert report.inference.peak_bytes == 374
    assert report.inference.peak_bytes - report.inference.baseline_bytes == 192
    assert batch.x.device.type == "cpu"  # the caller's batch is not touched


def test_a_lazy_module_made_on_the_cpu_is_refused_on_the_meta_device_by_path() -> None:
    """Its parameters would materialise on the CPU in the first forward, beside meta inputs:
    the forward failed deep in an operator ("Tensor on device cpu is not on the expected
    device meta!"). The error names the module, and the model is left lazy."""
    model = nn.Sequential(nn.ReLU(), nn.LazyLinear(8))
    with pytest.raises(MixedDeviceError, match=r"lazy module '1' \(LazyLinear\).*'weight'.*"
                                               r"device='meta'"):
        measure_memory(model, torch.randn(4, 8), device="meta")
    assert isinstance(model[1], nn.LazyLinear) and model[1].has_uninitialized_params()


def test_a_lazy_module_made_on_the_meta_device_is_planned_there() -> None:
    model = nn.Sequential(nn.LazyLinear(8, device="meta"))
    report = measure_memory(model, torch.randn(4, 8), device="meta")
    # x 4*8*4 = 128 before the forward; the weight 8*8*4 = 256 and bias 8*4 = 32 materialise
    # in it, then the output 4*8*4 = 128: 128 + 288 + 128 = 544, as on the CPU
    assert report.inference.peak_bytes == 544
    assert report.inference.peak_bytes == measure_memory(
        nn.Sequential(nn.LazyLinear(8)), torch.randn(4, 8)).inference.peak_bytes
