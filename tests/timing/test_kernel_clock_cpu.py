"""The kernel clock end to end on the CPU: the passes run it through the clock protocol like any
clock, with its profiler session replaced by one that reads the real host ranges and makes up
one 1 µs "kernel" launched at the start of each module call's range and of each autograd
node's evaluation. Ranges, booking, readings and the result's columns are the real ones."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from torch import nn

from moduleprofiler.timing import ModuleTiming, time_modules, train_step_times
from moduleprofiler.timing.booking import Activity, Launch
from moduleprofiler.timing.clocks.kernels import KernelClock
from moduleprofiler.timing.device_trace import TraceRecords, records_of
from tests.timing.helpers import Spin

KERNEL_NS = 1000

pytestmark = pytest.mark.filterwarnings("ignore::moduleprofiler.timing.clock.TimingWarning")


@contextmanager
def one_kernel_per_range(device: torch.device) -> Iterator[TraceRecords]:
    """A CPU profiler session whose records get one made-up kernel per forward call range
    (``<iteration>:f<call>``), per range of a checkpoint's rerun (``<iteration>:r<call>``) and
    per autograd node evaluation (``seq:<n>``)."""
    records = TraceRecords()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as session:
        yield records
    real = records_of(session.profiler.kineto_results.events())  # type: ignore[union-attr]
    records.ranges = real.ranges
    for n, host_range in enumerate(real.ranges):
        if ":f" in host_range.label or ":r" in host_range.label \
                or host_range.label.startswith("seq:"):
            records.launches.append(Launch(n, host_range.thread, host_range.start + 1))
            records.activities.append(Activity(n, host_range.start + 1,
                                               host_range.start + 1 + KERNEL_NS))


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))


def test_forward_device_times_are_the_kernels_each_call_launched() -> None:
    clock = KernelClock(torch.device("cpu"), trace=one_kernel_per_range)
    timing = time_modules(_model(), torch.randn(4, 8), clock=clock, num_iters=6, drop_first=1,
                          progress=False)
    assert timing.clock == "cuda-kernels"
    modules = timing.to_df("module").set_index("module")
    # each call launched one 1 us kernel: its own device time; the root's holds its three
    # children's too: 4 us, 4 launches
    for path in ("0", "1", "2"):
        assert modules.loc[path, "device_ms"] == KERNEL_NS / 1e6
    assert modules.loc["__root__", "self_device_ms"] == KERNEL_NS / 1e6
    assert modules.loc["__root__", "device_ms"] == 4 * KERNEL_NS / 1e6
    assert modules.loc["__root__", "device_launches"] == 4
    # the host's times beside them, from the CPU's clock: positive, and larger than the
    # made-up microsecond of the model's whole call
    assert modules.loc["__root__", "host_ms"] > 0


def test_backward_device_times_go_to_the_call_that_created_each_node() -> None:
    clock = KernelClock(torch.device("cpu"), backward=True, trace=one_kernel_per_range)
    timing = train_step_times(_model(), torch.randn(4, 8), clock=clock, num_iters=6,
                              drop_first=1, progress=False)
    assert timing.clock == "cuda-kernels"
    modules = timing.to_df("module").set_index("module")
    # one kernel per node a call created: a Linear makes two (its weight's transpose and the
    # addmm), the ReLU one; the root made none of its own: 2 + 1 + 2 = 5 us inclusive
    assert modules.loc["0", "backward_device_ms"] == 2 * KERNEL_NS / 1e6
    assert modules.loc["1", "backward_device_ms"] == KERNEL_NS / 1e6
    assert modules.loc["2", "backward_device_ms"] == 2 * KERNEL_NS / 1e6
    assert modules.loc["__root__", "backward_device_ms"] == 5 * KERNEL_NS / 1e6
    assert modules.loc["__root__", "device_ms"] == 4 * KERNEL_NS / 1e6


class _Checkpointed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.utils.checkpoint.checkpoint(self.a, x, use_reentrant=True))


def test_a_reentrant_checkpoints_rerun_and_rebuilt_nodes_are_the_repeated_calls() -> None:
    clock = KernelClock(torch.device("cpu"), backward=True, trace=one_kernel_per_range)
    timing = train_step_times(_Checkpointed(), torch.randn(4, 8, requires_grad=True),
                              clock=clock, num_iters=6, drop_first=1, progress=False)
    modules = timing.to_df("module").set_index("module")
    assert list(modules.index) == ["__root__", "a", "b"]  # the rerun is no new call
    # a: its rerun's range (one kernel) and the two nodes its rerun rebuilt (AddmmBackward0
    # and TBackward0), each in a range of a's: 3 us. b: its two nodes, by sequence number.
    # The root: the checkpoint's own node, made in its call: 1 us, 6 us with its children
    assert modules.loc["a", "backward_device_ms"] == 3 * KERNEL_NS / 1e6
    assert modules.loc["b", "backward_device_ms"] == 2 * KERNEL_NS / 1e6
    assert modules.loc["__root__", "self_backward_device_ms"] == KERNEL_NS / 1e6
    assert modules.loc["__root__", "backward_device_ms"] == 6 * KERNEL_NS / 1e6


def test_the_hooked_and_traced_kinds_share_the_passs_one_runner() -> None:
    clock = KernelClock(torch.device("cpu"), trace=one_kernel_per_range)
    time_modules(_model(), torch.randn(4, 8), clock=clock, num_iters=4, drop_first=1,
                 progress=False)
    # the runner the kernel ranges ran on also holds the hooked iterations' stamping
    # listener: one runner, each kind of iteration telling its own listeners (a kernel
    # clock on a runner of its own held its ranges alone)
    runner = clock.ranges.runner
    assert runner is not None
    assert [type(listener).__name__ for listener in runner.listeners] == [
        "KernelRanges", "ClockListener"]


class _Sometimes(nn.Module):
    """Runs its child on every third forward only (data-dependent control flow)."""

    def __init__(self) -> None:
        super().__init__()
        self.rare = nn.ReLU()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.rare(x) if self.calls % 3 == 0 else x


def _adaptive(model: nn.Module, min_iters: int) -> ModuleTiming:
    """An adaptive run to its first check of a loose target, without a budget."""
    clock = KernelClock(torch.device("cpu"), trace=one_kernel_per_range)
    return time_modules(model, torch.randn(4, 8), clock=clock, min_iters=min_iters,
                        target_ci=1.0, max_seconds=None, progress=False)


def _flags(timing: ModuleTiming, column: str, paths: tuple[str, ...]) -> list[object]:
    modules = timing.to_df("module").set_index("module")
    return [modules.loc[path, column] for path in paths]


def test_a_normal_run_flags_no_device_time_though_most_iterations_are_untraced() -> None:
    timing = _adaptive(_model(), 40)
    # the traced block's own minimum beside min_iters = 40: a quarter, 10
    assert timing.timing.min_traced_samples == 10
    traced = len(timing.samples("0"))
    # only about a quarter of the kept iterations is traced, by design: fewer than min_iters
    # (a rule of "fewer than min_iters" flagged every row), at least the block's minimum
    assert 10 <= traced < 40 <= len(timing.timing.hooked_ms)
    paths = ("__root__", "0", "1", "2")
    assert _flags(timing, "device_low_confidence", paths) == [False] * 4
    assert _flags(timing, "self_device_low_confidence", paths) == [False] * 4


def test_a_module_traced_in_fewer_iterations_than_the_blocks_minimum_is_flagged() -> None:
    model = nn.Sequential(nn.Linear(8, 8), _Sometimes(), nn.Linear(8, 2))
    timing = _adaptive(model, 40)
    # the ReLU runs in every third forward: in about a third of the traced iterations, fewer
    # than the block's minimum of 10 (40 // 4); every other module in each of them
    assert 1 <= len(timing.samples("1.rare")) < 10 <= len(timing.samples("1"))
    flags = _flags(timing, "device_low_confidence", ("__root__", "0", "1", "1.rare", "2"))
    assert flags == [False, False, False, True, False]


def test_a_run_the_budget_cut_to_one_sample_flags_every_device_time() -> None:
    # 40 ms a forward and a 0.2 s budget: one round of one hooked, one hook-free and one
    # traced iteration; one traced sample, fewer than the block's minimum (10 // 4 = 2), so
    # no row says "low confidence: no"
    clock = KernelClock(torch.device("cpu"), trace=one_kernel_per_range)
    timing = time_modules(nn.Sequential(Spin(20_000), Spin(20_000)), torch.zeros(1),
                          clock=clock, max_seconds=0.2, target_ci=1e-9, warmup_seconds=0,
                          progress=False)
    assert timing.stop_reason == "max_seconds" and len(timing.samples("0")) == 1
    assert _flags(timing, "device_low_confidence", ("__root__", "0", "1")) == [True] * 3


def test_a_fixed_count_is_never_flagged() -> None:
    clock = KernelClock(torch.device("cpu"), trace=one_kernel_per_range)
    # 3 kept over 3 rounds of 1: 3 traced, the caller's own choice
    timing = time_modules(_model(), torch.randn(4, 8), clock=clock, num_iters=4,
                          drop_first=1, progress=False)
    assert timing.timing.min_traced_samples == 0
    assert _flags(timing, "device_low_confidence", ("__root__", "0")) == [False] * 2


def test_the_kernel_tree_keeps_the_device_flag_with_a_device_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    model = nn.Sequential(nn.Linear(8, 8), _Sometimes(), nn.Linear(8, 2))
    timing = _adaptive(model, 40)
    # at 60 columns the tree (module names, 21 wide), the self device share (13) and the
    # flag (21) with their gaps make 59: every other column goes first, the flag stays
    # while a device time of the module (the share of its self time) is shown
    monkeypatch.setenv("COLUMNS", "60")
    assert timing.report().splitlines()[0].split() == [
        "module", "self", "device", "%", "device", "low", "confidence"]
    # at 50 the share is the last column left: it sheds the flag (21 + 13 + 2 = 36), where
    # the flag used to be left alone, a flag on no time shown
    monkeypatch.setenv("COLUMNS", "50")
    report = timing.report()
    assert report.splitlines()[0].split() == ["module", "self", "device", "%"]
    assert "device low confidence" in " ".join(report.split())  # named among the hidden


def test_training_device_times_are_flagged_by_their_traced_samples(
        monkeypatch: pytest.MonkeyPatch) -> None:
    model = nn.Sequential(nn.Linear(8, 8), _Sometimes(), nn.Linear(8, 2))
    clock = KernelClock(torch.device("cpu"), backward=True, trace=one_kernel_per_range)
    timing = train_step_times(model, torch.randn(4, 8, requires_grad=True), clock=clock,
                              min_iters=40, target_ci=1.0, max_seconds=None, progress=False)
    # as in the forward run: the ReLU's backward nodes exist in a third of the traced steps
    flags = _flags(timing, "backward_device_low_confidence", ("__root__", "0", "1.rare"))
    assert flags == [False, False, True]
    monkeypatch.setenv("COLUMNS", "200")
    assert "backward device low confidence" in timing.report().splitlines()[0]


def test_a_document_that_does_not_say_the_traced_minimum_leaves_the_flag_unknown() -> None:
    import json

    timing = _adaptive(_model(), 40)
    document = json.loads(timing.to_json())
    assert document["facts"]["budget"].pop("min_traced") == 10  # a quarter of 40
    older = ModuleTiming.from_json(json.dumps(document))
    # written before the traced block had a minimum: unknown in every row, never "no" (a
    # column unknown in every row is left out of the frame)
    frame = older.to_df("module")
    assert "device_low_confidence" not in frame or frame["device_low_confidence"].isna().all()
    assert _flags(ModuleTiming.from_json(timing.to_json()), "device_low_confidence",
                  ("0",)) == [False]


@pytest.mark.parametrize("earlier_sessions", [0, 1])
def test_the_hook_free_latency_is_timed_before_the_first_kernel_record_session(
        monkeypatch: pytest.MonkeyPatch, earlier_sessions: int) -> None:
    from moduleprofiler.timing.clocks import kernels

    monkeypatch.setattr(kernels, "sessions_entered", lambda: earlier_sessions)
    clock = KernelClock(torch.device("cpu"), trace=one_kernel_per_range)
    timing = time_modules(_model(), torch.randn(4, 8), clock=clock, num_iters=6, drop_first=1,
                          progress=False)
    hook_free = timing.facts.hook_free
    assert hook_free is not None and hook_free.unprofiled is (earlier_sessions == 0)
    if earlier_sessions:
        # CUPTI would be attached already: nothing to gain, the interleaved rounds' iterations
        assert clock.unprofiled == []
        assert "timed after a kernel-record session" in hook_free.sentence()
        return
    # a warm-up (at least 2 iterations and 0.25 s), then at least 3 and at most 20 kept (a
    # tiny model: all 20 fit in the second they may take)
    assert len(clock.unprofiled) == 20
    spans = sorted(m["end"] - m["start"] for m in clock.unprofiled)
    assert hook_free.latency_ms == pytest.approx(float(np.median(spans)) / 1e6)
    assert "timed after" not in hook_free.sentence()


def test_a_training_pass_runs_no_hook_free_iterations_it_would_not_report(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from moduleprofiler.timing.clocks import kernels

    monkeypatch.setattr(kernels, "sessions_entered", lambda: 0)
    clock = KernelClock(torch.device("cpu"), backward=True, trace=one_kernel_per_range)
    timing = train_step_times(_model(), torch.randn(4, 8), clock=clock, num_iters=4,
                              drop_first=1, progress=False)
    # a training step has no hook-free regime in its result: none timed for it
    assert clock.unprofiled == [] and timing.facts.hook_free is None


@contextmanager
def two_devices_one_after_the_other(device: torch.device) -> Iterator[TraceRecords]:
    """:func:`one_kernel_per_range`, and for the hook-free call (no module ranges) a model
    split over two GPUs: 2 ms of work on device 0, then 2 ms on device 1."""
    with one_kernel_per_range(device) as records:
        yield records
    if not records.ranges:
        records.activities += [Activity(1, 0, 2_000_000, device=0),
                               Activity(2, 2_000_000, 4_000_000, device=1)]


def test_the_hook_free_regime_of_a_model_on_two_devices_is_its_busiest_devices() -> None:
    clock = KernelClock(torch.device("cpu"), trace=two_devices_one_after_the_other)
    timing = time_modules(_model(), torch.randn(4, 8), clock=clock, num_iters=4, drop_first=1,
                          progress=False)
    hook_free = timing.facts.hook_free
    assert hook_free is not None
    # each device was busy 2 ms; in a loop one works on an iteration while the other finishes
    # the last, so the 4 ms of the two together are not the time either kept busy
    assert hook_free.device_ms == 2.0
    assert hook_free.devices == 2
    assert "the busiest of its 2 GPUs is busy" in hook_free.sentence()
