"""One profiler session over iterations of a compiled model, read into the plain records of
:mod:`.booking`.

On CUDA the kernels are the device's own records (through :func:`moduleprofiler.timing.
device_trace.records_of`), each with the host point that launched it. On a CPU the kernels are
host ranges: those directly inside a compiled graph's call (a generated kernel's own range,
which Inductor emits when compiled with ``cpp.enable_kernel_profile``; an extern kernel's
operator), and, in a model with compiled submodules, the outermost operators its eager
modules ran (inside their ranges, outside every graph call).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from moduleprofiler.devices import synchronize
from moduleprofiler.timing.compiled.booking import (
    GraphCall,
    HostOp,
    KernelRecord,
    ModuleRange,
    eager_ops,
    outside_ops,
    top_level_ops,
)
from moduleprofiler.timing.compiled.capture import GRAPH_RANGE
from moduleprofiler.timing.compiled.parts import MODULE_RANGE
from moduleprofiler.timing.device_trace import event_span, kernel_records_unavailable, records_of

ITERATION_RANGE = "moduleprofiler:compiled:"
"""Name of the range around each traced iteration, followed by its number."""


@dataclass
class CompiledTrace:
    """What one session recorded."""

    iterations: int
    calls: list[GraphCall] = field(default_factory=list)
    ops: list[HostOp] = field(default_factory=list)
    kernels: list[KernelRecord] = field(default_factory=list)
    ranges: list[ModuleRange] = field(default_factory=list)
    """The eager modules' calls (a model with compiled submodules)."""
    iteration_ns: list[int] = field(default_factory=list)
    """Wall time of each iteration on the host."""


_LAUNCH_FIELDS = (("grid", "grid"), ("block", "block"), ("cluster", "cluster"),
                  ("registers per thread", "registers"), ("shared memory", "shared memory"),
                  ("static shared memory", "static shared memory"),
                  ("dynamic shared memory", "dynamic shared memory"))
"""The fields of a kernel record's metadata that make its launch configuration, with the
names it is written with; the others (stream, correlation, queue time, occupancy estimates)
differ between two launches of one configuration, or follow from it."""


def launch_configuration(metadata: str) -> str:
    """A kernel's launch configuration from its record's metadata (the profiler's JSON
    fields, without braces): ``"grid 196x1x1, block 128x1x1, registers 64, shared memory
    49152"``; ``""`` where the metadata has none of its fields."""
    try:
        fields = json.loads("{" + metadata + "}") if metadata.strip() else {}
    except ValueError:
        return ""
    if not isinstance(fields, dict):
        return ""
    parts = []
    for key, label in _LAUNCH_FIELDS:
        found = fields.get(key)
        if isinstance(found, list):
            parts.append(f"{label} {'x'.join(map(str, found))}")
        elif found is not None:
            parts.append(f"{label} {found}")
    return ", ".join(parts)


def _keeping_metadata() -> Any | None:
    """The profiler's option that keeps each device record's metadata (its launch
    configuration among it) on the record's event, which it leaves out by default; ``None``
    where this torch has no such option."""
    try:
        return torch._C._profiler._ExperimentalConfig(expose_kineto_event_metadata=True)
    except (AttributeError, TypeError):
        return None


def _launch_configurations(events: Iterable[Any]) -> dict[tuple[int, int], str]:
    """Each device kernel record's launch configuration by ``(correlation id, start ns)`` (a
    CUDA graph's replay gives all its kernels one correlation id); empty where this torch's
    events carry no metadata."""
    cpu = torch._C._autograd.DeviceType.CPU
    out = {}
    for event in events:
        read = getattr(event, "metadata_json", None)
        if read is None or event.device_type() == cpu:
            continue
        found = launch_configuration(read())
        if found:
            out[(event.correlation_id(), event_span(event)[0])] = found
    return out


def _host_records(events: Iterable[Any], iterations: int) -> CompiledTrace:
    trace = CompiledTrace(iterations, iteration_ns=[0] * iterations)
    cpu = torch._C._autograd.DeviceType.CPU
    spans: list[tuple[int, int, int, int]] = []  # (thread, start, end, iteration)
    raw_calls: list[tuple[str, int, int, int]] = []
    raw_ranges: list[tuple[str, int, int, int]] = []
    for event in events:
        if event.device_type() != cpu:
            continue
        name = event.name()
        start, end = event_span(event)
        thread = event.start_thread_id()
        if name.startswith(ITERATION_RANGE):
            k = int(name[len(ITERATION_RANGE):])
            spans.append((thread, start, end, k))
            if 0 <= k < iterations:
                trace.iteration_ns[k] = end - start
        elif name.startswith(GRAPH_RANGE):
            raw_calls.append((name[len(GRAPH_RANGE):].removesuffix(" ##"), thread, start, end))
        elif name.startswith(MODULE_RANGE):
            raw_ranges.append((name[len(MODULE_RANGE):], thread, start, end))
        else:
            trace.ops.append(HostOp(name, thread, start, end))
    def iteration(thread: int, start: int) -> int:
        # a backward on CUDA runs on the autograd engine's own thread, inside the step's
        # range on the thread that called backward()
        return next((i for t, s, e, i in spans if t == thread and s <= start <= e),
                    next((i for _, s, e, i in spans if s <= start <= e), -1))

    for key, thread, start, end in raw_calls:
        trace.calls.append(GraphCall(key, thread, start, end, iteration(thread, start)))
    for path, thread, start, end in raw_ranges:
        trace.ranges.append(ModuleRange(path, thread, start, end, iteration(thread, start)))
    return trace


def trace_compiled(run: Callable[[], Any], iterations: int, device: torch.device) -> CompiledTrace:
    """``run()`` ``iterations`` times inside one profiler session, each inside a numbered
    range; on CUDA the device's kernel records, on a CPU the kernels' host ranges."""
    cuda = device.type == "cuda"
    if cuda:
        reason = kernel_records_unavailable(device)
        if reason is not None:
            raise RuntimeError(f"the compiled clock cannot read kernel records: {reason}")
    activities = [torch.profiler.ProfilerActivity.CPU]
    options: dict[str, Any] = {}
    if cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
        config = _keeping_metadata()
        if config is not None:
            options["experimental_config"] = config
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Profiler clears events", category=UserWarning)
        with torch.profiler.profile(activities=activities, **options) as session:
            for k in range(iterations):
                with torch.profiler.record_function(f"{ITERATION_RANGE}{k}"):
                    run()
            synchronize(device)
    events = list(session.profiler.kineto_results.events())  # type: ignore[union-attr]
    trace = _host_records(events, iterations)
    if cuda:
        records = records_of(events)
        launch = {item.correlation: item for item in records.launches}
        configs = _launch_configurations(events)
        for activity in records.activities:
            at = launch.get(activity.correlation)
            if at is not None:
                trace.kernels.append(KernelRecord(
                    activity.name, activity.duration, at.thread, at.time, activity.start,
                    configs.get((activity.correlation, activity.start), "")))
    else:
        ops = [op for found in top_level_ops(trace.calls, trace.ops).values() for op in found]
        ops.extend(eager_ops(trace.ranges, trace.calls, trace.ops) if trace.ranges
                   else outside_ops(trace.calls, trace.ops))
        trace.kernels.extend(KernelRecord(op.name, op.end - op.start, op.thread, op.start,
                                          op.start) for op in ops)
    return trace
