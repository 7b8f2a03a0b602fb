"""``Profile.merge`` refuses the result of a pass over another input: a timing and a memory
report keep the shapes of the model's input in their facts (and in their JSON), as a
counting pass keeps them in its root call's ``input_shapes``."""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler, Profile
from moduleprofiler.errors import InputMismatchError
from moduleprofiler.inputs import input_shapes_of
from moduleprofiler.memory.report import MemoryReport
from moduleprofiler.timing import TimingOptions
from moduleprofiler.timing.latency import LatencyResult

FAST = {"num_iters": 3, "drop_first": 0, "max_seconds": 0.5}


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU())


def _quiet_timing(model: nn.Module, x: torch.Tensor) -> Profile:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the hooks' share of a tiny model's times
        return ModuleProfiler().time_modules(model, x, **FAST)


def test_input_shapes_of_has_the_root_calls_form() -> None:
    model = nn.Bilinear(3, 5, 2)
    x, y = torch.randn(2, 3), torch.randn(2, 5, dtype=torch.float64).float()
    root = ModuleProfiler().profile(model, (x, y)).roots[0]
    assert input_shapes_of((x, y)) == (root.input_shapes, root.input_dtypes) \
        == (((2, 3), (2, 5)), ("float32",))
    # a dict is the model's keyword arguments: one dict after the (no) positional ones
    ids = torch.zeros(1, 7, dtype=torch.long)
    assert input_shapes_of({"ids": ids, "scale": 2.0}) == (({"ids": (1, 7), "scale": None},),
                                                           ("int64",))
    # pred_fn calls the model as it likes: unknown, not guessed
    assert input_shapes_of(x, pred_fn=lambda x: model(x, x)) == (None, ())


def test_timings_of_two_batch_sizes_do_not_merge() -> None:
    model = _model()
    one = _quiet_timing(model, torch.randn(1, 4))
    many = _quiet_timing(model, torch.randn(64, 4))
    assert one.facts is not None and one.facts.input_shapes == ((1, 4),)
    assert one.facts.input_dtypes == ("float32",)
    with pytest.raises(InputMismatchError, match=r"the model took 1x4 \(float32\) here and "
                                                 r"64x4 \(float32\) there") as caught:
        one.merge(many)
    assert (caught.value.mine, caught.value.theirs) == (((1, 4),), ((64, 4),))
    # a counted profile of one batch size and a timing of another
    with pytest.raises(InputMismatchError, match=r"took 64x4 \(float32\) here and 1x4"):
        ModuleProfiler().profile(model, torch.randn(64, 4)).merge(one)
    # the same input: joined, its times beside the counts
    merged = ModuleProfiler().profile(model, torch.randn(1, 4)).merge(one)
    assert merged.to_df("module").set_index("module").loc["0", "time_median_ms"] > 0


def test_training_timing_and_memory_report_keep_the_input() -> None:
    model = _model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        steps = ModuleProfiler().train_step_times(model, torch.randn(2, 4), **FAST)
    assert steps.facts is not None and steps.facts.input_shapes == ((2, 4),)
    memory = ModuleProfiler().measure_memory(model, torch.randn(16, 4))
    assert memory.model_input == (((16, 4),), ("float32",))
    with pytest.raises(InputMismatchError, match=r"took 2x4 \(float32\) here and 16x4"):
        steps.merge(memory)
    with pytest.raises(InputMismatchError, match=r"took 16x4 \(float32\) here and 2x4"):
        memory.merge(steps)


def test_the_input_survives_json_and_old_files_still_merge() -> None:
    model = _model()
    timing = _quiet_timing(model, [torch.randn(3, 4)])  # a list: spread, one argument
    back = Profile.from_json(timing.to_json())
    assert back.facts == timing.facts and back.model_input == (((3, 4),), ("float32",))
    memory = ModuleProfiler().measure_memory(model, torch.randn(3, 4))
    loaded = Profile.from_json(memory.to_json())
    assert isinstance(loaded, MemoryReport)
    assert loaded.model_input == memory.model_input == (((3, 4),), ("float32",))
    # a file written before passes kept their input: read, and joined as before
    document = json.loads(timing.to_json() or "")
    del document["facts"]["input_shapes"], document["facts"]["input_dtypes"]
    old = Profile.from_json(json.dumps(document))
    assert old.facts is not None and old.model_input is None
    counted = ModuleProfiler().profile(model, torch.randn(64, 4))
    assert "time_median_ms" in counted.merge(old).to_df("module")
    document = json.loads(memory.to_json() or "")
    del document["result_fields"]["input_shapes"], document["result_fields"]["input_dtypes"]
    assert Profile.from_json(json.dumps(document)).model_input is None


def test_a_pass_through_pred_fn_is_not_checked() -> None:
    model = _model()
    # pred_fn gives the model its arguments: the pass cannot say what they were
    memory = ModuleProfiler().measure_memory(model, torch.randn(5, 4),
                                             pred_fn=lambda x: model(x[:2]))
    assert memory.model_input is None
    merged = ModuleProfiler().profile(model, torch.randn(2, 4)).merge(memory)
    # the ReLU's output: 2 x 8 float32 values = 64 bytes
    assert merged.to_df("module").set_index("module").loc["1", "output_bytes"] == 64


def test_summary_refuses_a_latency_or_memory_of_another_input() -> None:
    model = _model()
    profiler = ModuleProfiler()
    counted = profiler.profile(model, torch.randn(1, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        latency = profiler.benchmark(model, torch.randn(64, 4), TimingOptions(**FAST))
    assert (latency.input_shapes, latency.input_dtypes) == (((64, 4),), ("float32",))
    # the throughput would be 64 items per call beside the FLOPs of 1
    with pytest.raises(InputMismatchError, match=r"latency: its pass ran on another input: "
                                                 r"the model took 1x4 \(float32\) here and "
                                                 r"64x4 \(float32\) there"):
        counted.summary(latency=latency)
    memory = profiler.measure_memory(model, torch.randn(64, 4))
    with pytest.raises(InputMismatchError, match=r"memory: its pass ran on another input"):
        counted.summary(memory=memory)
    # the same input, and a plain number of ms (no input known): one row as before
    row = profiler.profile(model, torch.randn(64, 4)).summary(memory, latency)
    assert row.loc[0, "throughput"] == latency.throughput
    assert counted.summary(latency=2.0).loc[0, "latency_ms"] == 2.0
    back = LatencyResult.from_json(latency.to_json() or "")
    assert (back.input_shapes, back.input_dtypes) == (((64, 4),), ("float32",))


@pytest.mark.parametrize(("latency", "message"), [
    (-1, "must be greater than 0, got -1"), (0, "must be greater than 0, got 0"),
    (float("nan"), "must be a finite number, got nan"),
    (float("inf"), "must be a finite number, got inf"),
])
def test_summary_refuses_a_latency_that_is_no_time(latency: float, message: str) -> None:
    # each was shown as the model's latency_ms (-1.0, 0.0, nan, inf)
    counted = ModuleProfiler().profile(_model(), torch.randn(1, 4))
    with pytest.raises(ValueError, match=r"latency \(a number of ms\) " + message):
        counted.summary(latency=latency)
