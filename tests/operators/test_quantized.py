"""Quantized operators (``torch.ops.quantized``): int8 products, convolutions (transposed
too), recurrent cells and embedding bags count the work of the float layers they replace, read
from their packed weights."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch import nn

from moduleprofiler import Profiler
from moduleprofiler.operators import MISSING, register_operator, unregister_operator
from moduleprofiler.operators.quantized import _linear
from tests.operators.helpers import count, fcm_flops, formula_count

ENGINES = set(torch.backends.quantized.supported_engines)
pytestmark = pytest.mark.skipif(not ENGINES & {"x86", "fbgemm", "qnnpack"},
                                reason="no quantized engine in this torch build")


def test_a_dynamically_quantized_mlp_counts_as_its_float_layers() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 3, bias=False))
    quantized = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
    x = torch.randn(2, 8)
    profile = Profiler().profile(quantized, x)
    # Linear(8, 6) with bias: 2 x 6 = 12 outputs, 12 x 8 = 96 MACs, 12 x (2*8 - 1) + 12 = 192
    # ops; ReLU 12 ops; Linear(6, 3) without bias: 6 outputs, 36 MACs, 6 x 11 = 66 ops
    assert profile.total_macs == 96 + 36
    assert profile.total_ops == 192 + 12 + 66
    assert profile.complete and profile.unsupported_ops == {}
    # the float model counts the same
    float_profile = Profiler().profile(model, x)
    assert (float_profile.total_ops, float_profile.total_macs) == (270, 132)


class _Static(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.quant = torch.ao.quantization.QuantStub()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.relu = nn.ReLU()
        self.fc = nn.Linear(4 * 8 * 8, 5)
        self.dequant = torch.ao.quantization.DeQuantStub()
        self.functional = torch.ao.nn.quantized.FloatFunctional()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.conv(self.quant(x)))
        y = self.functional.add(y, y)
        return self.dequant(self.fc(y.flatten(1)))  # type: ignore[no-any-return]


def test_a_statically_quantized_network_counts_its_fused_convolution_add_and_linear() -> None:
    torch.manual_seed(0)
    model = _Static().eval()
    model.qconfig = torch.ao.quantization.get_default_qconfig(  # type: ignore[assignment]
        "x86" if "x86" in ENGINES else "fbgemm" if "fbgemm" in ENGINES else "qnnpack")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.ao.quantization.fuse_modules(model, [["conv", "relu"]], inplace=True)
        torch.ao.quantization.prepare(model, inplace=True)
        model(torch.randn(2, 3, 8, 8))
        torch.ao.quantization.convert(model, inplace=True)
    profile = Profiler().profile(model, torch.randn(2, 3, 8, 8))
    # conv 3 -> 4, 3x3, padding 1, 8x8, batch 2: 2 x 4 x 64 = 512 outputs, k = 3 x 9 = 27:
    # 512 x 27 = 13,824 MACs, 512 x 53 + 512 (bias) + 512 (fused ReLU) = 28,160 ops
    # add: 512 ops; fc: 2 x 5 = 10 outputs, k = 256: 2,560 MACs, 10 x 511 + 10 = 5,120 ops
    assert profile.total_macs == 13_824 + 2_560
    assert profile.total_ops == 28_160 + 512 + 5_120
    assert profile.complete and profile.unsupported_ops == {}
    assert profile.module("conv").type_name == "ConvReLU2d"


def _dynamic(model: nn.Module) -> nn.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(model, {nn.LSTM, nn.GRU},
                                                      dtype=torch.qint8)


def test_a_dynamically_quantized_lstm_counts_as_its_float_layer() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.LSTM(3, 2, batch_first=True))
    x = torch.randn(2, 3, 3)
    profile = Profiler().profile(_dynamic(model), x)
    # rows = 2 x 3 = 6; per row, 4 gates x 2 hidden = 8: 8 x (2*3 - 1) + 8 x (2*2 - 1) = 64
    # for the two products, 2 x 8 = 16 for the biases, 2 x 31 = 62 for the gates: 142;
    # 6 x 142 = 852 ops; MACs 6 x 8 x (3 + 2) = 240
    assert (profile.total_ops, profile.total_macs) == (852, 240)
    assert profile.complete and profile.unsupported_ops == {}
    float_profile = Profiler().profile(model, x)
    assert (float_profile.total_ops, float_profile.total_macs) == (852, 240)


def test_a_dynamically_quantized_bidirectional_gru_on_a_packed_sequence() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.GRU(3, 2, batch_first=True, bidirectional=True))
    x = nn.utils.rnn.pack_padded_sequence(torch.randn(2, 3, 3), [3, 1], batch_first=True)
    profile = Profiler().profile(_dynamic(model), x)
    # rows = sum(batch_sizes) = 3 + 1 = 4; per row and direction, 3 gates x 2 hidden = 6:
    # 6 x 5 + 6 x 3 = 48 for the products, 12 for the biases, 2 x 21 = 42 for the gates: 102;
    # 2 directions x 4 rows x 102 = 816 ops; MACs 2 x 4 x 6 x (3 + 2) = 240
    assert (profile.total_ops, profile.total_macs) == (816, 240)
    assert profile.complete and profile.unsupported_ops == {}
    float_profile = Profiler().profile(model, x)
    assert (float_profile.total_ops, float_profile.total_macs) == (816, 240)


def test_a_packing_that_cannot_be_read_is_unknown_not_zero() -> None:
    formula = _linear(relu=False)

    class Args:  # what the operator received: an input, and weights of an unknown packing
        def first(self) -> Any:
            return torch.ones(2, 8)

        def get(self, name: str) -> Any:
            return object()

    assert formula(Args(), torch.ones(2, 6)) is MISSING


@torch.library.custom_op("moduleprofiler_test::doubled", mutates_args=())
def _doubled(x: torch.Tensor) -> torch.Tensor:
    return x * 2


def test_an_operator_formula_may_decline_a_call_and_the_operator_is_then_unknown() -> None:
    @register_operator(torch.ops.moduleprofiler_test.doubled)
    def doubled_ops(args: Any, kwargs: Any, out: Any) -> Any:
        return MISSING if out.numel() > 4 else (out.numel(), 0)  # one multiply per element

    class Doubles(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.ops.moduleprofiler_test.doubled(x)  # type: ignore[no-any-return]

    try:
        assert Profiler().profile(Doubles(), torch.ones(4)).total_ops == 4
        declined = Profiler().profile(Doubles(), torch.ones(5))
        assert not declined.complete
        assert declined.unsupported_ops == {"moduleprofiler_test.doubled": 1}
        assert declined.records[0].self_ops is None  # unknown, never 0
    finally:
        unregister_operator(torch.ops.moduleprofiler_test.doubled)


# -- integer and weight-only products (aten) ---------------------------------------------------

def test_an_int8_product_counts_as_mm() -> None:
    a = torch.randint(-128, 128, (32, 64), dtype=torch.int8)
    b = torch.randint(-128, 128, (64, 16), dtype=torch.int8)
    # 32 x 16 = 512 dot products of length 64: 512 x (2 x 64 - 1) = 65024 ops, 32768 macs
    assert count(torch._int_mm, a, b) == (65024, 32768)
    # the float product of the same shapes, and FlopCounterMode's 2 x macs for it
    assert count(torch.mm, a.float(), b.float()) == (65024, 32768)
    assert fcm_flops(torch.mm, a.float(), b.float()) == 2 * 32768


def test_an_int8_weight_product_scales_each_output() -> None:
    x, weight = torch.randn(4, 64), torch.randint(-128, 128, (16, 64), dtype=torch.int8)
    # 4 x 16 = 64 dot products of length 64 (4096 macs, 64 x 127 = 8128 ops), then each
    # output times its weight row's scale: 64 more
    assert count(torch._weight_int8pack_mm, x, weight, torch.rand(16)) == (8128 + 64, 4096)
    assert fcm_flops(torch.mm, x, weight.float().t()) == 2 * 4096


def test_an_int4_weight_product_dequantizes_each_weight_once() -> None:
    x = torch.randn(4, 64)
    packed = torch._convert_weight_to_int4pack_for_cpu(
        torch.randint(0, 16, (16, 64), dtype=torch.int32), 1)
    scales_and_zeros = torch.rand(2, 16, 2)  # groups of 32 along k, 16 outputs
    # 16 x 64 weights, (w - 8) * scale + zero: 3072; 64 dot products of length 64: 8128 ops,
    # 4096 macs
    assert count(torch._weight_int4pack_mm_for_cpu, x, packed, 32, scales_and_zeros) == (
        3072 + 8128, 4096)
    # the CUDA kernel (tiled int32 weight) and the XPU one read the same sizes: formula alone
    meta = torch.empty(4, 16, device="meta")
    assert formula_count(torch.ops.aten._weight_int4pack_mm.default, x.to("meta"),
                         torch.empty(2, 2, 32, 4, dtype=torch.int32, device="meta"), 32,
                         scales_and_zeros.to("meta"), out=meta) == (3072 + 8128, 4096)


def _quint8(*shape: int) -> torch.Tensor:
    return torch.quantize_per_tensor(torch.randn(*shape), 0.1, 0, torch.quint8)


def test_a_quantized_transposed_convolution_counts_as_the_float_one() -> None:
    torch.manual_seed(0)
    layer = torch.ao.nn.quantized.ConvTranspose2d(3, 6, 3)
    profile = Profiler().profile(layer, _quint8(1, 3, 5, 5))
    # 5 x 5 -> 7 x 7: every input meets 6 x 9 taps: 75 x 54 = 4,050 MACs; per output plane
    # (6), each of the 3 input channels lands 15 x 15 = 225 products on 7 x 7 = 49 outputs:
    # 6 x (2 x 3 x 225 - 49) = 7,806 ops, + 6 x 49 = 294 for the bias: 8,100
    assert (profile.total_ops, profile.total_macs) == (8_100, 4_050) and profile.complete


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_a_strided_grouped_quantized_transposed_convolution_counts_as_the_float_one(
        dims: int) -> None:
    torch.manual_seed(0)
    options: dict[str, Any] = {"stride": 2, "padding": 1, "output_padding": 1, "groups": 3,
                               "dilation": 2}
    quantized = getattr(torch.ao.nn.quantized, f"ConvTranspose{dims}d")(3, 6, 3, **options)
    shape = (1, 3) + (5,) * dims
    profile = Profiler().profile(quantized, _quint8(*shape))
    float_layer = getattr(nn, f"ConvTranspose{dims}d")(3, 6, 3, **options)
    expected = Profiler().profile(float_layer, torch.randn(*shape))
    assert (profile.total_ops, profile.total_macs) == (expected.total_ops, expected.total_macs)
    assert profile.complete and expected.complete


def _dynamic_cell(cell: nn.Module) -> nn.Module:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.ao.quantization.quantize_dynamic(nn.Sequential(cell), {type(cell)},
                                                      dtype=torch.qint8)


def test_dynamically_quantized_cells_count_as_the_float_cells() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 4)
    lstm = Profiler().profile(_dynamic_cell(nn.LSTMCell(4, 3)), x)
    # 4 gates x 3 hidden = 12: 12 x (2*4 - 1) + 12 x (2*3 - 1) = 144 for the products, 24 for
    # the biases, 3 x 31 = 93 for the gates: 261 a row, 2 rows: 522; MACs 2 x 12 x 7 = 168
    assert (lstm.total_ops, lstm.total_macs) == (522, 168) and lstm.complete
    gru = Profiler().profile(_dynamic_cell(nn.GRUCell(4, 3)), x)
    # 3 gates x 3 = 9: 9 x 7 + 9 x 5 = 108, 18 for the biases, 3 x 21 = 63: 189 a row, 378;
    # MACs 2 x 9 x 7 = 126
    assert (gru.total_ops, gru.total_macs) == (378, 126) and gru.complete
    for cell in (nn.RNNCell(4, 3), nn.RNNCell(4, 3, nonlinearity="relu")):
        quantized = Profiler().profile(_dynamic_cell(cell), x)
        expected = Profiler().profile(nn.Sequential(cell), x)
        assert (quantized.total_ops, quantized.total_macs) == (
            expected.total_ops, expected.total_macs)
        assert quantized.complete


def test_a_quantized_embedding_bag_sums_as_the_float_one() -> None:
    torch.manual_seed(0)
    bag = torch.ao.nn.quantized.EmbeddingBag(10, 4, mode="sum")
    x = (torch.tensor([1, 2, 3, 4, 5]), torch.tensor([0, 2]))
    profile = Profiler().profile(bag, x)
    # bags of 2 and 3 rows of 4: 4 x (5 - 2) = 12 adds; a lookup is free
    assert (profile.total_ops, profile.total_macs) == (12, 0) and profile.complete
    lookup = Profiler().profile(torch.ao.nn.quantized.Embedding(10, 4), torch.tensor([1, 2]))
    assert (lookup.total_ops, lookup.complete) == (0, True)
