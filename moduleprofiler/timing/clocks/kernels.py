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
call. An activation checkpoint's rerun of a call inside the backward, and each node of the graph
a reentrant checkpoint rebuilds, get ranges ``<iteration>:r<call index>``: backward work of the
call repeated (:mod:`moduleprofiler.reruns`). Kernel durations do not depend on how far ahead
of the device the host was, so the numbers hold whether the run is host-bound or device-bound,
and whatever the ranges and the profiler cost the host.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar, cast

import numpy as np
import torch
from numpy.typing import NDArray
from torch.utils.hooks import RemovableHandle

from moduleprofiler import devices
from moduleprofiler.call import Call
from moduleprofiler.export.columns import ColumnSpec
from moduleprofiler.facts import HookFreeTrace
from moduleprofiler.records import subtree_totals
from moduleprofiler.runner import Listener, PassRunner, SequenceMap
from moduleprofiler.timing.booking import Activity, Booking, book, busiest_device_ns, busy_ns
from moduleprofiler.timing.clocks.kernel_columns import DEVICE_COLUMNS
from moduleprofiler.timing.clocks.protocol import Clock, Readings
from moduleprofiler.timing.device_results import DeviceIteration
from moduleprofiler.timing.device_trace import (
    ENGINE_PREFIX,
    TraceRecords,
    close_range,
    device_trace,
    open_range,
    sessions_entered,
)
from moduleprofiler.timing.graph import CallGraph
from moduleprofiler.timing.iteration import iteration_of_own
from moduleprofiler.timing.listener import Step, no_mark, stamped_block
from moduleprofiler.timing.loop import Block
from moduleprofiler.timing.ranges import CallRanges

Trace = Callable[[torch.device], AbstractContextManager[TraceRecords]]
"""A profiler session on a device that yields its records, filled when it ends
(:func:`~moduleprofiler.timing.device_trace.device_trace`)."""


class KernelRanges(CallRanges):
    """Names module calls (and the ``AccumulateGrad`` nodes of their parameters) with ranges
    the device's kernel records are booked to.

    Usage: on a runner, ``with runner.installed(only=[ranges]), ranges.traced(device) as
    block:`` any number of ``ranges.run(invoke)``; after the ``with``, ``block.iterations``
    holds the results."""

    def __init__(self, backward: bool = False) -> None:
        super().__init__(backward)
        self.module_index: dict[int, int] = {}
        self._iteration = 0
        self._calls: list[list[Call]] = []
        self._sequences: list[SequenceMap] = []
        # by id(node): the node (kept alive, so that its id is not reused) and its two hooks
        self._accumulate: dict[int, tuple[Any, RemovableHandle, RemovableHandle]] = {}

    # -- the runner's events (hot path): ranges opened and closed by CallRanges ----------
    _begin = staticmethod(open_range)
    _close = staticmethod(close_range)

    def _label(self, call: Call) -> str:
        return f"{self._iteration}:f{call.index}"

    def _backward_label(self, call: Call) -> str:
        return f"{self._iteration}:r{call.index}"

    # -- iterations ------------------------------------------------------------------------
    def start(self, runner: PassRunner) -> None:
        """The hooks are installed: remember the runner and its module order."""
        super().start(runner)
        self.module_index = {id(m): i for i, m in enumerate(runner.modules)}

    def stop(self, runner: PassRunner) -> None:
        """Close what a raising forward left open; unhook the parameters' accumulation nodes
        (which a live graph keeps across iterations)."""
        super().stop(runner)
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
    def traced(self, device: torch.device, trace: Trace = device_trace) -> Iterator[TracedBlock]:
        """Run the block's iterations inside one profiler session (``trace``); its results
        are booked when the block ends."""
        self._calls, self._sequences = [], []
        block = TracedBlock()
        with trace(device) as records:
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
        # each call's forward activities with its children's (every call has a list: none
        # is unknown)
        inclusive = cast(list[list[Activity]],
                         subtree_totals(forward, [call.parent for call in calls]))
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
        accumulate, rerun = f"{k}:a", f"{k}:r"
        for label, acts in booking.own.items():
            if label.startswith(accumulate):
                call_index = first_call.get(int(label[len(accumulate):]))
                if call_index is not None:
                    own[call_index] += sum(a.duration for a in acts)
            elif label.startswith(rerun):  # a checkpoint's rerun of the call, its rebuilt nodes
                own[int(label[len(rerun):])] += sum(a.duration for a in acts)
        return own

    # -- backward ranges -------------------------------------------------------------------
    def _name_rebuilt(self, graph: CallGraph) -> None:
        """The graph a reentrant checkpoint rebuilt runs in a nested backward whose nodes'
        sequence numbers come from the thread that reran the forward (on CUDA not the
        forward's, so the engine's ranges cannot say whose they are): each node gets a range of
        the call that created it in the rerun."""
        self._name_nodes(graph)
        self._name_accumulate(graph)

    def _name_accumulate(self, graph: CallGraph) -> None:
        for node, module in graph.accumulate:
            if module is None or id(node) in self._accumulate:
                continue  # an input's .grad is the caller's work; hooked nodes stay hooked
            # the node outlives the iteration: its label reads the iteration when it runs
            self._accumulate[id(node)] = (node, *self._name_node(
                node, self._accumulate_label(self.module_index.get(id(module), -1))))

    def _accumulate_label(self, module: int) -> Callable[[], str]:
        return lambda: f"{self._iteration}:a{module}"

    _name_graph = _name_accumulate  # the forward's nodes are named by the engine's ranges


@dataclass
class TracedBlock:
    """The iterations of one :meth:`KernelRanges.traced` block, filled when it ends."""

    iterations: list[DeviceIteration] | None = None
    outside_ns: float = 0.0
    """Device time of activities launched outside every range (the loss, the optimizer, the
    input's copy...)."""


def traced_share(count: int) -> int:
    """Traced iterations beside ``count`` hooked ones: a quarter, at least one. Also the
    traced block's own minimum beside the loop's ``min_iters``: a module whose device time
    comes from fewer is low-confidence (``device_low_confidence``)."""
    return max(1, count // 4)


UNPROFILED_WARMUP = (2, 0.25)
"""Hook-free iterations warmed up before the first kernel-record session: at least the first
number, and for at least the second's seconds (a fresh model's first iterations pick kernels,
load their code and wake the GPU's clocks)."""
UNPROFILED_ITERATIONS = (3, 20, 1.0)
"""Then the kept ones: at least the first number, at most the second, within the third's
seconds."""


def _before_sessions(block: Callable[[int, bool], None]) -> None:
    """Run the hook-free ``block`` as :data:`UNPROFILED_WARMUP` and
    :data:`UNPROFILED_ITERATIONS` say."""
    least, seconds = UNPROFILED_WARMUP
    start = time.perf_counter()
    warm = 0
    while warm < least or time.perf_counter() - start < seconds:
        block(1, False)
        warm += 1
    least, most, seconds = UNPROFILED_ITERATIONS
    start = time.perf_counter()
    for done in range(int(most)):
        if done >= least and time.perf_counter() - start >= seconds:
            return
        block(1, True)


class KernelClock(Clock):
    """Device time from the device's own kernel records, host time from the CPU clock: the
    :class:`~.protocol.Clock` for CUDA where the records can be had.

    Its listener names every call with a range (:class:`KernelRanges`); its own block runs a
    quarter of each round's iterations inside one profiler session (``trace``; none in the
    warm-up; one run first, not kept: the first session starts CUPTI, which takes seconds)."""

    name = "cuda-kernels"
    overhead_caveat = "host times include the hooks' share; device times do not"
    columns: ClassVar[tuple[ColumnSpec, ...]] = DEVICE_COLUMNS
    """Its column block (:mod:`.kernel_columns`): device and host times, launches, idle."""

    def __init__(self, device: torch.device, backward: bool = False,
                 trace: Trace = device_trace) -> None:
        super().__init__(devices.CPU, backward)  # host times on the CPU's clock
        self.device = device
        self.ranges = KernelRanges(backward)
        self.trace = trace
        self.traced: list[DeviceIteration] = []
        self.outside_ns = 0.0
        """Device time of the kept traced iterations' work launched outside every call."""
        self.hook_free: HookFreeTrace | None = None
        self.unprofiled: list[dict[str, float]] = []
        """Marks of the hook-free iterations run before the process's first kernel-record
        session (:meth:`prime`): the latency of the user's unprofiled run."""
        self._prime: Callable[[], None] | None = None
        self._unprofiled: Callable[[], None] | None = None
        self._forward_only = not backward  # a forward pass: its hook-free latency is reported

    def listeners(self) -> Sequence[Listener]:
        """The ranges the kernel records are booked to."""
        return (self.ranges,)

    @contextmanager
    def _session(self, runner: PassRunner, keep: bool) -> Iterator[Callable[[], None]]:
        with runner.installed(only=[self.ranges]), \
                self.ranges.traced(self.device, self.trace) as block:
            yield self.ranges.begin
        if keep and block.iterations:  # the iterations that made module calls
            self.traced.extend(step for step in block.iterations if step.call_launches.size)
            self.outside_ns += block.outside_ns

    def session(self, runner: PassRunner) -> AbstractContextManager[Callable[[], None]]:
        """Steps the user runs inside one profiler session, booked and kept when it ends."""
        return self._session(runner, True)

    def blocks(self, runner: PassRunner, step: Step) -> list[Block]:
        """Traced iterations of ``step``: a quarter of a round's count (:func:`traced_share`),
        none in the warm-up, at least a quarter of ``min_iters`` in a run that meets its
        target."""
        def traced(count: int, keep: bool) -> None:
            with self._session(runner, keep) as begin:
                for _ in range(count):
                    step(no_mark, lambda invoke: (begin(), runner.run(invoke))[1])

        self._prime = partial(traced, 1, False)
        if self._forward_only:
            self._unprofiled = partial(_before_sessions,
                                       stamped_block(self.stamps, step, self.unprofiled))
        return [Block(traced, share=traced_share, warm=False, least=traced_share)]

    def prime(self) -> None:
        """One traced iteration, not kept: the first session starts CUPTI. Before it, in a
        forward pass when no kernel-record session has run in this process, a few hook-free
        iterations (:func:`_before_sessions`): once CUPTI is attached it stays, and every
        launch costs the host more (1.32 to 1.68 times in tight loops on an H200's host), so
        only those iterations time what the user's unprofiled run takes."""
        # the primer closes over the pass's runner: let go of it once used, so that a clock
        # kept after its pass keeps no runner, listeners or modules alive
        primer, self._prime = self._prime, None
        unprofiled, self._unprofiled = self._unprofiled, None
        if unprofiled is not None and not sessions_entered():
            unprofiled()
        if primer is not None:
            primer()

    def settle(self) -> None:
        """Host stamps: a phase ends when the device has done its work."""
        devices.synchronize(self.device)

    def finish(self, invoke: Callable[[], Any], plain: list[dict[str, float]]) -> None:
        """One traced hook-free call: how busy the device is when nothing is measured."""
        if not plain:
            return
        with self.trace(self.device) as records:
            invoke()
        timed = self.unprofiled or plain
        self.hook_free = HookFreeTrace(
            host_ms=float(np.median([m["issued"] - m["start"] for m in timed])) / 1e6,
            device_ms=busiest_device_ns(records.activities) / 1e6,
            launches=len(records.activities),
            devices=len({activity.device for activity in records.activities}) or 1,
            latency_ms=float(np.median([m["end"] - m["start"] for m in timed])) / 1e6,
            unprofiled=bool(self.unprofiled))

    def readings(self) -> Readings:
        """The traced iterations (their device times become the result's, the host's
        stamps beside them; without traced iterations, the host's alone)."""
        if not self.traced:
            return Readings(clock=self.stamps.kind)
        booked = sum(it.total_ns for it in self.traced) / 1e6
        return Readings(self.traced, booked, booked + self.outside_ns / 1e6, self.hook_free,
                        clock=self.name, notes=[self.hook_free.sentence()]
                        if self.hook_free is not None else [])
