"""The kernel clock: each module call's *device* time from the device's own kernel records.

The listener names every module call with a host range (``<iteration>:f<call index>``). A
block of iterations runs inside one PyTorch profiler session (CUPTI through kineto);
afterwards every kernel, copy and set the device ran is booked to the innermost range around
its launch (:mod:`.booking`), and a call's device time is the summed duration of what it
launched. Backward (``backward``): the profiler's own range around each autograd node's
evaluation carries the node's sequence number, and the runner's map from sequence numbers to
forward calls (:meth:`~moduleprofiler.runner.PassRunner.sequence_map`) gives the call that
created the node, so no hook runs on those nodes; the evaluation range also holds the engine's
adding of gradients that a tensor received from several consumers (residual streams), which a
node's own hooks would leave out. Only a parameter's ``AccumulateGrad`` node (no sequence
number) gets a range of its own, ``<iteration>:a<module index>``, booked to that module's first
call. Kernel durations do not depend on how far ahead of the device the host was, so the
numbers hold whether the run is host-bound or device-bound, and whatever the ranges and the
profiler cost the host.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn
from torch.utils.hooks import RemovableHandle

from moduleprofiler.runner import Call, PassRunner, SequenceMap
from moduleprofiler.timing.booking import Activity, Booking, book, busy_ns
from moduleprofiler.timing.device_trace import (
    ENGINE_PREFIX,
    close_range,
    device_trace,
    open_range,
)
from moduleprofiler.timing.graph import call_graph
from moduleprofiler.timing.iteration import IterationTimes, iteration_of_own
from moduleprofiler.timing.ranges import CallRanges


@dataclass
class DeviceIteration:
    """One traced iteration: device times (ns) per call and module, launches and busy time."""

    times: IterationTimes
    """Forward (and backward) device time, own and inclusive, as for any clock."""
    call_launches: NDArray[np.int64]
    """Device activities (kernels, copies, sets) each call launched in its forward, with its
    children's."""
    call_busy_ns: NDArray[np.float64]
    """Time the device ran at least one of the call's forward activities (children's too)."""
    call_span_ns: NDArray[np.float64]
    """From the start of the call's first forward activity to the end of its last."""
    total_ns: float
    """Device time booked to the iteration's calls, forward and backward."""


class KernelClock(CallRanges):
    """Names module calls (and the ``AccumulateGrad`` nodes of their parameters) with ranges
    the device's kernel records are booked to.

    Usage: ``clock = KernelClock.on(model, backward)``, then ``with clock.installed(),
    clock.traced(device) as block:`` any number of ``clock.run(invoke)``; after the
    ``with``, ``block.iterations`` holds the results."""

    def __init__(self, backward: bool = False) -> None:
        super().__init__(backward)
        self.runner: PassRunner | None = None
        self.module_index: dict[int, int] = {}
        self._iteration = 0
        self._calls: list[list[Call]] = []
        self._sequences: list[SequenceMap] = []
        # by id(node): the node (kept alive, so that its id is not reused) and its two hooks
        self._accumulate: dict[int, tuple[Any, RemovableHandle, RemovableHandle]] = {}

    @classmethod
    def on(cls, root: nn.Module, backward: bool = False) -> KernelClock:
        """A kernel clock on a runner of its own over ``root`` (hooks not installed yet)."""
        clock = cls(backward)
        clock.runner = PassRunner(root, [clock])
        clock.module_index = {id(m): i for i, m in enumerate(clock.runner.modules)}
        return clock

    # -- the runner's events (hot path): ranges opened and closed by CallRanges ----------
    _begin = staticmethod(open_range)
    _close = staticmethod(close_range)

    def _label(self, call: Call) -> str:
        return f"{self._iteration}:f{call.index}"

    # -- iterations ------------------------------------------------------------------------
    @contextmanager
    def installed(self) -> Iterator[KernelClock]:
        """Keep the hooks installed for the block; parameters' accumulation nodes (which a
        live graph keeps across iterations) are unhooked when it ends."""
        assert self.runner is not None, "KernelClock.on(...) first"
        try:
            with self.runner.installed():
                yield self
        finally:
            for _, *handles in self._accumulate.values():
                for handle in handles:
                    handle.remove()
            self._accumulate.clear()

    def begin(self) -> None:
        """Start an iteration: the calls from now on (the model called directly, as in a
        user's own training loop) are its calls."""
        runner = self.runner
        assert runner is not None
        runner.reset()
        self._iteration = len(self._calls)
        self._calls.append(runner.calls)
        self._sequences.append(runner.sequence_map())

    def run(self, invoke: Callable[[], Any]) -> Any:
        """One iteration: ``invoke()`` with every call named; a failing forward names its
        module."""
        assert self.runner is not None
        self.begin()
        return self.runner.run(invoke)

    @contextmanager
    def traced(self, device: torch.device) -> Iterator[TracedBlock]:
        """Run the block's iterations inside one profiler session; its results are booked
        when the block ends."""
        self._calls, self._sequences = [], []
        block = TracedBlock()
        with device_trace(device) as records:
            yield block
        booking = book(records.ranges, records.launches, records.activities)
        engine = self._engine_ns(booking) if self.wants_nodes else {}
        block.iterations = [self._iteration_of(k, calls, booking, engine.get(k, {}))
                            for k, calls in enumerate(self._calls)]
        block.outside_ns = float(sum(a.duration for a in booking.outside)
                                 + engine.get(-1, {}).get(-1, 0.0))

    # -- booking ---------------------------------------------------------------------------
    def _engine_ns(self, booking: Booking) -> dict[int, dict[int, float]]:
        """Device time of the autograd nodes' evaluations, by iteration and owner call index
        (``-1``: a node no call created, such as the loss's, or no iteration's)."""
        firsts = [sequence.first for sequence in self._sequences]
        out: dict[int, dict[int, float]] = {}
        for label, activities in booking.own.items():
            if not label.startswith(ENGINE_PREFIX):
                continue
            number = int(label[len(ENGINE_PREFIX):])
            k = max((i for i, first in enumerate(firsts)
                     if first is not None and first <= number), default=-1)
            owner = self._sequences[k].owner(number) if k >= 0 else None
            slot = out.setdefault(k if owner is not None else -1, {})
            index = owner.index if owner is not None else -1
            slot[index] = slot.get(index, 0.0) + sum(a.duration for a in activities)
        return out

    def _iteration_of(self, k: int, calls: list[Call], booking: Booking,
                      engine: dict[int, float]) -> DeviceIteration:
        n = len(calls)
        forward = [booking.own.get(f"{k}:f{i}", []) for i in range(n)]
        times = iteration_of_own(calls, self.module_index,
                                 np.asarray([sum(a.duration for a in acts) for acts in forward],
                                            dtype=np.float64),
                                 self._backward_own(k, calls, booking, engine))
        # each call's forward activities with its children's: children come after parents
        inclusive: list[list[Activity]] = [list(acts) for acts in forward]
        for call in range(n - 1, -1, -1):
            parent = calls[call].parent
            if parent is not None:
                inclusive[parent].extend(inclusive[call])
        spans = [max(a.end for a in acts) - min(a.start for a in acts) if acts else 0
                 for acts in inclusive]
        booked = float(np.sum(times.call_fwd_exclusive))
        if self.wants_nodes:
            booked += float(np.sum(times.call_bwd_exclusive))
        return DeviceIteration(
            times=times,
            call_launches=np.asarray([len(acts) for acts in inclusive], dtype=np.int64),
            call_busy_ns=np.asarray([busy_ns(acts) for acts in inclusive], dtype=np.float64),
            call_span_ns=np.asarray(spans, dtype=np.float64),
            total_ns=booked,
        )

    def _backward_own(self, k: int, calls: list[Call], booking: Booking,
                      engine: dict[int, float]) -> NDArray[np.float64] | None:
        if not self.wants_nodes:
            return None
        own = np.asarray([engine.get(i, 0.0) for i in range(len(calls))], dtype=np.float64)
        first_call: dict[int, int] = {}
        for call in calls:
            first_call.setdefault(self.module_index[id(call.module)], call.index)
        prefix = f"{k}:a"
        for label, acts in booking.own.items():
            if label.startswith(prefix):
                call_index = first_call.get(int(label[len(prefix):]))
                if call_index is not None:
                    own[call_index] += sum(a.duration for a in acts)
        return own

    # -- backward ranges -------------------------------------------------------------------
    def _name_graph(self, outer: Call, output: Any) -> None:
        runner = self.runner
        assert runner is not None
        for node, consumer in call_graph(runner, outer, output).accumulate:
            owned = consumer >= 0 and runner.owner_of_node(node) is not None
            if not owned or id(node) in self._accumulate:
                continue  # an input's .grad is the caller's work; hooked nodes stay hooked
            module = self.module_index.get(id(runner.calls[consumer].module), -1)
            # the node outlives the iteration: its label reads the iteration when it runs
            self._accumulate[id(node)] = (node, *self._name_node(
                node, self._accumulate_label(module)))

    def _accumulate_label(self, module: int) -> Callable[[], str]:
        return lambda: f"{self._iteration}:a{module}"


@dataclass
class TracedBlock:
    """The iterations of one :meth:`KernelClock.traced` block, filled when it ends."""

    iterations: list[DeviceIteration] | None = None
    outside_ns: float = 0.0
    """Device time of activities launched outside every range (the loss, the optimizer, the
    input's copy...)."""
