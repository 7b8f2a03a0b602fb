"""The clock is a listener on the pass runner: many iterations on one set of hooks, per-call
columns in any profile, per-call join with ``Profile.with_timing``."""

from __future__ import annotations

import torch
from torch import nn

from moduleprofiler import ModuleProfiler
from moduleprofiler.timing import ClockListener, time_modules, train_step_times
from moduleprofiler.timing.clocks.stamps import CpuStamps
from tests.timing.helpers import Spin, no_hooks_left


def reused() -> nn.Module:
    shared = Spin(100, 300)
    return nn.Sequential(Spin(50, 200, param=True), shared, nn.ReLU(), shared)


def test_hooks_stay_installed_across_iterations_and_each_starts_afresh():
    model = reused()
    clock = ClockListener.on(model, CpuStamps())
    raws = []
    with clock.installed():
        for _ in range(3):
            clock.begin()
            clock.run(lambda: model(torch.zeros(4)))
            raws.append(clock.snapshot())
        assert not no_hooks_left(model)
    assert no_hooks_left(model)
    for raw in raws:  # every iteration numbers its calls from 0: root, 0, 1, 2, 1 again
        assert [c.index for c in raw.calls] == [0, 1, 2, 3, 4]
        assert [(c.path, c.call_number) for c in raw.calls][-1] == ("1", 1)
    times = clock.resolve(raws[-1])
    assert times.calls.tolist() == [1, 1, 2, 1]  # named_modules: root, 0, 1 (shared), 2
    # a shared spin call lasts 100 us (its module's time, both calls, is totalled from the
    # records: test_profile.py's test_the_statistics_table_and_the_module_frame_share...)
    assert times.call_fwd_inclusive[4] >= 0.97 * 100e3


def test_the_clock_writes_columns_into_any_profile():
    model = reused()
    x = torch.zeros(4, requires_grad=True)
    profile = ModuleProfiler().profile(model, x, backward=True, operators=False,
                                       listeners=[ClockListener(CpuStamps(), backward=True)])
    records = {(r.path, r.call_number): r.metrics for r in profile.records}
    assert set(records[("1", 1)]) >= {"forward_ms", "self_forward_ms", "backward_ms",
                                      "self_backward_ms"}
    root = records[("", 0)]
    # the root's forward holds its children's (the counting listener runs outside the stamps)
    assert root["forward_ms"] >= 0.97 * (0.05 + 2 * 0.1)
    assert root["backward_ms"] >= 0.97 * (0.2 + 2 * 0.3)
    assert records[("1", 0)]["backward_ms"] >= 0.97 * 0.3  # each call of the shared module
    assert records[("1", 1)]["backward_ms"] >= 0.97 * 0.3
    assert no_hooks_left(model)


def test_with_timing_joins_per_call_and_per_module():
    model = reused()
    x = torch.zeros(4)
    profile = ModuleProfiler().profile(model, x)
    timing = time_modules(model, x, num_iters=6, drop_first=1, warmup_seconds=0)
    combined = profile.with_timing(timing)
    by_call = {(r.path, r.call_number): r.metrics for r in combined.records}
    assert by_call[("1", 0)]["forward_ms"] >= 0.97 * 0.1
    assert by_call[("1", 1)]["self_forward_ms"] >= 0.97 * 0.1
    modules = combined.to_df("module").set_index("module")
    assert modules.loc["1", "time_median_ms"] >= 0.97 * 0.2  # both calls
    assert modules.loc["__root__", "self_time_median_ms"] is not None
    assert combined.to_df("module")["time_median_ms"].notna().all()
    # a training timing adds the backward columns, per call and per module
    training = train_step_times(model, torch.zeros(4), num_iters=4, drop_first=1,
                                measure_overhead=False)
    trained = profile.with_timing(training)
    assert {r.path: r.metrics for r in trained.records}["0"]["backward_ms"] >= 0.97 * 0.2
    assert trained.to_df("module").set_index("module").loc[
        "1", "backward_time_median_ms"] >= 0.97 * 0.6
