"""Weights packed into opaque objects (``torch.ao`` quantized modules): counted as the
parameters of the module holding them, with their stored bytes, never trainable; a packing
that cannot be read is unknown, never 0."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler, Profiler
from moduleprofiler import packed as packed_module
from moduleprofiler.memory.static import parameter_memory
from moduleprofiler.modules import module_facts, scan_modules
from moduleprofiler.records import unknown_work
from moduleprofiler.warn import LowerBoundWarning

ENGINES = set(torch.backends.quantized.supported_engines)
pytestmark = pytest.mark.skipif(not ENGINES & {"x86", "fbgemm", "qnnpack"},
                                reason="no quantized engine in this torch build")
nnq = torch.ao.nn.quantized
nnqd = torch.ao.nn.quantized.dynamic
nniq = torch.ao.nn.intrinsic.quantized


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    """torch.ao.quantization warns that it is deprecated on every call."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _dynamic(model: nn.Module, dtype: torch.dtype = torch.qint8) -> nn.Module:
    layers = {nn.Linear, nn.LSTM, nn.GRU, nn.LSTMCell, nn.GRUCell, nn.RNNCell}
    return torch.ao.quantization.quantize_dynamic(model, layers, dtype=dtype)


def _quint8(*shape: int) -> torch.Tensor:
    return torch.quantize_per_tensor(torch.randn(*shape), 0.1, 0, torch.quint8)


def test_a_dynamically_quantized_linear_counts_its_packed_weights() -> None:
    model = _dynamic(nn.Sequential(nn.Linear(8, 4), nn.ReLU()).eval())
    profile = Profiler().profile(model, torch.randn(2, 8))
    # Linear(8, 4): 8 x 4 = 32 qint8 weights + 4 float32 biases = 36 parameters,
    # 32 x 1 + 4 x 4 = 48 bytes; packed weights are never trained
    assert profile.total_params == 36 and profile.complete
    assert [(info.path, info.params, info.self_params, info.param_bytes)
            for info in profile.modules] == [
        ("", 36, 0, 48), ("0", 36, 0, 48), ("0._packed_params", 36, 36, 48), ("1", 0, 0, 0)]
    assert all(info.trainable_params == 0 for info in profile.modules)
    row = profile.summary().iloc[0]
    assert (row["params"], row["trainable_params"], row["param_bytes"]) == (36, 0, 48)
    assert profile.to_df("module")["params"].tolist() == [36, 36, 36, 0]


def test_any_packed_says_whether_some_module_holds_a_packed_object() -> None:
    floating = nn.Sequential(nn.Linear(8, 4), nn.Sequential(nn.ReLU(), nn.Linear(4, 2))).eval()
    assert not packed_module.any_packed(floating.modules())
    quantized = _dynamic(copy.deepcopy(floating))
    # the packed object sits two levels down: Sequential -> Linear -> its _packed_params
    assert packed_module.any_packed(quantized.modules())
    assert not packed_module.any_packed([quantized, quantized[1]])


@pytest.mark.parametrize(("layer", "x", "params", "param_bytes"), [
    # 6 x 3 x 3 x 3 = 162 weights + 6 biases = 168; 162 x 1 + 6 x 4 = 186 bytes
    (lambda: nnq.Conv2d(3, 6, 3), lambda: _quint8(1, 3, 5, 5), 168, 186),
    (lambda: nniq.ConvReLU2d(3, 6, 3), lambda: _quint8(1, 3, 5, 5), 168, 186),
    # 6 x 3 x 3 = 54 + 6 = 60; 54 + 24 = 78 bytes
    (lambda: nnq.Conv1d(3, 6, 3), lambda: _quint8(1, 3, 5), 60, 78),
    # 6 x 3 x 27 = 486 + 6 = 492; 486 + 24 = 510 bytes
    (lambda: nnq.Conv3d(3, 6, 3), lambda: _quint8(1, 3, 5, 5, 5), 492, 510),
    # a transposed weight is in x out x kernel: 3 x 6 x 3 x 3 = 162 + 6 = 168
    (lambda: nnq.ConvTranspose2d(3, 6, 3), lambda: _quint8(1, 3, 5, 5), 168, 186),
    # 5 x 3 = 15 + 3 = 18; 15 + 12 = 27 bytes
    (lambda: nnq.Linear(5, 3), lambda: _quint8(2, 5), 18, 27),
    (lambda: nniq.LinearReLU(5, 3), lambda: _quint8(2, 5), 18, 27),
    # 10 x 4 = 40 quint8 rows, no bias (the rows' scales and offsets are not counted)
    (lambda: nnq.Embedding(10, 4), lambda: torch.tensor([1, 2, 3]), 40, 40),
    (lambda: nnq.EmbeddingBag(10, 4), lambda: (torch.tensor([1, 2, 3]), torch.tensor([0])),
     40, 40),
], ids=["Conv2d", "ConvReLU2d", "Conv1d", "Conv3d", "ConvTranspose2d", "Linear", "LinearReLU",
        "Embedding", "EmbeddingBag"])
def test_each_statically_quantized_layer_counts_its_weight_and_bias(
        layer: Any, x: Any, params: int, param_bytes: int) -> None:
    profile = Profiler().profile(layer(), x())
    assert (profile.total_params, profile.modules[0].param_bytes) == (params, param_bytes)
    assert profile.modules[0].trainable_params == 0 and profile.params_complete


def test_a_dynamically_quantized_lstm_counts_as_the_float_layer() -> None:
    float_model = nn.Sequential(nn.LSTM(4, 3, num_layers=2, bidirectional=True))
    x = torch.randn(5, 2, 4)
    # per direction, 4 gates x 3 hidden = 12 rows: layer 0: 12 x 4 + 12 x 3 + 2 x 12 = 108;
    # layer 1 reads both directions (6): 12 x 6 + 12 x 3 + 24 = 132; 2 x (108 + 132) = 480
    assert sum(p.numel() for p in float_model.parameters()) == 480
    profile = Profiler().profile(_dynamic(float_model), x)
    assert profile.total_params == 480 and profile.modules[0].trainable_params == 0
    # bytes: weights 1 each, biases 4: layer 0 (84 + 24 x 4) x 2 = 360, layer 1
    # (108 + 96) x 2 = 408: 768
    assert profile.modules[0].param_bytes == 768
    # float16 weights 2 bytes each: (168 + 96) x 2 + (216 + 96) x 2 = 1,152
    half = Profiler().profile(_dynamic(float_model, torch.float16), x)
    assert (half.total_params, half.modules[0].param_bytes) == (480, 1152)


@pytest.mark.parametrize(("cell", "params", "param_bytes"), [
    # 4 gates x 3: 12 x 4 + 12 x 3 = 84 weights (1 byte) + 2 x 12 biases (4 bytes): 180
    (lambda: nn.LSTMCell(4, 3), 108, 84 + 96),
    # 3 gates x 3: 9 x 4 + 9 x 3 = 63 + 2 x 9 = 81; 63 + 72 = 135 bytes
    (lambda: nn.GRUCell(4, 3), 81, 63 + 72),
    # 3 x 4 + 3 x 3 = 21 + 2 x 3 = 27; 21 + 24 = 45 bytes
    (lambda: nn.RNNCell(4, 3), 27, 21 + 24),
], ids=["LSTMCell", "GRUCell", "RNNCell"])
def test_a_dynamically_quantized_cell_counts_as_the_float_cell(
        cell: Any, params: int, param_bytes: int) -> None:
    float_model = nn.Sequential(cell())
    assert sum(p.numel() for p in float_model.parameters()) == params
    profile = Profiler().profile(_dynamic(float_model), torch.randn(2, 4))
    assert (profile.total_params, profile.modules[0].param_bytes) == (params, param_bytes)


def _engine() -> str:
    return next(engine for engine in ("x86", "fbgemm", "qnnpack") if engine in ENGINES)


def _static(model: nn.Module, x: torch.Tensor) -> nn.Module:
    """Eager static quantization: prepare, one calibrating forward, convert."""
    model.qconfig = torch.ao.quantization.get_default_qconfig(_engine())
    torch.ao.quantization.prepare(model, inplace=True)
    model(x)
    return torch.ao.quantization.convert(model, inplace=True)


class _ConvBn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.quant = torch.ao.quantization.QuantStub()
        self.conv = nn.Conv2d(3, 4, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(4)
        self.relu = nn.ReLU()
        self.fc = nn.Linear(4 * 8 * 8, 5)
        self.dequant = torch.ao.quantization.DeQuantStub()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn(self.conv(self.quant(x))))
        return self.dequant(self.fc(y.flatten(1)))  # type: ignore[no-any-return]


def test_eager_static_quantization_counts_the_float_model_less_the_folded_batchnorm() -> None:
    torch.manual_seed(0)
    float_model = _ConvBn().eval()
    x = torch.randn(2, 3, 8, 8)
    # conv 4 x 3 x 9 = 108, BatchNorm 4 + 4, fc 256 x 5 + 5 = 1,285: 1,401
    assert sum(p.numel() for p in float_model.parameters()) == 1401
    model = copy.deepcopy(float_model)
    torch.ao.quantization.fuse_modules(model, [["conv", "bn", "relu"]], inplace=True)
    profile = Profiler().profile(_static(model, x), x)
    # folding the BatchNorm takes its 8 away and gives the convolution a bias of 4:
    # 1,401 - 8 + 4 = 1,397; bytes: 108 + 1,280 qint8 weights, 4 + 5 float32 biases
    assert profile.total_params == 1397 and profile.complete
    assert profile.modules[0].param_bytes == 108 + 1280 + 4 * (4 + 5)
    assert profile.module("conv").type_name == "ConvReLU2d"


def test_fx_static_quantization_counts_the_float_model_less_the_folded_batchnorm() -> None:
    quantize_fx = pytest.importorskip("torch.ao.quantization.quantize_fx")
    torch.manual_seed(0)
    float_model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(),
                                nn.Linear(4 * 6 * 6, 5)).eval()
    x = torch.randn(2, 3, 8, 8)
    # conv 4 x 3 x 9 + 4 = 112, BatchNorm 4 + 4, Linear 144 x 5 + 5 = 725: 845
    assert sum(p.numel() for p in float_model.parameters()) == 845
    mapping = torch.ao.quantization.get_default_qconfig_mapping(_engine())
    prepared = quantize_fx.prepare_fx(copy.deepcopy(float_model), mapping, (x,))
    prepared(x)
    profile = Profiler().profile(quantize_fx.convert_fx(prepared), x)
    # the BatchNorm folds into the convolution, which has a bias already: 845 - 8 = 837
    assert profile.total_params == 837 and profile.complete
    assert profile.module("0").type_name == "ConvReLU2d" and profile.module("0").params == 112


def test_torchvision_s_quantizable_mobilenet_v2_counts_the_float_parameters() -> None:
    quantization = pytest.importorskip("torchvision.models.quantization")
    torch.manual_seed(0)
    float_model = quantization.mobilenet_v2(weights=None, quantize=False).eval()
    batchnorm = sum(p.numel() for m in float_model.modules() if isinstance(m, nn.BatchNorm2d)
                    for p in m.parameters())
    biasless = sum(m.out_channels for m in float_model.modules()
                   if isinstance(m, nn.Conv2d) and m.bias is None)
    # 3,504,872 parameters, 34,112 of them BatchNorm's, folded into the 52 convolutions
    # before them, which have no bias and get one: 17,056 biases
    assert (sum(p.numel() for p in float_model.parameters()), batchnorm, biasless) == (
        3_504_872, 34_112, 17_056)
    model = copy.deepcopy(float_model)
    model.fuse_model(is_qat=False)
    x = torch.randn(1, 3, 64, 64)
    profile = Profiler().profile(_static(model, x), x)
    # 3,504,872 - 34,112 + 17,056 = 3,487,816
    assert profile.total_params == 3_487_816 and profile.params_complete
    assert profile.total_macs == Profiler().profile(float_model, x).total_macs


def _state(model: nn.Module) -> list[tuple[str, dict[str, Any], list[Any]]]:
    """Each module's attributes (the objects themselves) and its packed objects' states."""
    return [(path, dict(vars(module)),
             [value.__getstate__() for value in vars(module).values()
              if type(value) is torch._C.ScriptObject])
            for path, module in model.named_modules()]


def _same(left: Any, right: Any) -> bool:
    if isinstance(left, torch.Tensor):
        return isinstance(right, torch.Tensor) and torch.equal(
            left.int_repr() if left.is_quantized else left,
            right.int_repr() if right.is_quantized else right)
    if isinstance(left, (tuple, list)):
        return (type(left) is type(right) and len(left) == len(right)
                and all(_same(a, b) for a, b in zip(left, right)))
    if type(left) is torch._C.ScriptObject:  # a cell's packed linears: by their states
        return type(right) is torch._C.ScriptObject and _same(left.__getstate__(),
                                                               right.__getstate__())
    return left is right or bool(left == right)


def test_reading_packed_weights_leaves_the_model_as_it_was() -> None:
    torch.manual_seed(0)
    model = _dynamic(nn.Sequential(nn.Linear(8, 4), nn.LSTM(4, 3)).eval())
    model = nn.Sequential(model, nnq.Conv2d(1, 2, 3).eval())
    before = _state(model)
    dicts = {path: vars(module).copy() for path, module in model.named_modules()}
    x = torch.randn(2, 8)
    expected = model[0][0](x)
    profile = Profiler().profile(model[0][0], x)
    module_facts(model), scan_modules(model), ModuleProfiler().count_params(model)
    assert profile.total_params == 36
    after = _state(model)
    assert [path for path, _, _ in after] == [path for path, _, _ in before]
    for (path, attributes, states), (_, old_attributes, old_states) in zip(after, before):
        assert attributes.keys() == old_attributes.keys(), path  # nothing written onto it
        assert all(attributes[key] is value for key, value in dicts[path].items()), path
        assert _same(states, old_states), path
    assert torch.equal(model[0][0](x), expected)


def test_the_count_and_memory_views_of_packed_weights() -> None:
    model = _dynamic(nn.Sequential(nn.Linear(8, 4), nn.ReLU()).eval())
    counted = ModuleProfiler().count_params(model)
    # 36 parameters, none trainable: 32 qint8 (8 bits) and 4 float32 (32 bits): 384 bits
    assert counted["__root__"]["nontrainable_params"] == 36
    assert counted["__root__"]["trainable_params"] == 0
    assert counted["__root__"]["nontrainable_params_size_bits"] == 32 * 8 + 4 * 32
    assert counted["0._packed_params"]["nontrainable_params_percent"] == 1.0
    memory = parameter_memory(model).set_index("module")
    # 32 qint8 bytes + 16 float32 bytes, all frozen
    assert memory.loc["__root__", ["param_bytes", "frozen_param_bytes", "qint8_param_bytes",
                                   "float32_param_bytes"]].tolist() == [48, 48, 32, 16]
    report = ModuleProfiler().measure_memory(model, torch.randn(2, 8))
    assert report.param_bytes == 48
    # the passes start with the packed weights live, as a plain layer's parameters: 48 bytes
    # of weights + the 2 x 8 float32 input, 64 bytes (the packed weights were left out: 64)
    assert report.inference.baseline_bytes == 48 + 64
    # the peak is the baseline plus the 2 x 4 float32 output of the Linear (32 bytes), the
    # ReLU's output (32 bytes) alive with it
    assert report.inference.peak_bytes == 48 + 64 + 32 + 32


def _sparse_linear() -> nn.Module:
    """A block-sparse dynamic quantized linear (qnnpack only), half its 1 x 4 blocks zero."""
    sparse = torch.ao.nn.sparse.quantized.dynamic.Linear(8, 4, 1, 4)
    weight = torch.quantize_per_tensor(torch.randn(4, 8), 0.1, 0, torch.qint8)
    sparse.set_weight_bias(weight, torch.zeros(4), 1, 4)
    return sparse


@pytest.fixture
def qnnpack() -> Iterator[None]:
    if "qnnpack" not in ENGINES:
        pytest.skip("no qnnpack engine in this torch build")
    engine = torch.backends.quantized.engine
    torch.backends.quantized.engine = "qnnpack"
    try:
        yield
    finally:
        torch.backends.quantized.engine = engine


@pytest.mark.usefixtures("qnnpack")
def test_a_block_sparse_linear_counts_its_dense_weight() -> None:
    profile = Profiler().profile(nn.Sequential(_sparse_linear()), torch.randn(2, 8))
    # its weight() is 4 x 8 = 32 + 4 biases = 36, as a dense layer's
    assert profile.total_params == 36 and profile.params_complete


@pytest.mark.usefixtures("qnnpack")
def test_a_packing_that_cannot_be_read_is_unknown_listed_and_a_lower_bound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # as a torch with a packing this version does not know: its reader is gone
    monkeypatch.delitem(packed_module._READERS,
                        "__torch__.torch.classes.sparse.LinearPackedParamsBase")
    model = nn.Sequential(nn.Sequential(_sparse_linear()), nn.Linear(4, 2))
    profile = Profiler().profile(model, torch.randn(2, 8))
    params = {info.path: info.params for info in profile.modules}
    # the holder and the Sequential holding only it are unknown; the root holds the float
    # Linear's 4 x 2 + 2 = 10: a lower bound
    assert params == {"": 10, "0": None, "0.0": None, "0.0._packed_params": None, "1": 10}
    assert profile.unknown_params == ("0.0._packed_params",)
    assert "params" in profile.lower_bounds and not profile.complete
    assert profile.total_params == 10
    assert "packed weights that cannot be read in modules ['0.0._packed_params']" in (
        unknown_work(profile))
    frame = profile.to_df("module").set_index("module")
    assert frame["params"].isna().tolist() == [False, True, True, True, False]
    alone = Profiler().profile(nn.Sequential(_sparse_linear()), torch.randn(2, 8))
    assert alone.total_params is None and alone.summary()["params"].isna().all()
    # their bytes are unknown too, never 0: the profile's and the memory report's
    assert profile.modules[0].param_bytes == 10 * 4  # the float Linear's: a lower bound
    assert alone.modules[0].param_bytes is None
    assert alone.summary()["param_bytes"].isna().all()
    report = ModuleProfiler().measure_memory(nn.Sequential(_sparse_linear()), torch.randn(2, 8))
    assert report.summary()[["param_bytes", "model_size_bytes"]].isna().all(axis=None)
    notes = " ".join(report.notes())
    assert "parameters >=0 B" in notes
    assert "packed weights that cannot be read in modules ['0._packed_params'] are left out" in (
        notes)
    with pytest.warns(LowerBoundWarning, match="hold a packing that cannot be read"):
        counted = ModuleProfiler().count_params(model)
    assert {name: row["nontrainable_params"] for name, row in counted.items()} == {
        "__root__": None, "0": None, "0.0": None, "0.0._packed_params": None, "1": 0}
    assert counted["__root__"]["trainable_params"] == 10  # the float Linear: 4 x 2 + 2


def test_a_packed_object_is_unpacked_once_while_it_lives(
        monkeypatch: pytest.MonkeyPatch) -> None:
    model = _dynamic(nn.Sequential(nn.Linear(8, 4)).eval())
    name = "__torch__.torch.classes.quantized.LinearPackedParamsBase"
    read = packed_module._READERS[name]
    calls = []

    def counted(packed: Any) -> Any:
        calls.append(packed)
        return read(packed)

    monkeypatch.setitem(packed_module._READERS, name, counted)
    first, second = scan_modules(model), scan_modules(model)
    assert first.infos == second.infos and first.infos[0].params == 36
    assert len(calls) == 1
    # a new weight is a new packed object: read again
    model[0].set_weight_bias(torch.quantize_per_tensor(torch.randn(2, 8), 0.1, 0, torch.qint8),
                             None)
    assert scan_modules(model).infos[0].params == 16 and len(calls) == 2


@pytest.mark.usefixtures("qnnpack")
def test_views_say_a_parameter_total_is_a_lower_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    from moduleprofiler.export import summary

    monkeypatch.delitem(packed_module._READERS,
                        "__torch__.torch.classes.sparse.LinearPackedParamsBase")
    model = nn.Sequential(nn.Sequential(_sparse_linear()), nn.Linear(4, 2))
    profile = Profiler().profile(model, torch.randn(2, 8))
    # the tree: the float Linear's 4 x 2 + 2 = 10 is what is known, and the note says so
    text = " ".join(profile.tree().to_text(width=0).split())
    assert ("parameters unknown in 1 module(s): 0.0._packed_params (packed weights that "
            "cannot be read); params totals are lower bounds") in text
    # a share of a lower-bound total is no share: unknown, and said why (the table of bounded
    # columns had no entry for the parameters: a KeyError)
    shares = " ".join(profile.tree(["params", "params_pct"]).to_text(width=0).split())
    assert "total: params >=10" in shares
    assert ("params % unknown: the total is a lower bound (weights that cannot be read), so "
            "no share of it is known") in shares
    assert profile.tree(["params", "params_pct"]).df["params_pct"].isna().all()
    # the summary of several models named no parameters (its note table had no entry for
    # them: a KeyError)
    table = " ".join(summary({"quantized": profile}).to_text(width=0).split())
    assert ("quantized: ops, MACs, FLOPs and parameters are lower bounds (work without a "
            "formula, or weights that cannot be read;") in table
