"""How a prediction runs: one counted pass on a meta copy of the model, with the prediction
listener on it, whichever profiler's ``profile`` counts it."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from moduleprofiler import Profiler
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
    # the chain of test_a_linear_layer_predicted_by_hand: host 13 * 0.72 = 9.36 us, then the
    # 3 us GEMM 2 us after its launch -> 14.36 us
    assert predicted.predicted_latency_ms == pytest.approx(0.01436, rel=1e-3)
    assert model.weight.device.type == "cpu"


def test_input_and_input_size_are_not_both_taken() -> None:
    with pytest.raises(ValueError, match="pass input or input_size, not both"):
        predict(Profiler().profile, nn.Linear(4, 4), torch.randn(2, 4), _calibration(),
                input_size=(2, 4))
