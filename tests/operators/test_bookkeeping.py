"""Bookkeeping operators (named ranges, packed sequences) are free; PReLU's backward is
counted."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from moduleprofiler import ModuleProfiler
from moduleprofiler.operators import lookup
from moduleprofiler.operators.registry import OperatorCounter
from tests.operators.helpers import count

PROFILER_OPS = ("_record_function_enter", "_record_function_enter_new", "_record_function_exit",
                "_call_end_callbacks_on_jit_fut")


@pytest.mark.parametrize("name", PROFILER_OPS)
def test_record_function_operators_are_free(name: str) -> None:
    packet = getattr(torch.ops.profiler, name)
    for overload in packet.overloads():
        assert lookup(getattr(packet, overload)) is None


@pytest.mark.parametrize("name", ["_pack_padded_sequence", "_pack_padded_sequence_backward",
                                  "_pad_packed_sequence"])
def test_packing_is_free(name: str) -> None:
    assert lookup(getattr(torch.ops.aten, name).default) is None


def test_named_range_costs_nothing() -> None:
    def scaled(x: Tensor) -> Tensor:
        with torch.profiler.record_function("block"):
            return x * 2

    assert count(scaled, torch.randn(3, 4)) == (12, 0)  # the multiply only


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_packing_a_batch_costs_nothing(mode: str) -> None:
    x = torch.randn(6, 3, 4)
    assert count(lambda: pad_packed_sequence(pack_padded_sequence(x, [6, 4, 2])), mode=mode) \
        == (0, 0)


class Named(nn.Module):
    """Linear(4, 5) and PReLU(5) inside a ``record_function`` range."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 5)
        self.act = nn.PReLU(5)

    def forward(self, x: Tensor) -> Tensor:
        with torch.profiler.record_function("named-block"):
            return self.act(self.linear(x))  # type: ignore[no-any-return]


class Packed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.LSTM(4, 5)

    def forward(self, x: Tensor) -> Tensor:
        out, _ = self.rnn(pack_padded_sequence(x, [6, 4, 2]))
        return pad_packed_sequence(out)[0]  # type: ignore[no-any-return]


MODELS = {
    "record_function": (Named(), torch.randn(3, 4)),
    # on CPU DataParallel calls its module inside a record_function range
    "DataParallel": (nn.DataParallel(Named()), torch.randn(3, 4)),
    "packed_sequence": (Packed(), torch.randn(6, 3, 4)),
}


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_bookkeeping_models_profile_completely(name: str, backward: bool) -> None:
    model, x = MODELS[name]
    profile = ModuleProfiler().profile(model, x, backward=backward)
    assert profile.complete, (profile.unsupported_ops, profile.unsupported)


def test_named_model_counts() -> None:
    model, x = MODELS["DataParallel"]
    profile = ModuleProfiler().profile(model, x, backward=True)
    # Linear(4, 5) on 3 rows: 15 * (2 * 4 - 1) + 15 = 120; PReLU 4 per element: 60
    assert profile.total_ops == 120 + 60
    # backward: the weight gradient (5, 3) @ (3, 4): 20 * 5 = 100, the bias sum 5 * 2 = 10;
    # PReLU's 3 per element (45) and its weight gradient summed to 5 channels (5 * 2 = 10)
    assert profile.total_backward_ops == 100 + 10 + 45 + 10


def test_prelu_backward_is_three_per_element() -> None:
    prelu = nn.PReLU(3)
    out = prelu(torch.randn(2, 3, 4, requires_grad=True)).sum()
    counter = OperatorCounter()
    with counter:
        out.backward()
    # _prelu_kernel_backward: comparison, g * weight, g * x per element: 3 * 24 = 72;
    # the weight gradient summed over 2 * 4 = 8 values per channel: 3 * 7 = 21
    assert not counter.missing
    assert counter.calls["aten._prelu_kernel_backward.default"] == 1
    assert counter.ops == 72 + 21
