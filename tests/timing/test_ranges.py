"""Named ranges: module paths in the PyTorch profiler's trace, nested as the calls are in the
forward, one range per autograd node in the backward; NVTX where CUDA is available."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import torch
from torch import nn
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from moduleprofiler import ModuleProfiler
from moduleprofiler.errors import ProfilingError
from moduleprofiler.runner import PassRunner
from moduleprofiler.timing import RangeListener, time_modules, train_step_times
from tests.fixtures.models import LinearReLU
from tests.timing.helpers import no_hooks_left


def model() -> nn.Module:
    return nn.Sequential(LinearReLU(), nn.Linear(4, 2))


def traced(run: Any) -> list[Any]:
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run()
    return list(prof.events())


def parent_of(events: list[Any], name: str) -> set[str | None]:
    return {e.cpu_parent.name if e.cpu_parent else None for e in events if e.name == name}


def test_forward_ranges_are_module_paths_nested_as_the_calls():
    net, x = model(), torch.randn(3, 4)
    runner = PassRunner(net, [RangeListener(nvtx=False)])
    events = traced(lambda: runner.forward(lambda: net(x)))
    assert parent_of(events, "__root__") == {None}
    assert parent_of(events, "0") == {"__root__"}
    assert parent_of(events, "0.fc") == {"0"}
    assert parent_of(events, "0.act") == {"0"}
    assert parent_of(events, "1") == {"__root__"}
    # the module's own operators sit inside its range
    assert "0.fc" in parent_of(events, "aten::linear")
    assert parent_of(events, "aten::relu") == {"0.act"}
    assert no_hooks_left(net)


def test_backward_ranges_wrap_the_nodes_each_call_created():
    net, x = model(), torch.randn(3, 4)
    runner = PassRunner(net, [RangeListener(nvtx=False)])

    def step() -> None:
        runner.forward(lambda: net(x)).sum().backward()

    events = traced(step)
    names = Counter(e.name for e in events if e.name.endswith(" (backward)"))
    # each Linear created AddmmBackward0 and TBackward0 (the weight's transpose); ReLU one node
    assert names == {"1 (backward)": 2, "0.fc (backward)": 2, "0.act (backward)": 1}
    assert parent_of(events, "ReluBackward0") == {"0.act (backward)"}
    assert parent_of(events, "AddmmBackward0") == {"1 (backward)", "0.fc (backward)"}
    # the input-gradient matmul of the last layer runs inside its range, after the forward
    forward_end = next(e for e in events if e.name == "__root__").time_range.end
    last = [e for e in events if e.name == "1 (backward)"]
    assert all(e.time_range.start >= forward_end for e in last)
    # the loss is no module's: its node is not named
    assert parent_of(events, "SumBackward0") == {"autograd::engine::evaluate_function: "
                                                 "SumBackward0"}


class Checkpointed(nn.Module):
    """``out(checkpoint(block, x))``: a reentrant checkpoint reruns block in the backward."""

    def __init__(self) -> None:
        super().__init__()
        self.block = LinearReLU()
        self.out = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.utils.checkpoint.checkpoint(self.block, x, use_reentrant=True))


def test_a_reentrant_checkpoints_rerun_and_rebuilt_nodes_are_the_calls_backward_ranges():
    net, x = Checkpointed(), torch.randn(3, 4, requires_grad=True)
    runner = PassRunner(net, [RangeListener(nvtx=False)])

    def step() -> None:
        with runner.installed():
            runner.run(lambda: net(x)).sum().backward()

    events = traced(step)
    # the forward's ranges once each: the rerun is no forward call
    forward = Counter(e.name for e in events if e.name in ("block", "block.fc", "block.act"))
    assert forward == {"block": 1, "block.fc": 1, "block.act": 1}
    names = Counter(e.name for e in events if e.name.endswith(" (backward)"))
    # the rerun of block and its two calls (one range each), then the nested backward of the
    # rebuilt graph: block.fc's AddmmBackward0 and TBackward0, block.act's ReluBackward0;
    # out's two nodes and the checkpoint's own node (made in the root's call) in the outer one
    assert names == {"block (backward)": 1, "block.fc (backward)": 3,
                     "block.act (backward)": 2, "out (backward)": 2, "__root__ (backward)": 1}
    assert parent_of(events, "ReluBackward0") == {"block.act (backward)"}
    # the rerun's own operators run inside the rerun's ranges
    assert "block.fc (backward)" in parent_of(events, "aten::linear")


def test_a_raising_forward_closes_its_ranges():
    class Fails(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("boom")

    net = nn.Sequential(nn.Linear(4, 4), Fails())
    listener = RangeListener(nvtx=False)
    runner = PassRunner(net, [listener])
    with pytest.raises(ProfilingError, match="boom"):
        runner.forward(lambda: net(torch.randn(2, 4)))
    assert listener._open == []  # closed by stop(), innermost first
    assert no_hooks_left(net)
    # the profiler still pairs every range: a later trace is well formed
    events = traced(lambda: PassRunner(net[0], [listener]).forward(
        lambda: net[0](torch.randn(2, 4))))
    assert parent_of(events, "__root__") == {None}


def test_profile_and_timing_passes_take_the_ranges():
    net, x = model(), torch.randn(3, 4)
    events = traced(lambda: ModuleProfiler().profile(net, x, backward=True, listeners=[
        RangeListener(nvtx=False)]))
    assert parent_of(events, "0.fc") == {"0"}
    events = traced(lambda: time_modules(net, x, num_iters=2, drop_first=1, warmup_seconds=0,
                                         measure_overhead=False, ranges=True))
    calls = Counter(e.name for e in events)
    assert calls["0.fc"] >= 2 and calls["0.fc (backward)"] == 0  # no backward in a forward
    events = traced(lambda: train_step_times(net, x, num_iters=2, drop_first=1,
                                             measure_overhead=False, ranges=True))
    calls = Counter(e.name for e in events)
    assert calls["0.fc"] >= 2 and calls["0.fc (backward)"] >= 2
    assert no_hooks_left(net)


def test_ranges_are_off_by_default():
    net, x = model(), torch.randn(3, 4)
    events = traced(lambda: time_modules(net, x, num_iters=2, drop_first=1, warmup_seconds=0,
                                         measure_overhead=False))
    assert "0.fc" not in {e.name for e in events}


def test_bad_options_are_typed_errors():
    with pytest.raises(TypeError, match="backward"):
        RangeListener(backward="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="nvtx"):
        RangeListener(nvtx=1)  # type: ignore[arg-type]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_cuda_nvtx_is_on_and_kernels_run_inside_the_ranges():
    net = model().cuda()
    x = torch.randn(3, 4, device="cuda")
    listener = RangeListener()
    assert listener.nvtx
    runner = PassRunner(net, [listener])

    def step() -> None:
        runner.forward(lambda: net(x)).sum().backward()
        torch.cuda.synchronize()

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
    kernels: dict[str, float] = {}
    for event in prof.events():  # the CPU ranges (the trace repeats them on the GPU's row)
        if event.device_type == DeviceType.CPU:
            kernels[event.name] = kernels.get(event.name, 0.0) + event.device_time_total
    # the Linear's addmm kernel (forward) and its mm kernels (backward, in AddmmBackward0's
    # range; TBackward0's launches none) run inside its ranges
    assert kernels["1"] > 0
    assert kernels["1 (backward)"] > 0
