"""Recurrent kernels against the module formulas of the same layers, on every kernel path."""

from __future__ import annotations

import copy
from collections import Counter
from typing import Any

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence
from torch.utils._python_dispatch import TorchDispatchMode

from moduleprofiler.operators.registry import MISSING, lookup
from tests.conftest import profile_of
from tests.operators.helpers import count, counter_of, fcm_flops, formula_count, on_meta

aten = torch.ops.aten


def module_count(module: nn.Module, *inputs: object) -> tuple[int, int]:
    profile = profile_of(module, *inputs)
    return int(profile.total_ops), int(profile.total_macs)


def test_lstm_hand() -> None:
    # per row and step, layer 0: 4*16*(2*8 - 1) + 4*16*(2*16 - 1) + 2*64 bias + 16*31 = 3568
    # layer 1 (in 16): 64*31 + 64*31 + 128 + 496 = 4592; rows 5*2 = 10: 10*8160 = 81600
    # macs 10*(64*(8 + 16) + 64*(16 + 16)) = 35840
    lstm, x = nn.LSTM(8, 16, num_layers=2).eval(), torch.randn(5, 2, 8)
    counter = counter_of(lstm, x)
    assert counter.calls["aten.mkldnn_rnn_layer.default"] == 2  # oneDNN, one call per layer
    assert (counter.ops, counter.macs) == (81600, 35840)
    assert module_count(lstm, x) == (81600, 35840)


RNNS = [
    nn.LSTM(8, 16, num_layers=2),
    nn.LSTM(8, 16, num_layers=2, bidirectional=True, proj_size=4),
    nn.LSTM(8, 16, bias=False, batch_first=True),
    nn.GRU(8, 16, num_layers=2, bidirectional=True),
    nn.RNN(8, 16, num_layers=2),
    nn.RNN(8, 16, nonlinearity="relu", bias=False),
]


@pytest.mark.parametrize("rnn", RNNS, ids=repr)
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode", "no_onednn", "meta"])
def test_rnn_kernels_are_module_formula(rnn: nn.Module, mode: str) -> None:
    rnn.eval()
    x = torch.randn(5, 2, 8)
    expected = module_count(rnn, x)
    if mode == "meta":
        got = count(copy.deepcopy(rnn).to("meta"), on_meta(x))
    elif mode == "no_onednn":  # the generic path: addmm, mm and element-wise gate operators
        with torch.backends.mkldnn.flags(enabled=False):
            got = count(rnn, x)
    else:  # oneDNN (mkldnn_rnn_layer) for LSTM, else decomposed; inference_mode: aten.lstm whole
        got = count(rnn, x, mode=mode)
    decomposed = mode in ("no_onednn", "meta") or (mode == "no_grad" and rnn.mode != "LSTM")
    if rnn.mode == "GRU" and decomposed:
        # NB: torch's GRU step computes h' = n + z * (h - n), 3 ops per unit, where the module
        # formula (0.0.4's constant) prices (1 - z) * n + z * h, 4: 1 op per unit per step less.
        # rows 10 * H 16 * 2 layers * 2 directions = 640
        expected = (expected[0] - 640, expected[1])
    assert got == expected


def test_lstm_macs_match_flop_counter_on_the_decomposed_path() -> None:
    # FlopCounterMode counts 0 for mkldnn_rnn_layer; without oneDNN it sees addmm / mm.
    lstm, x = nn.LSTM(8, 16, num_layers=2).eval(), torch.randn(5, 2, 8)
    with torch.backends.mkldnn.flags(enabled=False):
        assert fcm_flops(lstm, x) == 2 * 35840


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_packed_sequence(mode: str) -> None:
    # rows = sum(batch_sizes) = 5 + 3 = 8 real steps
    lstm = nn.LSTM(8, 16).eval()
    packed = pack_padded_sequence(torch.randn(5, 2, 8), torch.tensor([5, 3]))
    # per row 3568 (see test_lstm_hand), 8 rows
    assert count(lstm, packed, mode=mode) == (8 * 3568, 8 * 1536)
    assert module_count(lstm, packed) == (8 * 3568, 8 * 1536)


CELLS = [nn.LSTMCell(8, 16), nn.GRUCell(8, 16, bias=False), nn.RNNCell(8, 16),
         nn.RNNCell(8, 16, nonlinearity="relu")]


@pytest.mark.parametrize("cell", CELLS, ids=repr)
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_cells_are_module_formula(cell: nn.Module, mode: str) -> None:
    x = torch.randn(3, 8)
    expected = module_count(cell, x)
    got = count(cell, x, mode=mode)
    if isinstance(cell, nn.GRUCell) and mode == "no_grad":  # decomposed: see the GRU NB above
        expected = (expected[0] - 3 * 16, expected[1])  # rows 3 * H 16
    assert got == expected


def test_fused_cell_kernels() -> None:
    # the CUDA point-wise kernels: rows 3, H 5; LSTM 31 per unit + 4 per bias, GRU 21 + 3
    gates4, gates3, state = torch.randn(3, 20), torch.randn(3, 15), torch.randn(3, 5)
    lstm = aten._thnn_fused_lstm_cell.default
    assert formula_count(lstm, gates4, gates4, state, torch.randn(20), torch.randn(20)) == (
        3 * 5 * (31 + 8), 0)  # 585
    assert formula_count(lstm, gates4, gates4, state) == (3 * 5 * 31, 0)  # 465
    gru = aten._thnn_fused_gru_cell.default
    assert formula_count(gru, gates3, gates3, state, torch.randn(15), torch.randn(15)) == (
        3 * 5 * (21 + 6), 0)  # 405


def test_cudnn_rnn_kernel() -> None:
    # cuDNN's flat weight list, 4 tensors per layer: the LSTM of test_lstm_hand
    lstm, x = nn.LSTM(8, 16, num_layers=2), torch.randn(5, 2, 8)
    weights = list(lstm._flat_weights)
    hx = torch.zeros(2, 2, 16)
    # input, weight, weight_stride0, weight_buf, hx, cx, mode (2: LSTM), hidden_size, proj_size,
    # num_layers, batch_first, dropout, train, bidirectional, batch_sizes, dropout_state
    args: tuple[object, ...] = (x, weights, 4, None, hx, hx, 2, 16, 0, 2, False, 0.0, False,
                                False, [], None)
    assert formula_count(aten._cudnn_rnn.default, *args) == (81600, 35840)


@pytest.mark.parametrize("weights_need_grad", [True, False])
def test_cudnn_rnn_backward_kernel_skips_weight_gradients_of_frozen_weights(
        weights_need_grad: bool) -> None:
    # cuDNN's backward always computes the input and hidden gradients and the weight gradients
    # only when output_mask[3] asks (PyTorch's cudnn/RNN.cpp). The LSTM of test_cudnn_rnn_kernel:
    # rows 5 * 2 = 10, gate products per row 64 * 8 + 3 * 64 * 16 = 3584: 35,840 MACs a pass
    lstm, x = nn.LSTM(8, 16, num_layers=2), torch.randn(5, 2, 8)
    hx, out = torch.zeros(2, 2, 16), torch.randn(5, 2, 16)
    # input, weight, weight_stride0, weight_buf, hx, cx, output, grad_output, grad_hy,
    # grad_cy, mode, hidden_size, proj_size, num_layers, batch_first, dropout, train,
    # bidirectional, batch_sizes, dropout_state, reserve, output_mask
    args: tuple[object, ...] = (x, list(lstm._flat_weights), 4, None, hx, hx, out, out, hx, hx,
                                2, 16, 0, 2, False, 0.0, True, False, [], None, None,
                                [True, True, True, weights_need_grad])
    macs = 35840 * (2 if weights_need_grad else 1)
    assert formula_count(aten._cudnn_rnn_backward.default, *args) == (2 * macs, macs)


class _PerOperator(TorchDispatchMode):
    """Ops of each operator packet's formula, for the operators that run under it."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        out = func(*args, **(kwargs or {}))
        formula = lookup(func)
        if formula is not None and formula is not MISSING:
            self.ops[str(func.overloadpacket)] += formula(args, kwargs or {}, out)[0]
        return out


def _decomposed_cell_backward(cell: nn.Module) -> tuple[int, int]:
    """(gate-arithmetic ops, one bias gradient's ops) of ``cell``'s backward on the CPU, where
    it decomposes: every operator but the matmuls' gradients (``mm``) and the bias sums."""
    torch.manual_seed(0)
    x, h = torch.randn(2, 3), torch.randn(2, 5, requires_grad=True)
    lstm = isinstance(cell, nn.LSTMCell)
    c = torch.randn(2, 5, requires_grad=True)
    out = cell(x, (h, c)) if lstm else cell(x, h)
    loss = out[0].sum() + out[1].sum() if lstm else out.sum()
    leaves = [*cell.parameters(), h, *([c] if lstm else [])]
    with _PerOperator() as seen:
        torch.autograd.grad(loss, leaves)
    bias_sum = (2 - 1) * (4 if lstm else 3) * 5  # rows - 1 adds per gate gradient
    assert seen.ops["aten.sum"] == 2 * bias_sum  # both biases
    gates = sum(seen.ops.values()) - seen.ops["aten.sum"] - seen.ops["aten.mm"]
    return gates, bias_sum


def test_fused_cell_backward_kernels_count_as_the_decomposed_cells() -> None:
    # CUDA's fused cell kernels (called directly: they run on CUDA only) count the gate
    # arithmetic's gradient as the CPU's decomposition does, 2 rows x H = 5: LSTM 10 x 22 = 220,
    # GRU 10 x 15 = 150; the LSTM kernel sums the 4H = 20 gate gradients over the rows once for
    # both biases (20), the GRU's its 3H = 15 input and hidden gate gradients each (2 x 15)
    gates, bias = _decomposed_cell_backward(nn.LSTMCell(3, 5))
    assert (gates, bias) == (220, 20)
    cx, workspace = torch.randn(2, 5), torch.randn(2, 20)
    impl = aten._thnn_fused_lstm_cell_backward_impl.default
    assert formula_count(impl, cx, cx, cx, cx, workspace, True) == (220 + 20, 0)
    assert formula_count(impl, cx, cx, cx, cx, workspace, False) == (220, 0)
    gates, bias = _decomposed_cell_backward(nn.GRUCell(3, 5))
    assert (gates, bias) == (150, 15)
    gru = aten._thnn_fused_gru_cell_backward.default
    assert formula_count(gru, torch.randn(2, 5), torch.randn(2, 25), True) == (150 + 2 * 15, 0)
    assert formula_count(gru, torch.randn(2, 5), torch.randn(2, 25), False) == (150, 0)
