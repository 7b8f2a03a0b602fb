"""``predict()`` end to end on the meta device, against a small calibration whose every number
is known, so the chain's result is computed by hand."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler
from moduleprofiler.efficiency import AmbiguousDeviceError, UnknownDeviceError
from moduleprofiler.errors import DeviceDtypeError, ProfilingError
from moduleprofiler.prediction import Calibration, HostCosts
from moduleprofiler.prediction.predict import PredictedProfile

HOST = HostCosts("test cpu", {"view": 1.0, "unary": 4.0, "binary": 4.0, "gemm": 11.0,
                              "module_call": 2.0, "cpu_op": 1.0})


def _calibration() -> Calibration:
    return Calibration("H100 SXM", "test", 132, "x", "today",
                       {"bf16": {"gemm": [[64, 64, 64, 3.0]],
                                 "mem_unary": [[1e3, 2.0], [1e9, 500.0]]}}, HOST)


def test_a_linear_layer_predicted_by_hand() -> None:
    model = nn.Linear(64, 64)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    profile = ModuleProfiler().predict(model, torch.randn(64, 64), device=_calibration(),
                                       host="calibrated", dtype="bf16")
    # host: module call 2 us, the transpose view 1 us, the addmm 11 - 1 = 10 us -> 13 us of
    # tight-loop costs, times 0.95 inside a model (IN_SITU_HOST_FACTOR) -> 12.35 us;
    # device: the addmm is the calibrated 64 x 64 x 64 GEMM, 3 us, issued at 12.35 us, started
    # 2 us later (launch latency) -> the pass ends at 17.35 us
    assert profile.predicted_host_ms == pytest.approx(0.01235)
    assert profile.predicted_device_ms == pytest.approx(0.003, rel=1e-3)
    assert profile.predicted_latency_ms == pytest.approx(0.01735, rel=1e-3)
    assert profile.predicted_regime == "host-bound"
    row = profile.to_df("call").iloc[0]
    assert row["predicted_host_ms"] == pytest.approx(0.01235)
    assert row["predicted_device_ms"] == pytest.approx(0.003, rel=1e-3)
    assert row["predicted_bound"] == "host"
    # the user's model: on the CPU, in fp32, its values and hooks as they were
    assert all(p.device.type == "cpu" and p.dtype == torch.float32
               for p in model.parameters())
    assert all(torch.equal(before[name], p) for name, p in model.named_parameters())
    assert not model._forward_hooks and not model._forward_pre_hooks


def test_the_default_host_is_the_calibrated_one() -> None:
    # as on the command line: the latency people ask for has the host in it
    profile = ModuleProfiler().predict(nn.Linear(64, 64), torch.randn(64, 64),
                                       device=_calibration(), dtype="bf16")
    # the same chain as test_a_linear_layer_predicted_by_hand: host 13 * 0.95 = 12.35 us, then
    # the 3 us GEMM 2 us after its launch -> 12.35 + 2 + 3 = 17.35 us
    assert profile.predicted_host_ms == pytest.approx(0.01235)
    assert profile.predicted_latency_ms == pytest.approx(0.01735, rel=1e-3)
    assert profile.predicted_for == "H100 SXM, host test cpu"


def test_host_none_predicts_the_device_time_never_a_latency() -> None:
    profile = ModuleProfiler().predict(nn.Linear(64, 64), torch.randn(64, 64),
                                       device=_calibration(), host=None, dtype="bf16")
    # the device alone: the 3 us GEMM; a time without the host is not called a latency
    assert profile.predicted_device_ms == pytest.approx(0.003, rel=1e-3)
    assert profile.predicted_latency_ms is None
    assert profile.predicted_host_ms is None and profile.predicted_regime is None
    assert any("host=None" in note and "lower bound" in note
               for note in profile.prediction_notes)
    assert "predicted_host_ms" not in profile.to_df("call")


def test_the_backward_is_booked_to_the_calls_that_made_it() -> None:
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU())
    profile = ModuleProfiler().predict(model, torch.randn(64, 64), device="H100 SXM",
                                       host="calibrated", dtype="bf16", backward=True)
    frame = profile.to_df("call").set_index("module")
    # the Linear's backward: the input gradient and the weight gradient are GEMMs
    assert frame.loc["0", "predicted_backward_device_ms"] > 0
    assert profile.predicted_latency_ms > profile.to_df("call").iloc[0]["predicted_device_ms"]
    assert model.training  # the mode the model came in


def test_a_device_with_datasheet_peaks_only_says_so() -> None:
    profile = ModuleProfiler().predict(nn.Linear(64, 64), torch.randn(8, 64),
                                       device="A100 80GB SXM", dtype="bf16")
    assert any("datasheet peaks only" in note for note in profile.prediction_notes)
    assert profile.predicted_for.startswith("A100 80GB SXM")


def test_attention_is_predicted_as_one_fused_operator() -> None:
    class Attention(nn.Module):
        def forward(self, q: torch.Tensor) -> torch.Tensor:
            return nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)

    profile = ModuleProfiler().predict(Attention(), torch.randn(2, 12, 128, 64),
                                       device="H100 SXM", dtype="bf16")
    assert set(profile.unsupported_ops) <= {"aten._scaled_dot_product_efficient_attention"}
    assert profile.predicted_device_ms > 0


def test_bad_arguments_name_themselves() -> None:
    with pytest.raises(ValueError, match="dtype"):
        ModuleProfiler().predict(nn.Linear(2, 2), torch.randn(1, 2), dtype="fp8x")
    with pytest.raises(ValueError, match="not in the peak table"):
        ModuleProfiler().predict(nn.Linear(2, 2), torch.randn(1, 2), device="Z9000")
    with pytest.raises(ValueError, match="host"):
        ModuleProfiler().predict(nn.Linear(2, 2), torch.randn(1, 2), host="fast")
    with pytest.raises(TypeError, match="tf32 must be True or False"):
        ModuleProfiler().predict(nn.Linear(2, 2), torch.randn(1, 2), tf32="no")
    # an integer dtype raised torch's RuntimeError "Only Tensors of floating point and
    # complex dtype can require gradients" from inside the meta copy
    with pytest.raises(ValueError, match=r"dtype: torch\.int8 is not a floating dtype"):
        ModuleProfiler().predict(nn.Linear(2, 2), torch.randn(1, 2), dtype=torch.int8)


def test_a_device_name_with_a_word_of_no_card_is_refused() -> None:
    # "H200 XYZ" was predicted as the H200: its calibration, its peaks, no word said
    with pytest.raises(UnknownDeviceError, match=r"device 'H200 XYZ' is not in the peak "
                                                 r"table \(close: H200;") as error:
        ModuleProfiler().predict(nn.Linear(2, 2), torch.randn(1, 2), device="H200 XYZ")
    assert error.value.argument == "device"
    # the names CUDA reports still name their card
    predicted = ModuleProfiler().predict(nn.Linear(2, 2), torch.randn(1, 2),
                                         device="NVIDIA H100 80GB HBM3")
    assert predicted.predicted_for.startswith("H100 SXM")


def test_a_device_name_of_several_cards_is_refused() -> None:
    # "H100" was taken for the SXM card; the PCIe card has 2000 GB/s of HBM bandwidth, not
    # 3350, so a memory-bound pass would be predicted 3350 / 2000 = 1.7x too fast for it
    with pytest.raises(AmbiguousDeviceError, match="H100 SXM, H100 PCIe, H100 NVL"):
        ModuleProfiler().predict(nn.Linear(2, 2), torch.randn(1, 2), device="H100")


def test_a_forward_that_reads_values_is_predicted_from_a_real_pass_and_says_so() -> None:
    class Branchy(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2 if x.max() > 0 else x  # a value: the meta device has none

    model, x = nn.Sequential(Branchy()), torch.ones(2, 3)
    predicted = ModuleProfiler().predict(model, x)
    # the branch the real input takes: the max of 6 values (5 comparisons), 1 comparison
    # with 0, 2 x 3 = 6 multiplies
    assert predicted.total_ops == 5 + 1 + 6 == ModuleProfiler().profile(model, x).total_ops
    [note] = [note for note in predicted.prediction_notes if "meta device" in note]
    assert "module '0'" in note and "counted on a copy of the model" in note


def test_a_model_neither_pass_can_run_names_both_reasons() -> None:
    class CpuKernelWithoutBf16(nn.Module):
        """Reads a value (the meta device has none), then calls a kernel that, as
        torchvision's CPU ``nms``, has no bfloat16 version."""

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if x.max() > 0 and x.dtype == torch.bfloat16:
                raise RuntimeError('"nms_kernel" not implemented for \'BFloat16\'')
            return x * 2

    model = nn.Sequential(CpuKernelWithoutBf16())
    with pytest.raises(ProfilingError) as caught:
        ModuleProfiler().predict(model, torch.ones(2, 3), dtype="bf16")
    message = str(caught.value)
    assert "could not run the model on the meta device" in message
    assert "nor a copy of it in bfloat16 where it is" in message
    assert "module '0'" in message and "not implemented for 'BFloat16'" in message
    assert caught.value.path == "0"
    # in float32 both kernels exist: the copy runs
    assert ModuleProfiler().predict(model, torch.ones(2, 3)).total_ops == 5 + 1 + 6


def _fp32_calibration() -> Calibration:
    # one fp32 GEMM row, measured (as calibrate() measures fp32) with TF32 on: 300 us
    return Calibration("H100 SXM", "test", 132, "x", "today",
                       {"fp32": {"gemm": [[4096, 4096, 4096, 300.0]]}}, HOST)


def _gemm(**options: Any) -> PredictedProfile:
    with torch.device("meta"):  # 64 MiB of weight: never allocated
        model = nn.Linear(4096, 4096, bias=False)
    return ModuleProfiler().predict(model, torch.empty(4096, 4096, device="meta"),
                                    device=_fp32_calibration(), host=None, **options)


@pytest.fixture
def matmul_precision() -> Iterator[None]:
    """Whatever a test sets, torch's fp32 matmul precision as it was."""
    before = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(before)


@pytest.mark.usefixtures("matmul_precision")
def test_fp32_matmuls_follow_torchs_matmul_precision() -> None:
    # the 4096^3 GEMM, 2 * 4096^3 = 137,438,953,472 FLOPs, is compute-bound on the H100 SXM:
    # TF32 494.7 TFLOP/s -> roof 277.82 us; plain FP32 67 TFLOP/s -> roof 2051.33 us (its
    # 4 * 3 * 4096^2 = 201 MB take 60 us at 3350 GB/s). The row is the shape itself, so the
    # time is 300 us * (roof + 300) / (277.82 + 300), the floor being the row's 300 us
    torch.set_float32_matmul_precision("highest")  # torch's default: no TF32 for matmuls
    plain = _gemm()
    # 300 * (2051.33 + 300) / (277.82 + 300) = 300 * 2351.33 / 577.82 = 1220.8 us
    assert plain.predicted_device_ms == pytest.approx(1.2208, rel=1e-3)
    assert any("fp32 matmuls on plain FP32" in note and "67 TFLOP/s" in note
               and "fp32_precision" in note for note in plain.prediction_notes)
    torch.set_float32_matmul_precision("high")  # TF32 tensor cores
    tf32 = _gemm()
    assert tf32.predicted_device_ms == pytest.approx(0.300, rel=1e-3)  # as measured
    assert any("fp32 matmuls on TF32" in note and "494.7 TFLOP/s" in note
               for note in tf32.prediction_notes)
    # the keyword wins over torch's setting, both ways
    assert _gemm(tf32=False).predicted_device_ms == pytest.approx(1.2208, rel=1e-3)
    torch.set_float32_matmul_precision("highest")
    forced = _gemm(tf32=True)
    assert forced.predicted_device_ms == pytest.approx(0.300, rel=1e-3)
    assert any("tf32=True" in note for note in forced.prediction_notes)


def test_bf16_says_nothing_of_tf32() -> None:
    profile = ModuleProfiler().predict(nn.Linear(64, 64), torch.randn(64, 64),
                                       device=_calibration(), dtype="bf16")
    assert not any("TF32" in note for note in profile.prediction_notes)


def test_fp32_convolutions_follow_cudnns_setting() -> None:
    # cuDNN's fp32 convolutions default to TF32 (torch.backends.cudnn.conv.fp32_precision
    # "tf32") while matmuls do not: a real run of an fp32 CNN mixes the two
    model, x = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Flatten(), nn.LazyLinear(4)), \
        torch.randn(2, 3, 8, 8)
    model(x)  # the lazy layer takes its shape
    notes = ModuleProfiler().predict(model, x, device="H100 SXM").prediction_notes
    assert any("fp32 convolutions on TF32" in note for note in notes)
    off = ModuleProfiler().predict(model, x, device="H100 SXM", tf32=False).prediction_notes
    assert any("fp32 convolutions on plain FP32" in note for note in off)


def test_a_lazy_model_is_predicted_on_a_copy_and_left_lazy() -> None:
    # the meta copy's lazy layers take their shapes in the copy's forward: the user's stay
    # unmaterialised, as a prediction runs nothing of theirs
    model, x = nn.Sequential(nn.LazyLinear(16), nn.ReLU(), nn.LazyLinear(4)), torch.randn(2, 8)
    lazy = ModuleProfiler().predict(model, x, device="H100 SXM")
    assert isinstance(model[0].weight, nn.parameter.UninitializedParameter)
    assert type(model[0]) is nn.LazyLinear
    model(x)  # now the same model with its shapes
    ready = ModuleProfiler().predict(model, x, device="H100 SXM")
    # Linear(8, 16) and Linear(16, 4) on 2 rows: 2 * (16 * (2 * 8) + 4 * (2 * 16)) = 768 ops,
    # ReLU 2 * 16 = 32
    assert lazy.total_ops == ready.total_ops == 768 + 32
    assert lazy.predicted_device_ms == pytest.approx(ready.predicted_device_ms)
    swept = ModuleProfiler().sweep(nn.Sequential(nn.LazyLinear(4)), x, device="H100 SXM",
                                   batch_sizes=(1, 2))
    frame = swept.to_df()  # each batch size in each default dtype, bf16 and fp32
    assert sorted(zip(frame["batch_size"], frame["dtype"])) == [
        (1, "bf16"), (1, "fp32"), (2, "bf16"), (2, "fp32")]


def test_a_lazy_model_that_reads_its_values_is_predicted_on_a_real_copy() -> None:
    class Branches(nn.Module):  # reads a value: the meta device cannot run it
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.LazyLinear(4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.linear(x)
            return y if bool(y.isfinite().all()) else y.nan_to_num()

    model = Branches()
    predicted = ModuleProfiler().predict(model, torch.randn(2, 8), device="H100 SXM")
    assert any("counted on a copy of the model" in note for note in predicted.prediction_notes)
    assert isinstance(model.linear.weight, nn.parameter.UninitializedParameter)
    # Linear(8, 4) on 2 rows: 2 * 4 * (2 * 8) = 128 ops, the isfinite and all checks besides
    assert predicted.records[1].self_ops == 128


@pytest.mark.parametrize("dtype", [torch.int64, torch.float64])
def test_an_input_a_gpu_would_refuse_is_refused(dtype: torch.dtype) -> None:
    # a real run raises "mat1 and mat2 must have the same dtype" (on a GPU as on the CPU);
    # the meta device computes nothing and let it pass, predicting 2 * 32 * (2 * 16 - 1)
    # + 2 * 32 = 2,048 ops of a Linear that never runs
    model = nn.Sequential(nn.Linear(16, 32))
    with pytest.raises(DeviceDtypeError, match=rf"module '0' \(Linear\): aten\.addmm mixes "
                                               rf"torch\.float32 and {dtype}") as error:
        ModuleProfiler().predict(model, torch.ones(2, 16, dtype=dtype))
    assert error.value.path == "0"
    assert set(error.value.dtypes) == {dtype, torch.float32}


def test_integer_matrix_products_are_refused() -> None:
    class IntegerMatmul(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.mm(x, x.T)  # an int64 GEMM: no GPU kernel ("not implemented")

    with pytest.raises(DeviceDtypeError, match=r"module '__root__' .*torch\.int64"):
        ModuleProfiler().predict(IntegerMatmul(), torch.ones(4, 4, dtype=torch.int64))


def test_a_complex_matrix_product_is_unknown_not_refused_nor_priced_as_a_real_one() -> None:
    # a GPU runs a complex64 GEMM (cuBLAS's complex kernels, four real products' work), which
    # no calibration table measured: its device time is unknown, the total a lower bound
    model = nn.Linear(8, 8, dtype=torch.cfloat)
    predicted = ModuleProfiler().predict(model, torch.randn(2, 8, dtype=torch.cfloat),
                                         device="H100 SXM")
    assert predicted.predicted_device_ms == 0.0
    note = "no calibration table times aten.addmm (1x): their device time is unknown"
    assert any(note in n for n in predicted.prediction_notes)
    assert not any("fp32 matmuls" in n for n in predicted.prediction_notes)
    # every view of the prediction says it under its table
    assert note in " ".join(str(predicted.tree(width=200)).split())


def test_a_float64_matrix_product_is_unknown_and_its_elementwise_work_priced_in_float64() -> None:
    # a GPU runs a float64 GEMM at its FP64 rate, which no calibration table measured: unknown,
    # not an fp32 GEMM's time; the ReLU is priced from the fp32 tables on its float64 bytes,
    # and the notes say so
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU())
    x = torch.randn(256, 64)
    fp32 = ModuleProfiler().predict(model, x, device="H100 SXM")
    fp64 = ModuleProfiler().predict(model, x, device="H100 SXM", dtype=torch.float64)
    assert fp64.predicted_device_lower_bound and not fp32.predicted_device_lower_bound
    note = "no calibration table times aten.addmm (1x): their device time is unknown"
    assert any(note in n for n in fp64.prediction_notes)
    stand_in = "measured no fp64 kernels: fp64 operators are timed from its fp32 tables"
    assert any(stand_in in n for n in fp64.prediction_notes)
    relu32, relu64 = (p.calls("1")[0].metrics["self_predicted_device_ms"] for p in (fp32, fp64))
    assert relu64 > relu32  # 256 * 64 * 8 bytes read and written against * 4
    assert fp64.predicted_device_ms == pytest.approx(relu64)


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_a_float8_matrix_product_is_refused(dtype: torch.dtype) -> None:
    # aten.addmm has no float8 kernel on a GPU ("addmm_cuda" not implemented); the meta device
    # lets it pass
    with pytest.raises(DeviceDtypeError, match=r"module '__root__' \(Linear\): aten\.addmm "
                                               r"on torch\.float8_e[45]m[32].*_scaled_mm"):
        ModuleProfiler().predict(nn.Linear(16, 8), torch.randn(2, 16), dtype=dtype)


def test_a_float64_recurrent_layer_s_products_are_unknown_and_a_float8_one_refused() -> None:
    # cuDNN's recurrent layer runs its products as matrix products: in float64 no calibration
    # measured them (unknown, as a float64 Linear's); in float8 cuDNN has no kernel
    model, x = nn.LSTM(16, 16), torch.randn(4, 2, 16)
    fp64 = ModuleProfiler().predict(model, x, device="H100 SXM", dtype=torch.float64)
    assert fp64.predicted_device_lower_bound
    assert any("no calibration table times aten.mm" in n for n in fp64.prediction_notes)
    with pytest.raises(DeviceDtypeError, match=r"\(LSTM\): cuDNN's LSTM on torch\.float8"):
        ModuleProfiler().predict(model, x, device="H100 SXM", dtype=torch.float8_e4m3fn)


def test_the_host_costs_inside_a_model_and_as_measured() -> None:
    from moduleprofiler.prediction.host_model import IN_SITU_HOST_FACTOR, HostModel
    from moduleprofiler.prediction.op_classes import classify

    work = classify(torch.ops.aten.relu.default, (torch.randn(4),), {}, torch.randn(4))
    # relu is a unary launch: HOST's 4 us in the tight loop, 4 * 0.95 = 3.8 us in a model;
    # a module call 2 us -> 1.9 us; a CPU at half the speed (scale 2) doubles both
    assert IN_SITU_HOST_FACTOR == 0.95
    assert HostModel(HOST, in_model=1.0).op_us(work) == pytest.approx(4.0)
    assert HostModel(HOST).op_us(work) == pytest.approx(3.8)
    assert HostModel(HOST).call_us(0) == pytest.approx(1.9)
    assert HostModel(HOST, scale=2.0).op_us(work) == pytest.approx(7.6)


def test_a_training_step_times_its_backward_by_the_training_tables() -> None:
    # 64 x 64 bf16 everywhere: the forward's GEMM 3 us; the weight gradient x.t() @ grad
    # (x stored 64 x 64, read transposed) is the "tn" row, 7 us; the bias gradient
    # grad.sum(0) reads 64 * 64 * 2 bytes and writes 64 * 2: 8320 bytes, the one
    # mem_bias_grad row, 1 us. The input needs no gradient: no input-gradient GEMM. (The
    # loss squares the output, so the gradient is a dense tensor, as inside a model.)
    rows = {"gemm": [[64, 64, 64, 3.0]], "gemm_grad_tn": [[64, 64, 64, 7.0]],
            "gemm_grad_nn": [[64, 64, 64, 5.0]], "mem_bias_grad": [[8320, 1.0]],
            "mem_reduction": [[8320, 0.5]], "mem_unary": [[1e3, 2.0], [1e9, 500.0]]}
    calibration = Calibration("H100 SXM", "test", 132, "x", "today", {"bf16": rows}, HOST)
    profile = ModuleProfiler().predict(nn.Linear(64, 64), torch.randn(64, 64),
                                       device=calibration, host=None, dtype="bf16",
                                       backward=True, loss_fn=lambda out: (out * out).sum())
    row = profile.to_df("call").iloc[0]
    assert row["predicted_device_ms"] == pytest.approx(0.003, rel=1e-4)
    # 7 + 1 = 8 us (the forward's tables would say 3 + 0.5)
    assert row["predicted_backward_device_ms"] == pytest.approx(0.008, rel=1e-4)


def test_a_calibration_without_row_widths_says_how_it_priced_a_narrow_norm() -> None:
    model = nn.LayerNorm(96)
    x = torch.randn(64, 96)
    # the shipped H100 SXM calibration measured layer norms 1024 wide only
    older = ModuleProfiler().predict(model, x, device="H100 SXM", host=None)
    assert any("did not measure mem_layer_norm row widths" in note
               for note in older.prediction_notes)
    assert older.predicted_device_ms > 0
    newer = ModuleProfiler().predict(model, x, device="H200", host=None)
    assert not any("did not measure" in note for note in newer.prediction_notes)


DEEP_HOST = HostCosts("test cpu", {"view": 1.0, "unary": 4.0, "binary": 4.0, "gemm": 11.0,
                                   "module_call": 2.0, "module_call_depth": 0.5,
                                   "cpu_op": 1.0}, in_model=1.0,
                       # bf16's loops measured at fp32's costs: the prices below hold for both
                       us_by_dtype={"bf16": {"unary": 4.0, "binary": 4.0, "gemm": 11.0}})


def test_module_calls_are_priced_by_their_depth() -> None:
    calibration = dataclasses.replace(_calibration(), host=DEEP_HOST)
    model = nn.Sequential(nn.Sequential(nn.Linear(64, 64)))
    profile = ModuleProfiler().predict(model, torch.randn(64, 64), device=calibration,
                                       dtype="bf16")
    # in_model 1.0 (measured): the loops' costs as they are. Calls: the root at depth 0,
    # 2 us; the inner Sequential at depth 1, 2 + 0.5 = 2.5 us; the Linear at depth 2,
    # 2 + 2 * 0.5 = 3 us; its transpose view 1 us and addmm 11 - 1 = 10 us -> 18.5 us of host;
    # the 3 us GEMM starts 2 us after its launch -> the pass ends at 18.5 + 2 + 3 = 23.5 us
    assert profile.predicted_host_ms == pytest.approx(0.0185)
    assert profile.predicted_latency_ms == pytest.approx(0.0235, rel=1e-3)
    own = dict(zip(profile.to_df("call")["module"], profile.to_df("call")["predicted_host_ms"]))
    assert own["0.0"] == pytest.approx(0.014)  # 3 + 1 + 10 us
    # a calibration that measured both says nothing of them
    assert not any("host costs" in note for note in profile.prediction_notes)


def test_host_costs_without_the_depth_cost_or_the_factor_say_what_stands_in() -> None:
    profile = ModuleProfiler().predict(nn.Sequential(nn.Linear(64, 64)), torch.randn(64, 64),
                                       device=_calibration(), dtype="bf16")
    # HOST holds neither: calls at 2 us each whatever their depth, all times 0.95 ->
    # (2 + 2 + 1 + 10) * 0.95 = 14.25 us
    assert profile.predicted_host_ms == pytest.approx(0.01425)
    notes = " ".join(profile.prediction_notes)
    assert "no measured in-model factor" in notes and "IN_SITU_HOST_FACTOR" in notes
    assert "no cost of a module call by depth" in notes


def test_a_batch_of_zero_takes_the_host_and_no_device_time() -> None:
    profile = ModuleProfiler().predict(nn.Linear(64, 64), torch.randn(0, 64),
                                       device=_calibration(), dtype="bf16")
    # the addmm of 0 rows launches no kernel: host module call 2 us, the transpose view 1 us,
    # the addmm dispatched without a launch 1 us (a view's cost) -> 4 * 0.95 = 3.8 us
    assert profile.predicted_device_ms == 0.0
    assert profile.predicted_device_ms_low == profile.predicted_device_ms_high == 0.0
    assert profile.predicted_host_ms == pytest.approx(0.0038)
    assert profile.predicted_latency_ms == pytest.approx(0.0038)


def test_fp16_priced_from_bf16_tables_says_so() -> None:
    fp16 = ModuleProfiler().predict(nn.Linear(64, 64), torch.randn(64, 64),
                                    device=_calibration(), dtype="fp16")
    # the calibration's bf16 64 x 64 x 64 GEMM, 3 us: its only table of matrix products
    assert fp16.predicted_device_ms == pytest.approx(0.003, rel=1e-3)
    assert "the H100 SXM calibration measured no fp16 kernels: fp16 operators are timed " \
           "from its bf16 tables" in fp16.prediction_notes
    bf16 = ModuleProfiler().predict(nn.Linear(64, 64), torch.randn(64, 64),
                                    device=_calibration(), dtype="bf16")
    assert not any("measured no" in note for note in bf16.prediction_notes)


class _CumulativeProducts(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumprod(x, dim=-1).relu()


def test_operators_priced_by_the_elementwise_rule_are_named_in_the_notes() -> None:
    profile = ModuleProfiler().predict(_CumulativeProducts(), torch.randn(64, 64),
                                       device=_calibration(), dtype="bf16")
    assert profile.predicted_device_ms is not None
    [note] = [note for note in profile.prediction_notes if "no class of their own" in note]
    assert note.endswith(": aten.cumprod (1x)")  # relu has its class: not named


def test_a_calibration_file_that_is_not_one_is_refused_naming_it(tmp_path: Any) -> None:
    model, x = nn.Linear(4, 4), torch.randn(2, 4)
    saved = tmp_path / "mine.json"
    _calibration().save(saved)  # a real one reads back and predicts
    assert ModuleProfiler().predict(model, x, device=str(saved)).predicted_device_ms is not None
    empty = tmp_path / "empty.json"
    empty.write_text("{}", encoding="utf-8")
    with pytest.raises(ValueError, match=r"calibration '.*empty\.json' is not one that "
                                         r"Calibration\.save\(\) wrote .*no name, device_name"):
        ModuleProfiler().predict(model, x, device=str(empty))
    garbled = tmp_path / "garbled.json"
    garbled.write_text("not json", encoding="utf-8")
    with pytest.raises(ValueError, match=r"calibration '.*garbled\.json' is not JSON"):
        ModuleProfiler().predict(model, x, device=garbled)


class _ComplexProduct(nn.Module):
    """A complex matrix product: no calibration table times its kernels."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(64, 64, dtype=torch.complex64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight


def test_a_pass_whose_device_time_is_a_lower_bound_has_no_host_bound_regime() -> None:
    profile = ModuleProfiler().predict(_ComplexProduct(),
                                       torch.randn(64, 64, dtype=torch.complex64),
                                       device=_calibration())
    # its one kernel is unknown: 0 us known, a lower bound, so "host-bound" is not known
    assert profile.predicted_device_ms == 0.0 and profile.predicted_device_lower_bound
    assert profile.predicted_latency_ms is not None and profile.predicted_regime is None
    assert any("no calibration table times aten.mm (1x)" in note
               for note in profile.prediction_notes)
    # a pass whose every operator is priced says its regime as before
    known = ModuleProfiler().predict(nn.Linear(64, 64), torch.randn(64, 64),
                                     device=_calibration(), dtype="bf16")
    assert not known.predicted_device_lower_bound and known.predicted_regime == "host-bound"


def test_a_device_of_another_kind_is_a_type_error_naming_the_argument() -> None:
    with pytest.raises(TypeError, match=r"device must be .* got int 5"):
        ModuleProfiler().predict(nn.Linear(2, 2), torch.randn(1, 2), device=5)  # type: ignore[arg-type]


def test_a_predictions_dict_holds_its_latency_and_band_as_its_json_does() -> None:
    profile = ModuleProfiler().predict(nn.Linear(8, 8), torch.randn(4, 8), device="H200")
    fields = profile.to_dict()["result_fields"]
    assert fields["predicted_latency_ms"] == profile.predicted_latency_ms
    assert fields["predicted_device_ms_low"] == profile.predicted_device_ms_low
    assert fields["prediction_notes"] == profile.prediction_notes
    assert json.loads(json.dumps(fields)) == json.loads(profile.to_json())["result_fields"]


@pytest.mark.usefixtures("matmul_precision")
def test_plain_fp32_matmuls_are_priced_from_rows_measured_without_tf32() -> None:
    # the same 4096^3 GEMM measured with TF32 off (PyTorch's default): 2,000 us, where the
    # TF32 row's achieved fraction on the FP32 peak said 1,220.8 us. The row is the shape
    # itself: 2000 * (roof + floor) / (roof + floor) = 2000 us
    calibration = _fp32_calibration()
    tables = {"fp32": {**calibration.tables["fp32"],
                       "gemm_ieee": [[4096, 4096, 4096, 2000.0]]}}
    calibration = dataclasses.replace(calibration, tables=tables)
    with torch.device("meta"):
        model = nn.Linear(4096, 4096, bias=False)
    x = torch.empty(4096, 4096, device="meta")
    torch.set_float32_matmul_precision("highest")
    plain = ModuleProfiler().predict(model, x, device=calibration, host=None)
    assert plain.predicted_device_ms == pytest.approx(2.000, rel=1e-3)
    assert any("measured without TF32" in note for note in plain.prediction_notes)
    # with TF32 on, the TF32 row as before
    tf32 = ModuleProfiler().predict(model, x, device=calibration, host=None, tf32=True)
    assert tf32.predicted_device_ms == pytest.approx(0.300, rel=1e-3)
    assert not any("without TF32" in note for note in tf32.prediction_notes)


class _PaddedEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=True)

    def forward(self, x: torch.Tensor, padding: torch.Tensor) -> torch.Tensor:
        return self.encoder(x, src_key_padding_mask=padding)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_an_encoder_over_padded_rows_is_predicted() -> None:
    # in eval, a TransformerEncoder given a padding mask runs on nested tensors: the meta
    # device has no kernel for its mask check, and the copy where the model is stopped at the
    # nested tensors' strides; the prediction counts what the profile of the model counts
    torch.manual_seed(0)
    model = _PaddedEncoder().eval()
    padding = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    example = (torch.randn(2, 5, 16), padding)
    predicted = ModuleProfiler().predict(model, example, device="H100 SXM", host=None)
    counted = ModuleProfiler().profile(model, example)
    assert predicted.total_ops == counted.total_ops > 0
    assert predicted.predicted_device_ms is not None and predicted.predicted_device_ms > 0


def test_a_dtype_without_a_datasheet_peak_is_said() -> None:
    # a T4 (Turing) has no bf16 tensor cores: its table gives fp16 65 TFLOP/s and no bf16, and
    # bf16 matmuls were priced at the plain FP32 peak, 8.1 TFLOP/s, without a word
    profile = ModuleProfiler().predict(nn.Linear(64, 64), torch.randn(8, 64), device="T4",
                                       dtype="bf16")
    assert ("T4's datasheet gives no bf16 peak (no tensor cores for it): those operators are "
            "priced at its plain FP32 peak, 8.1 TFLOP/s") in profile.prediction_notes
    # fp16 has its tensor-core peak there: nothing to say
    half = ModuleProfiler().predict(nn.Linear(64, 64), torch.randn(8, 64), device="T4",
                                    dtype="fp16")
    assert not any("datasheet gives no" in note for note in half.prediction_notes)


def test_tf32_on_a_device_without_tf32_tensor_cores_is_plain_fp32() -> None:
    # a V100 (Volta) has no TF32: with tf32=True its fp32 matmuls are priced at the FP32
    # peak, 15.7 TFLOP/s, and the note said "fp32 matmuls on TF32 tensor cores"
    profile = ModuleProfiler().predict(nn.Linear(64, 64), torch.randn(8, 64),
                                       device="V100 SXM2", tf32=True)
    assert ("fp32 matmuls on plain FP32, 15.7 TFLOP/s peak: V100 SXM2 has no TF32 tensor "
            "cores (tf32=True asks for TF32)") in profile.prediction_notes
    assert not any("on TF32 tensor cores" in note for note in profile.prediction_notes)
