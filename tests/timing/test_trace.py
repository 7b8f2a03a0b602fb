"""``annotate_trace``: a real ``torch.profiler`` session (CPU) around profiled passes with
``RangeListener``, its Chrome trace exported, annotated and read back: the trace events keep
their schema, the module ranges carry the profile's numbers (by hand for a tiny model), unknown
values are left out, and a module's several calls are matched to its ranges in order."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch.profiler import ProfilerActivity, profile

from moduleprofiler import ModuleProfiler, Profile
from moduleprofiler.timing import RangeListener
from moduleprofiler.timing.trace import annotate_trace, load_trace
from tests.fixtures.models import Unknown, WithUnknownLeaf


def traced(run: Callable[[], Profile], path: Path) -> Profile:
    """``run()`` inside a CPU profiler session whose Chrome trace is written to ``path``."""
    with profile(activities=[ProfilerActivity.CPU]) as session:
        result = run()
    session.export_chrome_trace(str(path))
    return result


def ranges(trace: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [e for e in trace["traceEvents"]
            if e.get("cat") == "user_annotation" and e.get("name") == name]


def mlp() -> tuple[nn.Module, Tensor]:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)), torch.randn(3, 4)


def test_module_ranges_carry_the_profile_numbers(tmp_path: Path) -> None:
    model, x = mlp()
    result = traced(lambda: ModuleProfiler().profile(
        model, x, backward=True, listeners=[RangeListener(nvtx=False)]), tmp_path / "t.json")
    out = tmp_path / "annotated.json"
    annotate_trace(tmp_path / "t.json", result, out)
    trace = json.loads(out.read_text())

    for event in trace["traceEvents"]:  # the Chrome trace event schema, every event
        assert {"name", "ph", "ts", "pid", "tid"} <= event.keys(), event
        if event["ph"] == "X":
            assert isinstance(event["dur"], (int, float))
    flops = result.to_df("call").set_index("module")["flops"]
    # Linear(4, 8) on 3 rows: 3*4*8 = 96 MACs, 192 FLOPs; ReLU: 0; Linear(8, 2): 3*8*2 = 48
    # MACs, 96 FLOPs; the root: 192 + 96 = 288. Ops: 3*8*(2*4 - 1) + 24 = 192, 3*8 = 24,
    # 3*2*(2*8 - 1) + 6 = 96, 312 in all
    for name, expected, ops, params in (("__root__", 288, 312, 58), ("0", 192, 192, 40),
                                        ("1", 0, 24, 0), ("2", 96, 96, 18)):
        (event,) = ranges(trace, name)
        assert event["args"]["flops"] == expected == flops[name]
        assert event["args"]["ops"] == ops
        assert event["args"]["params"] == params
        assert event["args"]["External id"] > 0  # torch's own args kept
    assert ranges(trace, "0")[0]["args"]["module_type"] == "Linear"
    # the backward: Linear(4, 8)'s weight gradient 3*4*8 = 96 MACs (x needs no gradient);
    # Linear(8, 2)'s weight gradient 3*8*2 = 48 and its input gradient 3*2*8 = 48: 96 MACs.
    # Each of a module's backward ranges (one per autograd node) carries its whole backward
    for name, macs in (("0 (backward)", 96), ("2 (backward)", 96), ("1 (backward)", 0)):
        events = ranges(trace, name)
        assert events and all(e["args"]["self_backward_macs"] == macs for e in events)
        assert all(e["args"]["self_backward_flops"] == 2 * macs for e in events)
        assert all("flops" not in e["args"] for e in events)
    # other events are left as they were
    operators = [e for e in trace["traceEvents"] if e.get("cat") == "cpu_op"]
    assert operators and all("module_type" not in e["args"] for e in operators)


def test_unknown_values_are_left_out(tmp_path: Path) -> None:
    def declines(module: nn.Module, inputs: Any, output: Any) -> None:
        return None

    profiler = ModuleProfiler()
    profiler.ops_fn_map[Unknown] = declines  # no formula answer: its ops are unknown
    result = traced(lambda: profiler.profile(WithUnknownLeaf(), torch.randn(2, 3),
                                             listeners=[RangeListener(nvtx=False)]),
                    tmp_path / "t.json")
    trace = annotate_trace(tmp_path / "t.json", result)
    (custom,) = ranges(trace, "custom")
    assert custom["args"]["params"] == 0  # known
    assert not {"self_ops", "self_macs", "self_flops", "ops", "flops"} & custom["args"].keys()
    (lin,) = ranges(trace, "lin")
    assert lin["args"]["macs"] == 2 * 3 * 3  # 18, known beside the unknown leaf


class TwoSizes(nn.Module):
    """One Linear called on 3 rows, then on 1 row."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(x) + self.fc(x[:1]).sum()


def test_a_module_called_twice_is_matched_in_order(tmp_path: Path) -> None:
    model, x = TwoSizes(), torch.randn(3, 4)

    def two_passes() -> Profile:
        profiler = ModuleProfiler()
        profiler.profile(model, x, listeners=[RangeListener(nvtx=False)])
        return profiler.profile(model, x, listeners=[RangeListener(nvtx=False)])

    result = traced(two_passes, tmp_path / "t.json")
    trace = annotate_trace(tmp_path / "t.json", result)
    # fc on 3 rows: 3*4*4 = 48 MACs; on 1 row: 16; two passes: 4 ranges, in call order
    assert [e["args"]["macs"] for e in ranges(trace, "fc")] == [48, 16, 48, 16]
    assert [e["args"]["params"] for e in ranges(trace, "fc")] == [20] * 4  # the calls agree
    # 3 ranges cannot be whole passes: the numbers the calls disagree on are left out
    loaded = load_trace(tmp_path / "t.json")
    loaded["traceEvents"].remove(ranges(loaded, "fc")[-1])
    partial = annotate_trace(loaded, result)
    assert [("macs" in e["args"], e["args"]["params"])
            for e in ranges(partial, "fc")] == [(False, 20)] * 3
    assert "module_type" not in ranges(loaded, "fc")[0]["args"]  # the input is not changed


@pytest.mark.filterwarnings("ignore::moduleprofiler.timing.clock.TimingWarning")
def test_measured_times_are_added(tmp_path: Path) -> None:
    model, x = mlp()
    profiler = ModuleProfiler()
    counted = traced(lambda: profiler.profile(model, x, listeners=[RangeListener(nvtx=False)]),
                     tmp_path / "t.json")
    timed = counted.with_timing(profiler.time_modules(model, x, num_iters=3, drop_first=1,
                                                      warmup_seconds=0.0))
    trace = annotate_trace(tmp_path / "t.json", timed, tmp_path / "out.json.gz")
    forward_ms = timed.to_df("call").set_index("module")["forward_ms"]
    for name in ("__root__", "0", "1", "2"):
        (event,) = ranges(trace, name)
        assert event["args"]["forward_ms"] == pytest.approx(float(forward_ms[name]))
    with gzip.open(tmp_path / "out.json.gz", "rt") as file:
        assert json.load(file) == trace


def test_bad_input(tmp_path: Path) -> None:
    model, x = mlp()
    result = ModuleProfiler().profile(model, x)
    with pytest.raises(ValueError, match="trace is not a Chrome trace"):
        annotate_trace({"events": []}, result)
    with pytest.raises(TypeError, match="profile must be a Profile"):
        annotate_trace({"traceEvents": []}, result.to_dict())  # type: ignore[arg-type]
    # a bare event array is a trace too
    assert annotate_trace([], result) == {"traceEvents": []}
