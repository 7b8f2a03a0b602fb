"""One timed iteration: the clock's raw stamps turned into per-call times.

Forward: a call's inclusive time is its end stamp minus its start stamp; its self time is that
minus its direct child calls' inclusive time. Backward: a hooked node's time runs from the
previous event on its thread to its own end stamp and belongs to the call that created it
(self time); a call's inclusive backward time adds its descendants'. A module's time is its
calls' totalled by the profile they become (:func:`moduleprofiler.export.frame.module_totals`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from moduleprofiler.call import Call
from moduleprofiler.records import subtree_totals

START, END = 0, 1
"""Kinds of backward events: backward reaches an output node / a node (or a run) finished."""

Floats = NDArray[np.float64]
Ints = NDArray[np.int64]


@dataclass
class RawIteration:
    """One iteration's stamps, as the hooks left them (``ClockListener.snapshot``)."""

    calls: list[Call]
    start: list[int]
    end: dict[int, int]
    """End stamp of each call whose forward returned, by call index."""
    marks: list[tuple[str, int]]
    events: list[tuple[int, int, int, int]]
    """Backward events ``(owner code, kind, stamp, thread)``: a code ``>= 0`` is a hooked
    node (its owner call is ``node_owner[code]``), ``-1 - k`` the ``k``-th AccumulateGrad."""
    node_owner: list[int]
    accumulate_module: tuple[int, ...]
    """Module index of each AccumulateGrad number (``-1``: consumed outside every call)."""
    resolved_ns: Floats | None = None
    """CUDA: every stamp already read, in the order of :meth:`stamps`."""

    def stamps(self) -> list[int]:
        """Every stamp: the calls' starts, their ends (a call that did not return: its
        start), the marks', the backward events'."""
        return [*self.start, *(self.end.get(i, s) for i, s in enumerate(self.start)),
                *(t for _, t in self.marks), *(event[2] for event in self.events)]


@dataclass
class IterationTimes:
    """One iteration in nanoseconds, per call (execution order); ``calls`` per module (indexed
    like ``named_modules()``). Backward values are ``nan`` without backward events."""

    call_module: Ints
    call_number: Ints
    call_parent: Ints
    call_done: NDArray[np.bool_]
    """Calls whose forward returned (an unfinished call reads 0)."""
    call_fwd_inclusive: Floats
    call_fwd_exclusive: Floats
    call_bwd_inclusive: Floats
    call_bwd_exclusive: Floats
    calls: Ints
    """Finished calls per module."""
    marks: dict[str, float] = field(default_factory=dict)
    """Named marks, ns from the iteration's first stamp."""
    bwd_unattributed: float = math.nan
    """Backward time of nodes created outside every module call (the loss)."""


def marks_span_ns(raw: RawIteration) -> float:
    """Nanoseconds from an iteration's first named mark to its last (the whole iteration),
    read without resolving its calls: what a stopping rule looks at between rounds. The same
    span as the marks of :func:`resolve_iteration`; ``nan`` with fewer than two marks."""
    if len(raw.marks) < 2:
        return math.nan
    if raw.resolved_ns is not None:  # CUDA: start, end, then the marks, already read
        first = 2 * len(raw.start)
        return float(raw.resolved_ns[first + len(raw.marks) - 1] - raw.resolved_ns[first])
    return float(raw.marks[-1][1] - raw.marks[0][1])


def resolve_iteration(raw: RawIteration, ns: Floats, module_index: dict[int, int]
                      ) -> IterationTimes:
    """The times of one iteration from its :meth:`~RawIteration.stamps` read as ``ns``;
    ``module_index`` maps ``id(module)`` to its position."""
    n = len(raw.calls)
    call_parent = np.fromiter((-1 if c.parent is None else c.parent for c in raw.calls),
                              np.int64, n)
    done = np.fromiter((i in raw.end for i in range(n)), bool, n)
    inclusive = np.where(done, ns[n:2 * n] - ns[:n], 0.0)
    exclusive = inclusive - _child_sums(call_parent, inclusive)
    # stamps are whole nanoseconds: adding the self times back up gives the inclusive times
    # exactly
    times = iteration_of_own(raw.calls, module_index, exclusive, done=done)
    times.marks = {name: float(ns[2 * n + k]) for k, (name, _) in enumerate(raw.marks)}
    if raw.events:
        _resolve_backward(times, raw, ns[2 * n + len(raw.marks):])
    return times


def _resolve_backward(times: IterationTimes, raw: RawIteration, event_ns: Floats) -> None:
    call_module = times.call_module
    n = len(call_module)
    first_call: dict[int, int] = {}
    for call, module in enumerate(call_module.tolist()):
        first_call.setdefault(module, call)
    own = np.zeros(n + 1)  # last slot: nodes of no call
    previous: dict[int, float] = {}
    for (code, kind, _, thread), t in zip(raw.events, event_ns.tolist()):
        before = previous.get(thread)
        previous[thread] = t
        if kind == START or before is None:
            continue
        if code >= 0:
            owner = raw.node_owner[code]
        else:  # AccumulateGrad: the first call, this iteration, of the consuming module
            owner = first_call.get(raw.accumulate_module[-1 - code], -1)
        own[owner if owner >= 0 else n] += t - before
    _set_backward(times, own[:n])
    times.bwd_unattributed = float(own[n])


def _set_backward(times: IterationTimes, own: Floats) -> None:
    """Fill the backward times of ``times`` from each call's own backward time."""
    times.call_bwd_exclusive = own
    times.call_bwd_inclusive = inclusive_of_own(times.call_parent, own)


def inclusive_of_own(call_parent: Ints, own: Floats) -> Floats:
    """Each call's ``own`` value plus that of every call made inside it
    (:func:`~moduleprofiler.records.subtree_totals`)."""
    parents = [None if parent < 0 else parent for parent in call_parent.tolist()]
    return np.asarray(subtree_totals(own.tolist(), parents), dtype=np.float64)


def iteration_of_own(calls: list[Call], module_index: dict[int, int], forward_own: Floats,
                     backward_own: Floats | None = None,
                     done: NDArray[np.bool_] | None = None) -> IterationTimes:
    """One iteration from each call's *own* time (ns), forward and optionally backward:
    inclusive times add the calls made inside. ``done``: the calls whose forward returned
    (default: those that did not fail)."""
    n = len(calls)
    call_module = np.fromiter((module_index[id(c.module)] for c in calls), np.int64, n)
    call_parent = np.fromiter((-1 if c.parent is None else c.parent for c in calls),
                              np.int64, n)
    if done is None:
        done = np.fromiter((not c.failed for c in calls), bool, n)
    times = IterationTimes(
        call_module=call_module,
        call_number=np.fromiter((c.call_number for c in calls), np.int64, n),
        call_parent=call_parent,
        call_done=done,
        call_fwd_inclusive=inclusive_of_own(call_parent, forward_own),
        call_fwd_exclusive=forward_own,
        call_bwd_inclusive=np.full(n, np.nan),
        call_bwd_exclusive=np.full(n, np.nan),
        calls=np.bincount(call_module, weights=done,
                          minlength=len(module_index)).astype(np.int64),
    )
    if backward_own is not None:
        _set_backward(times, backward_own)
    return times


def _child_sums(call_parent: Ints, values: Floats) -> Floats:
    """For each call, the sum of ``values`` over its direct children."""
    n = len(call_parent)
    has_parent = call_parent >= 0
    out: Floats = np.bincount(call_parent[has_parent], weights=values[has_parent],
                              minlength=n).astype(np.float64)[:n]
    return out

