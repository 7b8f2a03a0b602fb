"""0.0.4's io-size map: its keys, with exact shapes behind them."""

from __future__ import annotations

import torch
from torch import nn

from moduleprofiler import ModuleProfiler, get_default_io_size_map


def test_default_io_size_map_keeps_the_rnn_keys_of_004() -> None:
    io_map = get_default_io_size_map()
    # 0.0.4's map: {GRUCell, GRU, LSTMCell, LSTM, "default"}, in that order
    assert list(io_map)[:4] == [nn.GRUCell, nn.GRU, nn.LSTMCell, nn.LSTM]
    assert list(io_map)[-1] == "default"
    torch.manual_seed(0)
    lstm = nn.LSTM(4, 3)
    x = torch.randn(5, 2, 4)  # (sequence 5, batch 2, features 4)
    # output (5, 2, 3) and h_n, c_n (1 layer, 2, 3); 0.0.4's function dropped the output's
    # first dimension: ((5, 2, 4), ((2, 3), ((1, 2, 3), (1, 2, 3))))
    assert io_map[nn.LSTM](lstm, (x,), lstm(x)) == ((5, 2, 4), ((5, 2, 3), ((1, 2, 3), (1, 2, 3))))
    gru_cell = nn.GRUCell(4, 3)
    # one tensor out, (2, 3); 0.0.4 gave ((), ())
    assert io_map[nn.GRUCell](gru_cell, (x[0],), gru_cell(x[0])) == ((2, 4), (2, 3))


def test_a_profiler_wraps_the_rnn_io_size_function_as_in_004() -> None:
    profiler = ModuleProfiler()
    exact = profiler.io_size_fn_map[nn.GRU]  # a KeyError before: the key was missing

    def output_only(module: nn.Module, inputs: tuple[torch.Tensor, ...],
                    output: tuple[torch.Tensor, torch.Tensor]) -> tuple[object, object]:
        return exact(module, inputs, output)[1][0], None

    profiler.io_size_fn_map[nn.GRU] = output_only
    model = nn.Sequential(nn.GRU(4, 3, batch_first=True))
    sizes = profiler.trace_io_sizes(model, torch.randn(2, 7, 4))
    # batch 2, sequence 7, hidden 3
    assert sizes["0"]["input_size"] == (2, 7, 3)
    assert sizes["0"]["output_size"] is None
    assert sizes["__root__"]["output_size"] == ((2, 7, 3), (1, 2, 3))
