"""How a prediction runs: one counted pass on a meta copy of the model, with the prediction
listener on it, whichever profiler's ``profile`` counts it."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from moduleprofiler import Profiler, ProfilingError
from moduleprofiler.export.profile import Profile
from moduleprofiler.prediction.listener import PredictionListener
from moduleprofiler.prediction.run import predict
from tests.prediction.test_predict import _calibration


def test_the_pass_is_the_given_profilers_on_a_meta_copy() -> None:
    profiler = Profiler()
    passes: list[tuple[nn.Module, Any, dict[str, Any]]] = []
    said: list[str] = []

    def count(model: nn.Module, input: Any, **options: Any) -> Profile:
        passes.append((model, input, options))
        return profiler.profile(model, input, **options)

    model = nn.Linear(64, 64)
    predicted = predict(count, model, device=_calibration(), dtype="bf16",
                        input_size=(64, 64), log=said.append)
    # one pass, on a bf16 copy on the meta device, the input made from input_size there
    [(copy, given, options)] = passes
    assert copy is not model and copy.weight.device.type == "meta"
    assert copy.weight.dtype == torch.bfloat16
    assert given.device.type == "meta" and given.shape == (64, 64)
    assert given.dtype == torch.bfloat16
    assert [type(lst) for lst in options["listeners"]] == [PredictionListener]
    assert options["eval"] is True and options["backward"] is False
    assert said == ["Predicting Linear on H100 SXM"]
    # the chain of test_a_linear_layer_predicted_by_hand: host 13 * 0.95 = 12.35 us, then the
    # 3 us GEMM 2 us after its launch -> 17.35 us
    assert predicted.predicted_latency_ms == pytest.approx(0.01735, rel=1e-3)
    assert model.weight.device.type == "cpu"


def test_input_and_input_size_are_not_both_taken() -> None:
    with pytest.raises(ValueError, match="pass input or input_size, not both"):
        predict(Profiler().profile, nn.Linear(4, 4), torch.randn(2, 4), _calibration(),
                input_size=(2, 4))


class ReadsItsData(nn.Module):
    """Tests its input's values, as a padding-mask check does: the meta device has none."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.linear(x)
        return out if bool((x > -100).all()) else out * 2


def test_a_model_that_reads_its_data_is_counted_on_a_cast_copy_where_it_is() -> None:
    profiler = Profiler()
    passes: list[tuple[nn.Module, Any]] = []

    def count(model: nn.Module, input: Any, **options: Any) -> Profile:
        passes.append((model, input))
        return profiler.profile(model, input, **options)

    model = ReadsItsData()
    before = {name: value.clone() for name, value in model.state_dict().items()}
    x = torch.randn(2, 4)
    predicted = predict(count, model, x, device=_calibration(), dtype="bf16")
    # the meta pass, then one on a bf16 copy on the CPU with the real input
    (meta, _), (copy, given) = passes
    assert meta.linear.weight.device.type == "meta"
    assert copy is not model and copy.linear.weight.device.type == "cpu"
    assert copy.linear.weight.dtype == torch.bfloat16 and given.dtype == torch.bfloat16
    assert torch.equal(copy.linear.weight.float(), model.linear.weight.to(torch.bfloat16).float())
    # the same counts as the model profiled as it is: 2 rows x 4 inputs x 3 outputs = 24 MACs
    assert predicted.total_macs == 24 == profiler.profile(model, x).total_macs
    assert predicted.predicted_latency_ms is not None and predicted.predicted_latency_ms > 0
    assert any("counted on a copy of the model on its own device" in note
               and "meta tensors" in note for note in predicted.prediction_notes)
    # the user's model is as it was: fp32, on the CPU, the same values, no gradients
    assert model.linear.weight.dtype == torch.float32 and model.linear.weight.grad is None
    assert all(torch.equal(before[name], value) for name, value in model.state_dict().items())


def test_a_model_error_is_not_retried_off_the_meta_device() -> None:
    profiler = Profiler()
    passes: list[nn.Module] = []

    def count(model: nn.Module, input: Any, **options: Any) -> Profile:
        passes.append(model)
        return profiler.profile(model, input, **options)

    class Fails(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("bad input for this model")

    with pytest.raises(ProfilingError, match="bad input for this model"):
        predict(count, Fails(), torch.ones(2), device=_calibration())
    assert len(passes) == 1


def test_an_input_without_values_is_not_run_off_the_meta_device() -> None:
    # a meta input (a sweep's resized batch) has no values for a real pass either: the meta
    # device's own error is raised, naming the module
    with pytest.raises(ProfilingError, match=r"module '__root__' \(ReadsItsData\).*meta tensors"):
        predict(Profiler().profile, ReadsItsData(), torch.empty(2, 4, device="meta"),
                device=_calibration())


def test_a_prediction_under_inference_mode_prices_the_operators_a_gpu_runs() -> None:
    # under torch.inference_mode the dispatch mode sees aten.linear whole, where a GPU runs
    # the addmm it decomposes into: the pass runs outside it, so the chain of
    # test_a_linear_layer_predicted_by_hand holds inside it too: host 13 * 0.95 = 12.35 us,
    # the 3 us GEMM from 12.35 + 2 us -> 17.35 us
    with torch.inference_mode():
        predicted = Profiler().predict(nn.Linear(64, 64), torch.randn(64, 64),
                                       device=_calibration(), dtype="bf16")
        assert torch.is_inference_mode_enabled()  # the caller's mode is left as it was
    assert predicted.predicted_host_ms == pytest.approx(0.01235)
    assert predicted.predicted_device_ms == pytest.approx(0.003, rel=1e-3)
    assert predicted.predicted_latency_ms == pytest.approx(0.01735, rel=1e-3)
    assert not any("device time is unknown" in note for note in predicted.prediction_notes)


def test_measured_of_another_kind_is_refused_by_name_before_any_pass() -> None:
    passes: list[nn.Module] = []

    def count(model: nn.Module, input: Any, **options: Any) -> Profile:
        passes.append(model)
        return Profiler().profile(model, input, **options)

    with pytest.raises(TypeError, match=r"measured must be a profile of time_modules.*got str"):
        predict(count, nn.Linear(4, 4), torch.randn(2, 4), _calibration(),
                measured="timing.json", measured_on="H100 SXM")  # type: ignore[arg-type]
    # a profile that names no GPU is refused before the pass too
    with pytest.raises(ValueError, match="measured_on: the measured profile does not name"):
        predict(count, nn.Linear(4, 4), torch.randn(2, 4), _calibration(),
                measured=Profiler().profile(nn.Linear(4, 4), torch.randn(2, 4)))
    assert passes == []


def test_a_quantized_model_is_told_to_predict_the_float_model() -> None:
    import warnings

    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.ao.quantization's notice
        quantized = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
    with pytest.raises(ProfilingError) as raised:
        Profiler().predict(quantized, torch.randn(2, 8), device="H200")
    message = str(raised.value)
    # it read torch's "We could not find the fake impl for this operator ... import the
    # 'caffe2.torch.fb...' Python module"
    assert message.startswith(
        "module '0' (torch.ao.nn.quantized.dynamic.modules.linear.Linear) runs the quantized "
        "kernel quantized::linear_dynamic: predict() runs the model on the meta device, and "
        "quantized kernels have no meta implementation. Predict the float model instead")
    assert "caffe2" not in message and raised.value.path == "0"
    assert isinstance(raised.value.__cause__, ProfilingError)  # the pass's own, kept
