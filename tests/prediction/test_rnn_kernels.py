"""Recurrent layers are predicted as cuDNN runs them, not as the meta device decomposes them."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence

from moduleprofiler import Profiler
from moduleprofiler.prediction import Calibration
from moduleprofiler.prediction.rnn_kernels import (
    backward_kernels,
    forward_kernels,
    persistent_step_us,
    recurrent_shape,
)
from tests.prediction.test_predict import HOST


def test_the_shape_of_a_call_in_every_input_layout() -> None:
    lstm = nn.LSTM(8, 256, num_layers=2, batch_first=True, bidirectional=True)
    shape = recurrent_shape(lstm, (torch.randn(3, 5, 8),))  # batch 3, 5 steps
    assert shape is not None
    assert (shape.steps, shape.batch, shape.layers, shape.directions, shape.gates) == \
        (5, 3.0, 2, 2, 4)
    gru = nn.GRU(8, 16)  # sequence first
    shape = recurrent_shape(gru, (torch.randn(7, 2, 8),))
    assert shape is not None and (shape.steps, shape.batch, shape.gates) == (7, 2.0, 3)
    shape = recurrent_shape(gru, (torch.randn(7, 8),))  # one unbatched sequence
    assert shape is not None and (shape.steps, shape.batch) == (7, 1.0)
    # a packed batch of lengths 4 and 2: 6 tokens over 4 steps, 1.5 sequences a step
    packed = pack_padded_sequence(torch.randn(4, 2, 8), [4, 2])
    shape = recurrent_shape(gru, (packed,))
    assert shape is not None and (shape.steps, shape.batch) == (4, 1.5)


def test_what_cudnn_does_not_run_as_one_call_is_left_alone() -> None:
    class OwnForward(nn.LSTM):
        def forward(self, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
            return x

    assert recurrent_shape(OwnForward(8, 16), (torch.randn(2, 3, 8),)) is None
    assert recurrent_shape(nn.Linear(8, 16), (torch.randn(2, 8),)) is None
    assert recurrent_shape(nn.LSTM(8, 16), (torch.zeros(0, 2, 8),)) is None


def test_the_kernels_per_layer_direction_and_step() -> None:
    wide = recurrent_shape(nn.LSTM(8, 256, bidirectional=True), (torch.randn(6, 2, 8),))
    assert wide is not None and not wide.persistent
    # per direction: one product for the whole sequence's inputs, then per step a recurrent
    # product and a gate kernel: 2 * (1 + 6 + 6) = 26 launches
    assert sum(k.launches for k in forward_kernels(wide)) == 26
    # the backward, per direction: per step the gates' and the state's gradients and a
    # memset (18), the inputs' gradient and the two weights' gradients (3): 2 * 21 = 42
    assert sum(k.launches for k in backward_kernels(wide)) == 42
    narrow = recurrent_shape(nn.LSTM(8, 128, bidirectional=True), (torch.randn(6, 2, 8),))
    assert narrow is not None and narrow.persistent  # 4 * 128 * 128 = 65,536 weights
    # one persistent kernel per direction runs every step: 2 * (1 + 1)
    assert sum(k.launches for k in forward_kernels(narrow)) == 4
    assert [k.times for k in forward_kernels(narrow)] == [1, 6, 1, 6]
    # and its backward too, then the three gradient products: 2 * (1 + 3)
    assert sum(k.launches for k in backward_kernels(narrow)) == 8
    # hidden 192 (147,456 weights): a persistent forward, a backward kernel per step
    middle = recurrent_shape(nn.LSTM(8, 192), (torch.randn(6, 2, 8),))
    assert middle is not None and middle.persistent and not middle.persistent_backward
    assert sum(k.launches for k in backward_kernels(middle)) == 6 + 6 + 6 + 3
    # no bfloat16 layer ran on persistent kernels
    half = recurrent_shape(nn.LSTM(8, 128), (torch.randn(6, 2, 8, dtype=torch.bfloat16),))
    assert half is not None and not half.persistent


def test_a_persistent_step_is_read_from_the_measured_table() -> None:
    gru = nn.GRU(8, 96)  # 3 * 96 * 96 = 27,648 recurrent weights
    shape = recurrent_shape(gru, (torch.randn(10, 4, 8),))
    assert shape is not None and shape.persistent
    # between the rows 16,384 (0.57 us) and 36,864 (0.96 us) on log scales:
    # ln(27648 / 16384) / ln(36864 / 16384) = 0.5232 / 0.8109 = 0.6452 of the way;
    # exp(ln 0.57 + 0.6452 * ln(0.96 / 0.57)) = exp(-0.5621 + 0.6452 * 0.5213) = 0.798 us
    assert persistent_step_us(shape) == pytest.approx(0.798, abs=1e-3)
    kernels = forward_kernels(shape)
    assert [(k.times, k.launches) for k in kernels] == [(1, 1), (10, 1)]
    assert kernels[1].step_us == pytest.approx(0.798, abs=1e-3)
    # batch 160, halfway from 64 to 256, of a layer of 65,536 weights (LSTM 128: 2.2 us a
    # step up to batch 64, 2.1 times that at 256): 2.2 * (1 + 1.1 * 0.5) = 3.41 us
    wide_batch = recurrent_shape(nn.LSTM(8, 128), (torch.randn(10, 160, 8),))
    assert wide_batch is not None
    assert persistent_step_us(wide_batch) == pytest.approx(3.41)


def test_the_host_issues_one_call_and_cudnns_launches() -> None:
    calibration = Calibration("H100 SXM", "test", 132, "x", "today",
                              {"bf16": {"gemm": [[64, 64, 64, 3.0]],
                                        "mem_unary": [[1e3, 2.0], [1e9, 500.0]],
                                        "mem_binary": [[1e3, 2.0], [1e9, 500.0]]}}, HOST)
    profile = Profiler().predict(nn.LSTM(8, 256, batch_first=True), torch.randn(2, 3, 8),
                                 device=calibration, dtype="bf16")
    # the module call 2 us; the call issued like a matrix product (gemm 11 - the view 1 =
    # 10 us) plus its set-up, (CALL_SHARE 9 + LAYER_SHARE 4.4 * 1 layer-direction) * unary
    # 4 = 53.6 us; then 6 more launches (3 steps' recurrent products and gate kernels) at
    # LSTM's 1.25 * 4 = 5 us each: 2 + 10 + 53.6 + 30 = 95.6 us, times 0.95 inside a model
    assert profile.predicted_host_ms == pytest.approx(95.6 * 0.95 / 1e3)


@pytest.mark.parametrize("backward", [False, True])
def test_an_lstm_on_an_h200_is_predicted_near_its_measured_kernel_time(backward: bool) -> None:
    # LSTM(256, 256), batch 8, 64 steps, fp32 (TF32 off), on an H200 with cuDNN 9.19: its
    # kernels ran 0.304 ms in the forward and 1.029 ms in a training step
    # (benchmarks/results/gpu_rnn_probe_h200_2026-11-30.txt). Priced operator by operator as
    # the meta device decomposes it, the prediction read 1.287 ms (4.2x) and 3.637 ms (3.5x)
    profile = Profiler().predict(nn.LSTM(256, 256, batch_first=True), torch.randn(8, 64, 256),
                                 device="H200", backward=backward)
    measured = 1.029 if backward else 0.304
    assert 0.5 < profile.predicted_device_ms / measured < 2.0


def test_a_packed_sequence_is_predicted_on_a_real_copy_as_its_mean_batch() -> None:
    class Packed(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gru = nn.GRU(8, 300)

        def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
            return self.gru(pack_padded_sequence(x, lengths))[1]

    model = Packed()
    # pack_padded_sequence wants its lengths on the CPU: the meta device cannot run it, so a
    # copy runs where the model is, and the notes say so
    packed = Profiler().predict(model, (torch.randn(10, 3, 8), torch.tensor([10, 7, 3])),
                                device="H200")
    assert any("counted on a copy of the model on its own device" in note
               for note in packed.prediction_notes)
    # lengths 10, 7 and 3: 20 tokens over 10 steps, 2 sequences a step, the kernels of a plain
    # batch of 2 over 10 steps
    plain = Profiler().predict(nn.GRU(8, 300), torch.randn(10, 2, 8), device="H200")
    row = packed.to_df("module").set_index("module").loc["gru"]
    assert row["predicted_device_ms"] == pytest.approx(plain.predicted_device_ms)
