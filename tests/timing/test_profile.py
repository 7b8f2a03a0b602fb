"""Timing and memory results are profiles: one record per call with registered columns,
joined to a counted profile by ``Profile.merge``."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler, Profile
from moduleprofiler.efficiency import TrafficListener
from moduleprofiler.errors import InputMismatchError
from moduleprofiler.export.columns import column_spec, quantity
from moduleprofiler.records import ProfileData
from moduleprofiler.timing import TimingWarning

FAST = {"num_iters": 4, "drop_first": 1, "warmup_seconds": 0.0, "measure_overhead": False}


def _shared() -> tuple[nn.Module, torch.Tensor]:
    """A Linear(4, 4) called twice around a ReLU: four calls in all."""
    linear = nn.Linear(4, 4)
    return nn.Sequential(linear, nn.ReLU(), linear), torch.randn(3, 4)


def test_time_modules_returns_a_profile_of_its_calls() -> None:
    model, x = _shared()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        timing = ModuleProfiler().time_modules(model, x, **FAST)
    assert isinstance(timing, Profile)
    # named_modules() drops the second registration of the shared Linear: root, "0", "1";
    # the calls: the root, then "0" (its first call), "1", "0" again (its second call)
    assert [(r.path, r.call_number, r.parent, r.depth) for r in timing.records] == [
        ("", 0, None, 0), ("0", 0, 0, 1), ("1", 0, 0, 1), ("0", 1, 0, 1)]
    for record in timing.records:
        # the call's medians, and its samples the per-module medians are computed from
        assert set(record.metrics) == {"forward_ms", "self_forward_ms", "forward_samples_ms",
                                       "self_forward_samples_ms", "forward_error_samples_ms",
                                       "self_forward_error_samples_ms"}
        assert len(record.metrics["forward_samples_ms"]) == 3  # 4 - 1 kept iterations
        assert record.metrics["forward_ms"] >= record.metrics["self_forward_ms"] >= 0
        assert record.self_ops is None and record.ops_source == "unknown"  # timing counts nothing
    # 4 x 4 weights + 4 biases = 20 parameters, the shared Linear's once
    assert timing.total_params == 20 and timing.records[1].params == 20
    # per module: the median over the 4 - 1 = 3 kept iterations of both calls summed (the
    # middle one of the three sums), not the sum of the two calls' medians
    both = timing.samples("0")
    assert both.size == 3
    frame = timing.to_df("module").set_index("module")
    assert frame.loc["0", "time_median_ms"] == pytest.approx(sorted(both)[1])
    assert timing.module_columns()["0"]["time_median_ms"] == pytest.approx(sorted(both)[1])
    assert frame.loc["0", "calls"] == 2 and frame.loc["0", "time_median_ms"] > 0
    # the statistics are columns of the module frame; the old table is deprecated
    with pytest.warns(DeprecationWarning, match="to_df"):
        assert timing.stats_frame().equals(timing.to_df("module"))
    # to_df() means what it means on every profile: one row per call
    assert timing.to_df().equals(timing.to_df("call")) and "call" in timing.to_df()


def test_a_forward_timing_reads_back_equal_from_its_json() -> None:
    model, x = _shared()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        timing = ModuleProfiler().time_modules(model, x, **FAST)
    # a forward pass calibrates no backward hooks: those two costs are NaN in its facts, and
    # a NaN read back must not make the document unequal to the result it was written from
    assert math.isnan(timing.facts.calibration["grad_per_call_ns"])
    again = Profile.from_json(timing.to_json())
    assert again == timing and type(again) is type(timing)


def test_a_timing_on_a_machine_with_gpus_reads_back_equal_from_its_json(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the facts name the machine's GPUs: a list there read back from JSON as a tuple, and every
    # result of a machine with a GPU was unequal to itself read back
    from moduleprofiler.timing import environment

    monkeypatch.setattr(environment, "cuda_available", lambda: True)
    monkeypatch.setattr(environment, "device_names", lambda: ["NVIDIA H200"])
    model, x = _shared()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        timing = ModuleProfiler().time_modules(model, x, **FAST)
    assert timing.facts.hardware["gpu"] == ("NVIDIA H200",)
    assert Profile.from_json(timing.to_json()) == timing


class _SharedAndRepeated(nn.Module):
    """One Linear at two places (``shared`` inside ``a`` and ``b``), a Tanh called twice, a
    Linear never called."""

    def __init__(self) -> None:
        super().__init__()
        self.shared = nn.Linear(4, 4)
        self.a = nn.Sequential(self.shared, nn.ReLU())
        self.b = nn.Sequential(nn.Linear(4, 4), self.shared)
        self.rep = nn.Tanh()
        self.unused = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rep(self.b(self.rep(self.a(x))))


def test_every_statistic_of_the_module_frame_is_of_the_modules_per_iteration_totals() -> None:
    # each statistic column is computed from the module's calls' samples totalled per
    # iteration (samples(path)): the shared Linear's two calls (one in "a", one in "b") and
    # the Tanh's two calls are summed before the median and the percentiles, so every
    # module's statistics are exactly those of its totals
    model, x = _SharedAndRepeated(), torch.randn(3, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        forward = ModuleProfiler().time_modules(model, x, **FAST)
        training = ModuleProfiler().train_step_times(model, x, num_iters=4, drop_first=1)
    for timing, phases in ((forward, ("",)), (training, ("", "backward_"))):
        modules = timing.to_df("module").set_index("module")
        assert modules.loc["shared", "calls"] == 2 and modules.loc["rep", "calls"] == 2
        for info, module in zip(timing.modules, modules.index):
            for prefix in phases:
                phase = "backward" if prefix else "forward"
                for own in ("", "self_"):
                    name = f"{own}{prefix}time"
                    if module == "unused":  # never called: no statistic at all
                        assert pd.isna(modules.loc[module, f"{name}_median_ms"])
                        assert pd.isna(modules.loc[module, f"{name}_p95_ms"])
                        continue
                    totals = timing.samples(info.path, exclusive=bool(own), phase=phase)
                    assert totals.size == 3  # 4 - 1 kept iterations
                    for statistic, q in (("median", 50), ("p25", 25), ("p95", 95)):
                        assert modules.loc[module, f"{name}_{statistic}_ms"] == \
                            np.percentile(totals, q), (module, name, statistic)
                    assert modules.loc[module, f"{name}_max_ms"] == totals.max()


def test_timing_columns_declare_what_they_need_and_their_per_module_twin() -> None:
    assert column_spec("forward_ms").per_module == "time_median_ms"
    assert column_spec("self_backward_ms").per_module == "self_backward_time_median_ms"
    assert "time_modules()" in column_spec("time_median_ms").needs
    assert "measure_memory()" in column_spec("saved_bytes").needs
    with pytest.raises(ValueError, match=r"needs the column 'time_median_ms'.*time_modules"):
        quantity("time", ["self_ops", "ops"])
    # the kernel clock's device time is preferred where a profile has it
    assert quantity("time", ["time_median_ms", "device_ms"]).inclusive == "device_ms"


def test_merge_joins_times_to_counts_and_the_old_joins_warn() -> None:
    model, x = _shared()
    profiler = ModuleProfiler()
    counted = profiler.profile(model, x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        timing = profiler.time_modules(model, x, **FAST)
    merged = counted.merge(timing)
    # the counts stay: the first Linear call, 3 rows x 4 outputs x (2 x 4 - 1 + 1) = 96 ops
    assert merged.records[1].self_ops == counted.records[1].self_ops == 96
    assert merged.records[3].metrics["forward_ms"] == timing.records[3].metrics["forward_ms"]
    modules = merged.to_df("module").set_index("module")
    timed = timing.to_df("module").set_index("module")
    for name in ("time_median_ms", "self_time_median_ms"):
        assert modules.loc["0", name] == timed.loc["0", name]
    with pytest.warns(DeprecationWarning, match=r"profile\.merge\(timing\)"):
        old = counted.with_timing(timing)
    assert old.records == merged.records and old.module_metrics == merged.module_metrics


class _Branch(nn.Module):
    """``head``, then ``extra`` only while ``take_extra`` is set (set by the test)."""

    def __init__(self) -> None:
        super().__init__()
        self.head, self.extra = nn.Linear(4, 4), nn.ReLU()
        self.take_extra = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.head(x)
        return self.extra(x) if self.take_extra else x


def test_merge_names_the_calls_this_pass_did_not_make() -> None:
    model, x = _Branch(), torch.randn(3, 4)
    profiler = ModuleProfiler()
    counted = profiler.profile(model, x)  # the root and head: extra not taken
    model.take_extra = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        timing = profiler.time_modules(model, x, **FAST)
    assert [r.path for r in timing.records] == ["", "head", "extra"]
    with pytest.warns(UserWarning, match=r"merge: 1 call of the other pass was not made in "
                                         r"this one.*'extra' call 1"):
        merged = counted.merge(timing)
    assert [r.path for r in merged.records] == ["", "head"]
    assert "forward_ms" in merged.records[1].metrics  # head's call is joined
    model.take_extra = False
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same calls: nothing to say
        counted.merge(profiler.profile(model, x))


def test_merge_names_modules_that_are_of_another_type_there() -> None:
    x = torch.randn(3, 4)
    profiler = ModuleProfiler()
    counted = profiler.profile(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), x)
    other = profiler.profile(nn.Sequential(nn.Linear(4, 4), nn.Tanh()), x)
    # the same paths and calls, another model: the Tanh's columns would show as the ReLU's
    with pytest.warns(UserWarning, match=r"merge: the other profile is of another model: "
                                         r"'1' is a ReLU here and a Tanh there"):
        counted.merge(other)


def test_merge_names_another_input() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
    profiler = ModuleProfiler()
    listeners = [TrafficListener()]
    counted = profiler.profile(model, torch.randn(2, 4))
    # bytes moved with 16 rows beside ops of 2: the Linear's 128 ops over 928 bytes
    # (4 x (8 + 64 + 32) read, 4 x 16 x 8 written), not over its 256, 3.6x too low an intensity
    other = profiler.profile(model, torch.randn(16, 4), listeners=listeners)
    with pytest.raises(InputMismatchError, match=r"merge: the other pass ran on another "
                                                  r"input: the model took 2x4 \(float32\) "
                                                  r"here and 16x4 \(float32\) there"):
        counted.merge(other)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same input: nothing to say
        counted.merge(profiler.profile(model, torch.randn(2, 4), listeners=listeners))


def test_measure_memory_returns_profile_data_with_its_columns() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
    x = torch.randn(3, 4)
    report = ModuleProfiler().measure_memory(model, x, train=True)
    assert isinstance(report, ProfileData)
    relu = report.records[2]
    assert (relu.path, relu.call_number) == ("1", 0)
    # ReLU saves its 3 x 8 float32 output for backward: 3 * 8 * 4 = 96 bytes
    assert relu.metrics["self_saved_bytes"] == relu.metrics["saved_bytes"] == 96
    # the training maxima come before the inference pass's, and the parameters saved come
    # last: a narrow view hides from the end
    assert list(relu.metrics) == ["saved_bytes", "self_saved_bytes", "train_max_live_bytes",
                                  "backward_max_live_bytes", "max_live_bytes",
                                  "self_saved_param_bytes"]
    merged = ModuleProfiler().profile(model, x).merge(report)
    assert merged.records[2].metrics["saved_bytes"] == 96
    assert merged.to_df("module").set_index("module").loc["1", "saved_bytes"] == 96
    (relu_call,) = report.calls("1")
    assert relu_call.metrics["saved_bytes"] == 96
    assert report.peak_bytes >= report.inference.peak_bytes


def test_a_training_timing_counts_no_backward_and_keeps_its_samples_apart() -> None:
    model, x = _shared()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TimingWarning)
        timing = ModuleProfiler().train_step_times(model, x, **FAST)
    # nothing was counted: the profile's backward flag is False and its backward totals
    # unknown (the samples in that field made them read 0)
    assert not timing.backward and timing.backward == False  # noqa: E712
    assert timing.total_backward_ops is None and timing.backward_complete is None
    assert json.loads(timing.to_json())["backward"] == 0
    # 4 steps of each kind, 1 dropped: 3 kept
    assert timing.samples("", phase="backward").size == 3


def test_a_timing_profile_shows_no_count_totals_it_never_counted() -> None:
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
    timing = ModuleProfiler().time_modules(model, torch.randn(2, 8), num_iters=12,
                                           drop_first=2, measure_overhead=False)
    text = timing.tree().to_text()
    # params 8 * 8 + 8 = 72 are facts of the model; ops were not counted: no "ops 0"
    assert "total: params 72\n" in text
    assert "ops 0" not in text and "MACs 0" not in text
    assert "this pass counts no ops" in text
    counted = ModuleProfiler().profile(model, torch.randn(2, 8)).merge(timing)
    # 2 rows * 8 * (2 * 8 - 1) + 2 * 8 bias = 256 ops; relu 16 compares: 272
    assert "ops 272" in counted.tree().to_text()


def test_a_timing_results_summary_holds_its_hook_free_latency() -> None:
    import statistics

    from moduleprofiler import Profiler

    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        timing = Profiler().time_modules(model, torch.randn(2, 8))
    row = timing.summary().iloc[0]
    # the median of the pass's hook-free iterations (it read NaN, as if nothing was timed)
    assert timing.facts is not None and timing.facts.hook_free_ms
    assert row["latency_ms"] == statistics.median(timing.facts.hook_free_ms) > 0
    # a latency given wins; a counting pass has none of its own
    assert timing.summary(latency=2.5).iloc[0]["latency_ms"] == 2.5
    assert math.isnan(Profiler().profile(model, torch.randn(2, 8)).summary().iloc[0][
        "latency_ms"])


def test_a_timings_dict_names_the_hook_free_regime_time_bound() -> None:
    # under the kernel clock to_dict() wrote the hook-free regime (host or device) as "bound",
    # the name of the column that says whether a call's own work is compute- or
    # memory-bound; the regime is the model row's time_bound. A trace whose device is busy
    # 0.9 ms of a 1.0 ms iteration (0.9 >= 0.8) is device-bound.
    import dataclasses

    from moduleprofiler.facts import HookFreeTrace

    model, x = _shared()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        timing = ModuleProfiler().time_modules(model, x, **FAST)
    trace = HookFreeTrace(host_ms=0.5, device_ms=0.9, launches=10, latency_ms=1.0)
    traced = dataclasses.replace(timing, facts=dataclasses.replace(timing.facts,
                                                                    hook_free=trace))
    data = traced.to_dict()
    assert data["time_bound"] == "device" and "bound" not in data
    assert data["device_busy_share"] == pytest.approx(0.9) and data["launches_per_iter"] == 10
    with pytest.warns(DeprecationWarning, match="'bound'.*0\\.3\\.0.*'time_bound'"):
        assert data["bound"] == "device"
