"""A training step's operators retimed by its own tables: layouts of a backward's matrix
products, batch norm in training and its backward, layer norm backward, bias gradients."""

from __future__ import annotations

import math

import pytest
import torch

from moduleprofiler.efficiency.peaks import device_peaks
from moduleprofiler.prediction.backward_classes import (
    ChannelWork,
    layout_gemm_features,
    step_work,
    stored_transposed,
)
from moduleprofiler.prediction.calibration import Calibration
from moduleprofiler.prediction.device_model import DeviceModel
from moduleprofiler.prediction.op_classes import OpWork

aten = torch.ops.aten


def _meta(*shape: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    return torch.empty(*shape, device="meta", dtype=dtype)


def test_layout_features_read_the_alignment_of_the_stored_rows() -> None:
    # "tn": A stored k x m, so its rows are m = 50257 long: 100514 bytes in bf16, not a
    # multiple of 16; "nn" stores A's rows k = 4096 long and B's n = 768: aligned
    assert layout_gemm_features(50257, 768, 4096, 2, "tn")[3] == 6.0
    assert layout_gemm_features(50257, 768, 4096, 2, "nn") == (
        math.log2(50257), math.log2(768), 12.0, 0.0)
    # "nt": B stored n x k, rows k = 30522 long (61044 bytes, 61044 % 16 = 4)
    assert layout_gemm_features(4096, 768, 30522, 2, "nt")[3] == 6.0


def test_a_transposed_view_is_stored_transposed() -> None:
    weight = _meta(768, 3072)
    assert stored_transposed(weight.t())
    assert not stored_transposed(weight)
    assert not stored_transposed(_meta(8, 4, 4)[:, 0, :])  # strided, no transpose


def test_a_weight_gradient_is_timed_by_the_transposed_table_in_the_backward_only() -> None:
    grad, x = _meta(6304, 768), _meta(6304, 3072)
    # grad.t() @ x: m = 768, k = 6304 tokens, n = 3072
    args = (grad.t(), x)
    out = _meta(768, 3072)
    backward = step_work(aten.mm.default, args, {}, out, backward=True)
    assert backward.table == "gemm_grad_tn"
    assert backward.features == (math.log2(768), math.log2(3072), math.log2(6304), 0.0)
    assert backward.flops == 2.0 * 768 * 3072 * 6304
    assert step_work(aten.mm.default, args, {}, out, backward=False).table == "gemm"
    # the input gradient grad @ W, W stored out x in: neither transposed
    assert step_work(aten.mm.default, (grad, _meta(768, 3072)), {}, x,
                     backward=True).table == "gemm_grad_nn"


def test_batch_norm_in_training_and_its_backward_know_their_channels() -> None:
    x, c = _meta(32, 64, 56, 56), _meta(64)
    out = aten.native_batch_norm.default(x, c, c, c, c, True, 0.1, 1e-5)
    work = step_work(aten.native_batch_norm.default, (x, c, c, c, c, True, 0.1, 1e-5), {}, out,
                     backward=False)
    assert isinstance(work, ChannelWork)
    assert (work.table, work.channels) == ("mem_batch_norm_train", 64)
    evaluation = step_work(aten.native_batch_norm.default, (x, c, c, c, c, False, 0.1, 1e-5),
                           {}, out, backward=False)
    assert evaluation.table == "mem_batch_norm_2d"
    grads = aten.native_batch_norm_backward.default(x, x, c, c, c, c, c, True, 1e-5,
                                                    [True, True, True])
    work = step_work(aten.native_batch_norm_backward.default,
                     (x, x, c, c, c, c, c, True, 1e-5, [True, True, True]), {}, grads,
                     backward=True)
    assert isinstance(work, ChannelWork)
    assert (work.table, work.channels) == ("mem_batch_norm_backward", 64)
    # 64 channels on 132 SMs: timed as 132 channels of the same size
    spread = work.spread_over(132)
    assert spread.moved_bytes == pytest.approx(work.moved_bytes * 132 / 64)
    assert spread.features == (math.log2(spread.moved_bytes),)
    assert work.spread_over(64).moved_bytes == work.moved_bytes


def test_a_bias_gradient_is_a_column_reduction() -> None:
    grad = _meta(4096, 768)
    column = step_work(aten.sum.dim_IntList, (grad, [0], True), {}, _meta(1, 768),
                       backward=True)
    assert column.table == "mem_bias_grad"
    row = step_work(aten.sum.dim_IntList, (grad, [-1], True), {}, _meta(4096, 1),
                    backward=True)
    assert row.table == "mem_reduction"
    norm = step_work(aten.native_layer_norm_backward.default,
                     (grad, grad, [768], _meta(4096, 1), _meta(4096, 1), _meta(768),
                      _meta(768), [True, True, True]), {},
                     (grad, _meta(768), _meta(768)), backward=True)
    assert norm.table == "mem_layer_norm_backward"


def test_a_channel_sum_and_a_convolutions_bias_gradient_are_column_reductions() -> None:
    grad = _meta(32, 96, 56, 56)
    # a per-channel scale's gradient: everything but the channels reduced
    channels = step_work(aten.sum.dim_IntList, (grad, [0, 2, 3], True), {},
                         _meta(1, 96, 1, 1), backward=True)
    assert channels.table == "mem_bias_grad"
    image = _meta(32, 96, 56, 56)
    weight = _meta(96, 1, 7, 7)
    outputs = (image, weight, _meta(96))
    with_bias = step_work(aten.convolution_backward.default,
                          (grad, image, weight, [96], [1, 1], [3, 3], [1, 1], False, [0, 0],
                           96, [True, True, True]), {}, outputs, backward=True)
    assert with_bias.table == "conv_backward"
    bias = with_bias.prelude
    assert bias is not None and bias.table == "mem_bias_grad"
    # the output gradient read, the bias's gradient written: (32 * 96 * 56 * 56 + 96) * 2
    # bytes = 19,267,776 bytes in bf16
    assert bias.moved_bytes == 19_267_776
    without = step_work(aten.convolution_backward.default,
                        (grad, image, weight, [0], [1, 1], [3, 3], [1, 1], False, [0, 0],
                         96, [True, True, False]), {}, (image, weight, None), backward=True)
    assert without.prelude is None


def test_a_calibration_without_the_training_tables_times_them_by_the_forward_ones() -> None:
    peaks = device_peaks("H100 SXM")
    calibration = Calibration("H100 SXM", "test", 132, "x", "today", {"bf16": {
        "gemm": [[4096, 4096, 4096, 200.0]], "gemm_grad_tn": [[4096, 4096, 4096, 300.0]],
        "mem_batch_norm_2d": [[1e3, 2.0], [1e9, 500.0]]}})
    model = DeviceModel(calibration, peaks, peaks)
    grad, x = _meta(4096, 4096), _meta(4096, 4096)
    tn = step_work(aten.mm.default, (grad.t(), x), {}, x, backward=True)
    nn_ = step_work(aten.mm.default, (grad, x), {}, x, backward=True)
    # its own table where measured; the forward's "gemm" where not
    assert model.op_us(tn) == pytest.approx(300.0, rel=1e-6)
    assert model.op_us(nn_) == pytest.approx(200.0, rel=1e-6)
    # a batch norm backward of 256 channels (no SM idle), by mem_batch_norm_2d: its bytes
    vectors = [_meta(256) for _ in range(5)]
    work = step_work(aten.native_batch_norm_backward.default,
                     (_meta(8, 256, 28, 28), _meta(8, 256, 28, 28), *vectors, True, 1e-5,
                      [True, True, True]), {},
                     (_meta(8, 256, 28, 28), _meta(256), _meta(256)), backward=True)
    # gradient and input read, the input's gradient written (and 5 + 2 vectors of 256)
    assert work.moved_bytes == 3 * 8 * 256 * 784 * 2 + 7 * 256 * 2
    expected = model.op_us(OpWork("x", "mem_batch_norm_2d", work.features, "bf16", 0.0,
                                  work.moved_bytes, "unary"))
    assert expected is not None and expected > 2.0
    assert model.op_us(work) == pytest.approx(expected)
