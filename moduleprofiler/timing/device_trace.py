"""One PyTorch profiler session that records the host ranges, the launches and the device's own
activity records (CUPTI through kineto), returned as the plain records of :mod:`.booking`.

Only what booking needs is read from the profiler's raw results (``kineto_results.events()``);
the profiler's own event tree (``prof.events()``, slow to build) is never made.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from moduleprofiler.devices import synchronize
from moduleprofiler.timing.booking import Activity, ActivityKind, Launch, Range

RANGE_PREFIX = "moduleprofiler:"
"""Names of the kernel clock's ranges start with this; the rest is the range's label."""

ENGINE_PREFIX = "seq:"
"""Label of an autograd node's evaluation (``autograd::engine::evaluate_function``, which also
covers the engine's adding of gradients a tensor received from several consumers) followed by
the node's sequence number: the runner's map gives the forward call that created it."""

_ENGINE_EVENT = "autograd::engine::evaluate_function"

_RUNTIME_PREFIXES = ("cu", "hip")
"""Host-side runtime calls that launch device work (``cudaLaunchKernel``, ``cuLaunchKernel``,
``cudaMemcpyAsync``, ``hipLaunchKernel``...)."""


class KernelClockUnavailable(RuntimeError):
    """The device's kernel records cannot be had here (no CUPTI, or a profiler is running)."""


def profiler_running() -> bool:
    """Whether a PyTorch profiler session (the user's own, say) is active in this process."""
    enabled = getattr(torch._C._autograd, "_profiler_enabled", None)
    return bool(enabled()) if enabled is not None else False


def kernel_records_unavailable(device: torch.device) -> str | None:
    """Why the kernel clock cannot run on ``device`` (``None``: it can)."""
    if device.type != "cuda":
        return f"the kernel clock times CUDA devices; {device} has its own clock"
    if torch.profiler.ProfilerActivity.CUDA not in torch.profiler.supported_activities():
        return "this PyTorch build cannot read the GPU's kernel records (no CUPTI/kineto)"
    if profiler_running():
        return ("a PyTorch profiler session is already running, and kineto records one "
                "session at a time")
    return None


_sessions = 0
"""Sessions :func:`device_trace` has started in this process."""


def sessions_entered() -> int:
    """Kernel-record sessions :func:`device_trace` has started in this process. After the
    first, CUPTI stays attached to the process (kineto lets go of it only with
    ``TEARDOWN_CUPTI=1`` in the environment) and a launch costs the host more than in a
    process never profiled: 1.3 to 1.7 times in tight loops on an H200's host
    (``benchmarks/prediction/cupti_after_effect.py``). A profiler session of the user's own
    does the same, and is not counted here."""
    return _sessions


def after_sessions_notes(what: str) -> list[str]:
    """The note that ``what``, measured now, comes after kernel-record sessions of this process
    (:func:`sessions_entered`), so its launches cost the host more than the user's unprofiled
    run's; no note when no session has run."""
    sessions = sessions_entered()
    if not sessions:
        return []
    return [f"{what} measured after {sessions} kernel-record session"
            f"{'s' if sessions > 1 else ''} in this process: CUPTI stays attached after one, "
            "and a launch costs the host more than in an unprofiled run (1.3 to 1.7 times in "
            "tight loops on an H200's host); measure in a fresh process"]


@dataclass
class TraceRecords:
    """What one session recorded."""

    ranges: list[Range] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)
    activities: list[Activity] = field(default_factory=list)


def _kind(name: str) -> ActivityKind:
    if name.startswith("Memcpy"):
        return "memcpy"
    if name.startswith("Memset"):
        return "memset"
    return "kernel"


def _ns(event: Any, what: str) -> int:
    """A kineto event's ``what`` (``"start"``, ``"duration"``) in ns: an older torch has it
    in microseconds only."""
    exact = getattr(event, f"{what}_ns", None)
    return int(exact()) if exact is not None else int(getattr(event, f"{what}_us")() * 1000)


def event_span(event: Any) -> tuple[int, int]:
    """A kineto event's start and end in ns (:func:`_ns`)."""
    start = _ns(event, "start")
    return start, start + _ns(event, "duration")


def records_of(events: Any) -> TraceRecords:
    """The ranges, launches and device activities among kineto ``events``.

    A device record and the host launch that made it share a correlation id and the id of the
    innermost host operator around the launch (``linked_correlation_id``); host operators have
    their own id space, so a launch is the host record with the same pair (or, for work
    launched outside every operator, with the same id and a runtime API name).
    """
    records = TraceRecords()
    cpu = torch._C._autograd.DeviceType.CPU
    hosts: dict[tuple[int, int], Any] = {}
    unlinked: dict[int, Any] = {}
    device_events = []
    for event in events:
        name = event.name()
        if event.device_type() == cpu:
            label = None
            if name.startswith(RANGE_PREFIX):
                label = name[len(RANGE_PREFIX):]
            elif name.startswith(_ENGINE_EVENT) and event.sequence_nr() >= 0:
                label = f"{ENGINE_PREFIX}{event.sequence_nr()}"
            if label is not None:
                records.ranges.append(Range(label, event.start_thread_id(), *event_span(event)))
                continue
            linked = event.linked_correlation_id()
            if linked:
                hosts[(event.correlation_id(), linked)] = event
            elif name.startswith(_RUNTIME_PREFIXES):
                unlinked[event.correlation_id()] = event
        else:
            annotation = getattr(event, "is_user_annotation", None)
            if annotation is None or not annotation():
                device_events.append(event)
    for event in device_events:
        correlation = event.correlation_id()
        linked = event.linked_correlation_id()
        host = hosts.get((correlation, linked)) if linked else unlinked.get(correlation)
        if host is None:
            continue  # no launch: a device-side annotation of an older torch, not work
        name = event.name()
        resource = getattr(event, "device_resource_id", None)
        index = getattr(event, "device_index", None)
        records.activities.append(Activity(correlation, *event_span(event),
                                           int(resource()) if resource else 0, _kind(name),
                                           name, int(index()) if index else 0))
        records.launches.append(Launch(correlation, host.start_thread_id(), _ns(host, "start")))
    return records


@contextmanager
def _one_cycle() -> Iterator[None]:
    """Silence torch's note that a session keeps the events of its last cycle only: one
    cycle here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Profiler clears events", category=UserWarning)
        yield


@contextmanager
def device_trace(device: torch.device) -> Iterator[TraceRecords]:
    """Record the block's host ranges and device activity; the yielded records are filled
    when the block ends (after the device has finished its work)."""
    reason = kernel_records_unavailable(device)
    if reason is not None:
        raise KernelClockUnavailable(reason)
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    records = TraceRecords()
    with _one_cycle():
        session = torch.profiler.profile(activities=activities)
        session.__enter__()
    global _sessions
    _sessions += 1
    try:
        yield records
    finally:
        synchronize(device)
        with _one_cycle():
            session.__exit__(None, None, None)
    filled = records_of(session.profiler.kineto_results.events())  # type: ignore[union-attr]
    records.ranges, records.launches = filled.ranges, filled.launches
    records.activities = filled.activities


_fast_range: Any = getattr(torch._C._profiler, "_RecordFunctionFast", None)


def open_range(label: str) -> Any:
    """Open a range named ``RANGE_PREFIX + label`` on this thread; close it with
    :func:`close_range`. ``_RecordFunctionFast`` costs about as much as an empty hook where it
    exists; ``record_function`` (a dispatcher call) elsewhere."""
    scope = (_fast_range(RANGE_PREFIX + label) if _fast_range is not None
             else torch.autograd.profiler.record_function(RANGE_PREFIX + label))
    scope.__enter__()
    return scope


def close_range(scope: Any) -> None:
    """Close a range :func:`open_range` opened."""
    scope.__exit__(None, None, None)


ClockName = Literal["auto", "kernels", "events", "cpu", "compiled"]
"""Per-module clocks: ``"kernels"`` (CUDA: device time from the kernel records, host time
from the CPU clock), ``"events"`` (CUDA: events at the hooks; right only while the device has
queued work), ``"cpu"`` (wall time on the host), ``"compiled"`` (a ``torch.compile``d
model's compiled program, its kernels booked to modules). ``"auto"``: the compiled clock for
a compiled model's forward; else kernels on CUDA where the records can be had, else events;
the CPU clock on the CPU."""

CLOCKS: tuple[str, ...] = ("auto", "kernels", "events", "cpu", "compiled")


def choose_clock(device: torch.device, clock: str) -> tuple[str, str | None]:
    """The clock to use on ``device`` for ``clock`` and, when ``"auto"`` had to fall back, a
    note saying why; ``ValueError`` for a clock the device does not have,
    :class:`KernelClockUnavailable` when ``"kernels"`` was asked for and cannot run."""
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {', '.join(map(repr, CLOCKS))}, got {clock!r}")
    if device.type != "cuda":
        if clock in ("kernels", "events"):
            raise ValueError(f"clock={clock!r} times CUDA devices; {device} uses clock='cpu'")
        return "cpu", None
    if clock == "cpu":
        raise ValueError("clock='cpu' would time CUDA launches, not the work: use 'kernels' "
                         "or 'events'")
    if clock == "events":
        return "events", None
    reason = kernel_records_unavailable(device)
    if reason is None:
        return "kernels", None
    if clock == "kernels":
        raise KernelClockUnavailable(
            f"clock='kernels' cannot run: {reason}. Time outside the profiler session, or "
            "pass clock='events' (right only while the GPU has queued work)")
    return "events", (f"device times come from CUDA events at the hooks, not from kernel "
                      f"records ({reason}): in host-bound stretches they include the time "
                      "the GPU waited for launches")
