"""The kernel clock's result, assembled on the CPU from made-up device and host iterations: the
per-call sample columns, the per-module statistics of the module frame, ``module_columns()``,
the launches and idle share, the regime per module. (The clock itself needs CUDA: its tests are
in ``test_kernel_clock_cuda.py``; this checks what is built from its numbers.)"""

from __future__ import annotations

import dataclasses
import re
from collections import OrderedDict

import numpy as np
import pytest
import torch
from torch import nn

from moduleprofiler.facts import HookFreeTrace, TimingFacts
from moduleprofiler.modules import module_infos
from moduleprofiler.runner import PassRunner
from moduleprofiler.timing.clocks.compiled import CompiledClock
from moduleprofiler.timing.clocks.kernels import KernelClock
from moduleprofiler.timing.clocks.protocol import Clock
from moduleprofiler.timing.device_results import DeviceIteration
from moduleprofiler.timing.forward import ModuleTiming
from moduleprofiler.timing.iteration import iteration_of_own
from moduleprofiler.timing.overhead import HookCalibration
from moduleprofiler.timing.results import TimedCalls, timed_profile

# own device time (ns) of each call, in execution order: the root, Linear 0, ReLU 1, Linear 2;
# three traced iterations
DEVICE_OWN = [[100.0, 300.0, 200.0, 400.0],
              [100.0, 500.0, 200.0, 400.0],
              [100.0, 300.0, 600.0, 400.0]]
HOST_FACTOR = 3.0  # the host took 3x as long as the device: every module host-bound


def _timing(hook_free: HookFreeTrace | None = None,
            names: tuple[str, str, str] = ("0", "1", "2")) -> ModuleTiming:
    model = nn.Sequential(OrderedDict(zip(names, (nn.Linear(4, 4), nn.ReLU(),
                                                  nn.Linear(4, 4)))))
    runner = PassRunner(model, [])
    with torch.no_grad():
        runner.forward(lambda: model(torch.randn(2, 4)))
    runner.release()
    calls = runner.calls
    index = {id(module): i for i, (_, module) in enumerate(model.named_modules())}
    device = [iteration_of_own(calls, index, np.asarray(own)) for own in DEVICE_OWN]
    host = [iteration_of_own(calls, index, HOST_FACTOR * np.asarray(own)) for own in DEVICE_OWN]
    traced = [DeviceIteration(
        times=times,
        call_launches=np.asarray([3, 1, 1, 1]),  # each call one kernel, the root's with theirs
        call_busy_ns=times.call_fwd_inclusive,
        call_span_ns=times.call_fwd_inclusive * 1.25,  # idle a fifth of each span
        total_ns=float(times.call_fwd_exclusive.sum())) for times in device]
    # what the pass hands its result: the host iterations, the traced ones, the facts
    return timed_profile(ModuleTiming, module_infos(model), TimedCalls(
        forward=host, forward_error=(0.0, 0.0), traced=traced), TimingFacts(
        clock="cuda-kernels", device="cuda:0", calibration=dataclasses.asdict(
            HookCalibration("cuda:0", attribution_ns=0.0, per_call_ns=0.0)),
        iterations=3, hooked_ms=(1.0,) * 3, hook_free_ms=(1.0,) * 3, hook_free=hook_free,
        device_booked_ms=sum(t.total_ns for t in traced) / 1e6,
        device_total_ms=sum(t.total_ns for t in traced) / 1e6))


def test_module_device_and_host_times_are_medians_of_per_iteration_totals() -> None:
    timing = _timing()
    modules = timing.to_df("module").set_index("module")
    # Linear 0: 300, 500, 300 ns -> median 300 ns; the root with its children: 1000, 1200,
    # 1300 ns -> 1200 ns; its own code 100 ns
    assert modules.loc["0", "device_ms"] == 300 / 1e6
    assert modules.loc["__root__", "device_ms"] == 1200 / 1e6
    assert modules.loc["__root__", "self_device_ms"] == 100 / 1e6
    # host: three times each (no hook error calibrated)
    assert abs(modules.loc["__root__", "host_ms"] - 3 * 1200 / 1e6) < 1e-15
    assert abs(modules.loc["1", "self_host_ms"] - 3 * 200 / 1e6) < 1e-15
    assert set(modules["time_bound"]) == {"host"}
    # one computation: module_columns() reads the same frame; the kernel clock's launches
    # (the root launched 3 kernels with its children's) and idle share (1 - 1 / 1.25 = 0.2)
    columns = timing.module_columns()
    assert columns[""]["device_ms"] == 1200 / 1e6
    assert columns[""]["device_launches"] == 3.0
    assert abs(columns["0"]["device_idle_share"] - 0.2) < 1e-12


def test_each_call_keeps_its_device_and_host_samples() -> None:
    timing = _timing()
    linear = timing.calls("0")[0].metrics
    assert linear["device_samples_ms"] == (300 / 1e6, 500 / 1e6, 300 / 1e6)
    assert linear["device_ms"] == 300 / 1e6  # the call's own median
    assert "device_samples_ms" not in timing.to_df("call").columns  # samples never shown


# Without hooks the device is busy 92 % of the iteration (ResNet-50 at batch 32 in fp32 on an
# H200): device-bound, while every hooked call (the root's too) took the host 3x its device time
DEVICE_BOUND = HookFreeTrace(host_ms=4.4, device_ms=4.97, launches=249, latency_ms=5.4)


def test_the_model_row_has_the_hook_free_regime() -> None:
    timing = _timing(DEVICE_BOUND)
    assert timing.to_dict()["time_bound"] == "device"  # 4.97 / 5.4 = 92 % busy
    # before: the root row said "host" (its hooked host time, 3 x 1200 ns, holds the hooks'
    # cost) beside the summary's "device-bound" line
    modules = timing.to_df("module").set_index("module")
    assert modules.loc["__root__", "time_bound"] == "device"
    assert timing.module_columns()[""]["time_bound"] == "device"
    with pytest.warns(DeprecationWarning, match="to_df"):  # the module frame, deprecated
        assert timing.stats_frame().set_index("module").loc["__root__",
                                                            "time_bound"] == "device"
    # each module's own label stays its hooked comparison, and the summary says so
    assert set(modules.drop(index="__root__")["time_bound"]) == {"host"}
    summary = " ".join(timing.report().split())
    assert ("bound by: the model's row is the hook-free regime (device-bound); each "
            "module's compares its host time under hooks with its device time") in summary


def test_without_a_hook_free_trace_the_model_row_keeps_its_own_label() -> None:
    modules = _timing().to_df("module").set_index("module")
    assert modules.loc["__root__", "time_bound"] == "host"


def test_device_time_is_not_the_first_column_hidden_at_80(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    # names as long as a real model's (ResNet's "layer1.0.downsample.0" at depth 3): the tree
    # with its six columns does not fit 80 columns
    timing = _timing(DEVICE_BOUND, ("patch_embedding_convolution", "activation_function",
                                    "classification_head_projection"))
    summary = timing.report()
    hidden = re.search(r"hidden to fit 80 columns: ([^(]*)", " ".join(summary.split()))
    assert hidden is not None
    # before: "bound by, device": the device's inclusive time went first, the host's stayed.
    # The device times go after the host's: name 24 + self host 9 + self device 11 + device
    # 8 + self device % 13 + 4 gaps of 2 = 73 columns fit; the host time (8) with its gap
    # would make 83. No module is low-confidence (every one kept its three traced samples),
    # so the flag is a note, not a column of "no"
    assert hidden.group(1).strip() == "bound by, host"
    assert summary.splitlines()[0].split() == ["module", "self", "host", "self", "device",
                                               "device", "self", "device", "%"]
    assert "low confidence: no module" in " ".join(summary.split())
    assert all(len(line) <= 80 for line in summary.splitlines())


def test_the_kernel_clocks_column_block_holds_every_column_its_result_fills() -> None:
    """A clock is its file plus its column block: every timing column a kernel-clock result
    fills (the records' samples and medians, the module frame's statistics) is declared in
    ``KernelClock.columns``, none in the stamps' block, and the result declares every clock's
    block (the compiled clock's adds its fused-kernel columns to the kernel clock's)."""
    timing = _timing()
    block = {spec.name for spec in KernelClock.columns}
    stamps = {spec.name for spec in Clock.columns}
    compiled = {spec.name for spec in CompiledClock.columns}
    timed = {spec.name for spec in ModuleTiming.COLUMNS}
    assert block < compiled and compiled - block == {"self_fused_kernels", "fused_across"}
    frame = timing.to_df("module", columns="all")
    filled = ({name for record in timing.records for name in record.metrics}
              | set(frame.columns)) & timed
    assert compiled | stamps == timed and not compiled & stamps
    assert filled <= block
    # the forward's device and host samples and medians, launches, idle share, regime and a
    # statistic of the device samples: each filled
    assert {"device_samples_ms", "host_samples_ms", "device_ms", "self_host_ms",
            "device_launches", "device_idle_share", "time_bound", "device_p95_ms"} <= filled
