"""RNN / GRU / LSTM and cell formulas against hand arithmetic, 0.0.4's closed forms and a
decomposed FlopCounterMode run."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from tests.conftest import decomposed_flops, macs_of, ops_of, profile_of

# Shared shapes: input size 5, hidden size 7, L=4 timesteps, N=3 sequences -> 12 rows.
X = (4, 3, 5)

# Per row and layer, with bias (see the gate derivations in moduleprofiler/formulas/recurrent.py):
#   RNN tanh: 7 * ((2*5-1) + (2*7-1) + 2 bias + 1 add + 7 tanh) = 7 * 32 = 224
#   GRU:      3*7*(2*5-1) + 3*7*(2*7-1) + 6*7 bias + 21*7 gates = 189 + 273 + 42 + 147 = 651
#   LSTM:     4*7*(2*5-1) + 4*7*(2*7-1) + 8*7 bias + 31*7 gates = 252 + 364 + 56 + 217 = 889


def legacy_ops(kind: str, steps: int, hin: int, hidden: int, layers: int, bidirectional: bool,
               bias: bool) -> int:
    """moduleprofiler 0.0.4's closed forms for GRU and LSTM (LEGACY_API.md §2.2)."""
    gates = {"GRU": 3, "LSTM": 4}[kind]
    c = {("GRU", True): 3.5, ("GRU", False): 2.5,
         ("LSTM", True): 3.875, ("LSTM", False): 2.875}[kind, bias]
    if bidirectional:
        value = 4 * gates * steps * hidden * (hin + (3 * layers - 2) * hidden + c * layers)
    else:
        value = 2 * gates * steps * hidden * (hin + (2 * layers - 1) * hidden + c * layers)
    assert value == int(value)  # 0.0.4's constants always give integers
    return int(value)


def test_rnn_tanh() -> None:
    # 12 rows * 224 = 2688
    assert ops_of(nn.RNN(5, 7), torch.randn(X)) == 2688


def test_rnn_relu() -> None:
    # 12 * 7 * ((2*5-1) + (2*7-1) + 2 bias + 1 add + 1 relu) = 12 * 7 * 26 = 2184
    assert ops_of(nn.RNN(5, 7, nonlinearity="relu"), torch.randn(X)) == 2184


def test_rnn_no_bias() -> None:
    # 12 * 7 * (9 + 13 + 1 add + 7 tanh) = 12 * 210 = 2520
    assert ops_of(nn.RNN(5, 7, bias=False), torch.randn(X)) == 2520


def test_gru_single_layer_matches_legacy() -> None:
    # 12 * 651 = 7812; 0.0.4: 6*L*N*H*(Hin + H + 3.5) = 6*4*3*7*15.5 = 7812
    # macs 12 * 3*7*(5 + 7) = 3024
    record = profile_of(nn.GRU(5, 7), torch.randn(X)).records[0]
    assert (record.self_ops, record.self_macs) == (7812, 3024)


def test_gru_no_bias() -> None:
    # 12 * (651 - 42) = 7308; 0.0.4: 504 * (5 + 7 + 2.5) = 7308
    assert ops_of(nn.GRU(5, 7, bias=False), torch.randn(X)) == 7308


def test_gru_two_layers_bidirectional() -> None:
    # layer 0 per direction 651; layer 1 reads 2*7 = 14 features:
    #   3*7*(2*14-1) + 273 + 42 + 147 = 567 + 462 = 1029
    # 12 rows * 2 directions * (651 + 1029) = 40320
    # 0.0.4: 12*L*N*H*(Hin + (3*2-2)*H + 3.5*2) = 1008 * (5 + 28 + 7) = 40320
    assert ops_of(nn.GRU(5, 7, num_layers=2, bidirectional=True), torch.randn(X)) == 40320


def test_lstm_single_layer_matches_legacy() -> None:
    # 12 * 889 = 10668; 0.0.4: 8*4*3*7*(5 + 7 + 3.875) = 672 * 15.875 = 10668
    assert ops_of(nn.LSTM(5, 7), torch.randn(X)) == 10668


def test_lstm_no_bias() -> None:
    # 12 * (889 - 56) = 9996; 0.0.4: 672 * (5 + 7 + 2.875) = 9996
    assert ops_of(nn.LSTM(5, 7, bias=False), torch.randn(X)) == 9996


def test_lstm_two_layers_bidirectional() -> None:
    # layer 1 per direction: 4*7*(2*14-1) + 364 + 56 + 217 = 756 + 637 = 1393
    # 12 * 2 * (889 + 1393) = 54768; 0.0.4: 16*84*(5 + 28 + 7.75) = 1344 * 40.75 = 54768
    assert ops_of(nn.LSTM(5, 7, num_layers=2, bidirectional=True), torch.randn(X)) == 54768


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")
def test_lstm_projection() -> None:
    # proj 3: recurrent state is 3 wide; per row 4*7*(2*5-1) + 4*7*(2*3-1) + 56 + 217
    #   + projection 3*(2*7-1) = 252 + 140 + 56 + 217 + 39 = 704; 12 * 704 = 8448
    # macs per row 4*7*(5+3) + 3*7 = 245; 12 * 245 = 2940
    lstm = nn.LSTM(5, 7, proj_size=3)
    record = profile_of(lstm, torch.randn(X)).records[0]
    assert (record.self_ops, record.self_macs) == (8448, 2940)


@pytest.mark.parametrize(
    ("kind", "layers", "bidirectional", "bias"),
    list(itertools.product(["GRU", "LSTM"], [1, 2, 3], [False, True], [True, False])),
)
def test_matches_legacy_closed_form(kind: str, layers: int, bidirectional: bool,
                                    bias: bool) -> None:
    module = getattr(nn, kind)(3, 6, num_layers=layers, bidirectional=bidirectional, bias=bias)
    # steps = L*N = 5*2 = 10
    expected = legacy_ops(kind, 10, 3, 6, layers, bidirectional, bias)
    assert ops_of(module, torch.randn(5, 2, 3)) == expected


@pytest.mark.parametrize("cls", [nn.RNN, nn.GRU, nn.LSTM])
def test_batch_first_and_unbatched_count_rows(cls: type[nn.RNNBase]) -> None:
    reference = ops_of(cls(5, 7), torch.randn(X))
    assert ops_of(cls(5, 7, batch_first=True), torch.randn(3, 4, 5)) == reference
    # unbatched (L=4, 5) is a third of the 12 rows
    assert 3 * ops_of(cls(5, 7), torch.randn(4, 5)) == reference


def test_packed_sequence_counts_real_timesteps() -> None:
    # lengths 4, 2, 1: batch_sizes (3, 2, 1, 1), sum = 7 rows (not 4*3 = 12)
    # GRU: 7 * 651 = 4557; macs 7 * 3*7*(5+7) = 1764
    packed = pack_padded_sequence(torch.randn(X), torch.tensor([4, 2, 1]))
    gru = nn.GRU(5, 7)
    record = profile_of(gru, packed).records[0]
    assert (record.self_ops, record.self_macs) == (4557, 1764)
    assert 2 * record.self_macs == decomposed_flops(lambda: gru(packed))


def test_dropout_between_layers() -> None:
    # eval: 0 ops. training: as nn.Dropout, 3 ops (draw, scale, multiply) per element of the
    # outputs of every layer but the last: 3 * 12 rows * 7 = 252
    lstm, x = nn.LSTM(5, 7, num_layers=2, dropout=0.5), torch.randn(X)
    plain = nn.LSTM(5, 7, num_layers=2)
    assert profile_of(lstm, x).total_ops == profile_of(plain, x).total_ops
    assert profile_of(lstm, x, eval=False).total_ops == profile_of(plain, x).total_ops + 252


def test_default_io_size_is_right_for_rnns() -> None:
    # shapes.default_io_size already traces tuples and PackedSequence (0.0.4's B4 is fixed)
    record = profile_of(nn.LSTM(5, 7, num_layers=2), torch.randn(X)).records[0]
    assert record.input_size == (4, 3, 5)
    assert record.output_size == ((4, 3, 7), ((2, 3, 7), (2, 3, 7)))
    packed = pack_padded_sequence(torch.randn(X), torch.tensor([4, 2, 1]))
    record = profile_of(nn.GRU(5, 7), packed).records[0]
    assert (record.input_size, record.output_size) == ((7, 5), ((7, 7), (1, 3, 7)))
    record = profile_of(nn.LSTMCell(5, 7), torch.randn(3, 5)).records[0]
    assert (record.input_size, record.output_size) == ((3, 5), ((3, 7), (3, 7)))


# -- cells -------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        (nn.RNNCell(5, 7), 672),  # 3 rows * 224
        (nn.RNNCell(5, 7, nonlinearity="relu"), 546),  # 3 * 7 * 26
        (nn.RNNCell(5, 7, bias=False), 630),  # 3 * 7 * 30
        (nn.GRUCell(5, 7), 1953),  # 3 * 651; 0.0.4: 6*3*7*(5+7+3.5) = 1953
        (nn.GRUCell(5, 7, bias=False), 1827),  # 3 * 609 (0.0.4 counted bias anyway: B3)
        (nn.LSTMCell(5, 7), 2667),  # 3 * 889; 0.0.4's formula 8*3*7*15.875 (it crashed: B2)
        (nn.LSTMCell(5, 7, bias=False), 2499),  # 3 * 833
    ],
)
def test_cells(cell: nn.RNNCellBase, expected: int) -> None:
    assert ops_of(cell, torch.randn(3, 5)) == expected


def test_gru_cell_bias_flag_legacy_example() -> None:
    # LEGACY_API B3: GRUCell(8, 16) batch 3 without bias; 0.0.4 reported 7920.0
    # 6*N*H*(Hin + H + 2.5) = 6*3*16*26.5 = 7632
    assert ops_of(nn.GRUCell(8, 16, bias=False), torch.randn(3, 8)) == 7632


@pytest.mark.parametrize("cls", [nn.RNNCell, nn.GRUCell, nn.LSTMCell])
def test_cell_unbatched_input_is_one_row(cls: type[nn.RNNCellBase]) -> None:
    assert 3 * ops_of(cls(5, 7), torch.randn(5)) == ops_of(cls(5, 7), torch.randn(3, 5))


def test_a_cell_without_input_features_has_no_input_product() -> None:
    # GRUCell(0, 6), 3 rows: per row the recurrent product 18*(2*6 - 1) = 198, the input
    # product over 0 features 0 (not 18*(2*0 - 1) = -18), biases 2*18 = 36, gates 6*21 = 126:
    # 360 per row, 1080; macs 3 * 18*6 = 324
    cell, x = nn.GRUCell(0, 6), torch.randn(3, 0)
    assert ops_of(cell, x) == 1080
    assert macs_of(cell, x) == 324


def test_cell_macs() -> None:
    # 3 rows * 3 gates * 7 * (5 + 7) = 756; LSTMCell 3 * 4 * 7 * 12 = 1008
    assert macs_of(nn.GRUCell(5, 7), torch.randn(3, 5)) == 756
    assert macs_of(nn.LSTMCell(5, 7), torch.randn(3, 5)) == 1008


# -- macs against FlopCounterMode ----------------------------------------------------------------

# Short sequences keep the per-operator dispatch of FlopCounterMode cheap.
SHORT = (2, 3, 5)


@pytest.mark.parametrize("cls", [nn.RNN, nn.GRU, nn.LSTM])
@pytest.mark.parametrize(("layers", "bidirectional"), [(1, False), (2, True)])
@pytest.mark.parametrize("bias", [True, False])
def test_two_macs_equal_decomposed_flop_counter(cls: type[nn.RNNBase], layers: int,
                                                 bidirectional: bool, bias: bool) -> None:
    module = cls(5, 7, num_layers=layers, bidirectional=bidirectional, bias=bias)
    x = torch.randn(SHORT)
    assert profile_of(module, x).total_flops == decomposed_flops(lambda: module(x))


@pytest.mark.filterwarnings("ignore:LSTM with projections is not supported with oneDNN")
@pytest.mark.parametrize(
    "module",
    [nn.LSTM(5, 7, proj_size=3, num_layers=2, bidirectional=True),
     nn.RNN(5, 7, nonlinearity="relu"),
     nn.RNNCell(5, 7), nn.GRUCell(5, 7, bias=False), nn.LSTMCell(5, 7)],
    ids=["lstm-proj", "rnn-relu", "rnn-cell", "gru-cell", "lstm-cell"],
)
def test_two_macs_equal_decomposed_flop_counter_others(module: nn.Module) -> None:
    x = torch.randn(3, 5) if isinstance(module, nn.RNNCellBase) else torch.randn(SHORT)
    assert profile_of(module, x).total_flops == decomposed_flops(lambda: module(x))


def test_rnn_cell_counts_a_replaced_input_weight() -> None:
    module = nn.RNNCell(3, 2)
    module.weight_ih = nn.Parameter(torch.randn(2, 5))  # input_size still says 3
    x = torch.randn(4, 5)
    # rows 4, in 5, hidden 2: 2 * (2 * 5 - 1) + 2 * (2 * 2 - 1) + 2 * 2 bias + 2 * 8 tanh step
    # = 18 + 6 + 4 + 16 = 44 per row, 176 in all (input_size gave 4 * 36 = 144)
    assert ops_of(module, x) == 176
    # MACs 4 * 2 * (5 + 2) = 56
    assert macs_of(module, x) == 56
