"""Booking the device's own activity records to the ranges that launched them.

The kernel clock (:mod:`.clocks.kernels`) names every module call, and the backward work of
every call, with a range on the host thread that runs it. The device's records (kernels,
memory copies and sets) carry a correlation id; the host-side launch with the same id (a
``cudaLaunchKernel``, ``cudaMemcpyAsync``... on some thread, at some time) is inside the
innermost range open on that thread at that time, and that range's label gets the activity.

This module is pure: plain records in, per-label sums out, so that the rules (nesting,
threads, streams, copies, work outside every range) are tested without a GPU.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

ActivityKind = Literal["kernel", "memcpy", "memset"]


@dataclass(frozen=True)
class Range:
    """A labelled host range: ``[start, end]`` ns on one thread (ranges nest per thread)."""

    label: str
    thread: int
    start: int
    end: int


@dataclass(frozen=True)
class Launch:
    """A host-side launch (runtime API call) of the device activity ``correlation``."""

    correlation: int
    thread: int
    time: int


@dataclass(frozen=True)
class Activity:
    """One record of a device's own timeline: ``[start, end]`` ns on ``stream`` of the device
    numbered ``device``."""

    correlation: int
    start: int
    end: int
    stream: int = 0
    kind: ActivityKind = "kernel"
    name: str = ""
    device: int = 0

    @property
    def duration(self) -> int:
        """Nanoseconds the device spent on it."""
        return self.end - self.start


@dataclass
class Booking:
    """Device activity per range label."""

    own: dict[str, list[Activity]] = field(default_factory=lambda: defaultdict(list))
    """The activities launched directly inside each label's range (not inside a nested one)."""
    outside: list[Activity] = field(default_factory=list)
    """Activities launched outside every range (or whose launch record is missing)."""

    def own_ns(self, label: str) -> int:
        """Summed duration of the activities booked to ``label`` itself."""
        return sum(activity.duration for activity in self.own.get(label, ()))

    @property
    def total_ns(self) -> int:
        """Summed duration of every activity, booked or not."""
        return sum(a.duration for acts in self.own.values() for a in acts) + sum(
            a.duration for a in self.outside)


def innermost_ranges(ranges: Iterable[Range],
                     launches: Iterable[Launch]) -> dict[int, str]:
    """For each launch (by correlation id), the label of the innermost range open on its
    thread at its time; launches outside every range are left out.

    Ranges on one thread nest (a range that starts inside another ends inside it), so one
    sweep per thread with a stack of open ranges finds them all.
    """
    by_thread: dict[int, list[Range]] = defaultdict(list)
    for item in ranges:
        by_thread[item.thread].append(item)
    points: dict[int, list[Launch]] = defaultdict(list)
    for launch in launches:
        points[launch.thread].append(launch)
    found: dict[int, str] = {}
    for thread, thread_launches in points.items():
        opened = sorted(by_thread.get(thread, ()), key=lambda r: (r.start, -r.end))
        thread_launches.sort(key=lambda launch: launch.time)
        stack: list[Range] = []
        next_range = 0
        for launch in thread_launches:
            while next_range < len(opened) and opened[next_range].start <= launch.time:
                entering = opened[next_range]
                while stack and stack[-1].end < entering.start:
                    stack.pop()
                stack.append(entering)
                next_range += 1
            while stack and stack[-1].end < launch.time:
                stack.pop()
            if stack:
                found[launch.correlation] = stack[-1].label
    return found


def book(ranges: Iterable[Range], launches: Iterable[Launch],
         activities: Iterable[Activity]) -> Booking:
    """Book every device activity to the innermost range around its launch."""
    launches = list(launches)
    owner = innermost_ranges(ranges, launches)
    booking = Booking()
    for activity in activities:
        label = owner.get(activity.correlation)
        if label is None:
            booking.outside.append(activity)
        else:
            booking.own[label].append(activity)
    return booking


def busy_ns(activities: Sequence[Activity]) -> int:
    """Nanoseconds in which at least one of ``activities`` ran (overlaps on several streams
    counted once)."""
    spans = sorted((a.start, a.end) for a in activities)
    total, cursor = 0, None
    for start, end in spans:
        if cursor is None or start > cursor:
            total += end - start
            cursor = end
        elif end > cursor:
            total += end - cursor
            cursor = end
    return total


def busiest_device_ns(activities: Sequence[Activity]) -> int:
    """:func:`busy_ns` of the busiest device among ``activities``: a model split over two GPUs
    keeps each busy part of the time, and in a loop one GPU works on an iteration while the
    other finishes the last, so their busy times summed can exceed the iteration's."""
    devices: dict[int, list[Activity]] = {}
    for activity in activities:
        devices.setdefault(activity.device, []).append(activity)
    return max((busy_ns(group) for group in devices.values()), default=0)

