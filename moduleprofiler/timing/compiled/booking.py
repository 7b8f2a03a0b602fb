"""Booking a compiled model's kernel records to the kernels of its graphs, and so to modules.

A compiled graph runs as one host range (``## Call CompiledFxGraph <key> ##``). Inside it, a
kernel Inductor generated shows up under its own name (on CUDA the device kernel's name; on a
CPU the kernel's host range, ``graph_0_cpp_fused_add_relu_1``); an extern kernel shows up as the
ATen operator's range (``aten::convolution``) directly inside the graph's range, with the device
kernels it launched (cuDNN, cuBLAS...) inside that. The n-th occurrence of a name in one call of
a graph is the n-th kernel of that name in the graph's call order (:mod:`.kernels`).

This module is pure: plain records in, per-module sums out, so that the rules are tested
without compiling or profiling.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections import Counter, defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from moduleprofiler.timing.compiled.kernels import CompiledKernel, common_ancestor

_PREPARES = ("Memset", "Memcpy")
"""How the device names a memset or copy (``Memset (Device)``): work that prepares the kernel
after it."""

_GRAPH_PREFIX = re.compile(r"^graph_\d+_")
"""The prefix a CPU kernel's profiler range puts before the kernel's name."""


@dataclass(frozen=True)
class GraphCall:
    """One call of compiled graph ``key``: ``[start, end]`` ns on ``thread``, in iteration
    ``iteration`` of the traced block."""

    key: str
    thread: int
    start: int
    end: int
    iteration: int = 0


@dataclass(frozen=True)
class ModuleRange:
    """One call of an eager module of the timed program (compiled submodules inside an eager
    model): ``[start, end]`` ns on ``thread``, in iteration ``iteration``; ranges nest as the
    calls do."""

    path: str
    thread: int
    start: int
    end: int
    iteration: int = 0


@dataclass(frozen=True)
class HostOp:
    """An operator's host range (``aten::mm``...) on ``thread``."""

    name: str
    thread: int
    start: int
    end: int


@dataclass(frozen=True)
class KernelRecord:
    """A kernel's measured duration, with the host point (thread, time) that launched it: on
    CUDA its launch call, on a CPU the start of its own host range. ``start``: when it ran
    (on CUDA the device's clock), which orders the kernels one launch made (a CUDA graph's
    replay)."""

    name: str
    duration: int
    thread: int
    time: int
    start: int = 0
    launch: str = ""
    """The kernel's launch configuration as the device recorded it (grid, block, registers
    per thread, shared memory: :func:`~moduleprofiler.timing.compiled.trace.
    launch_configuration`); ``""`` where none was read (a CPU's kernel ranges, a memset)."""


@dataclass(frozen=True)
class KernelKey:
    """A kernel of a compiled graph: the graph's key, the kernel's position in it, and which
    of the graphs sharing that key (0: the first compiled)."""

    graph: str
    position: int
    version: int = 0


@dataclass
class CompiledBooking:
    """Kernel time per module, per iteration, and what could not be booked."""

    iterations: int
    module_ns: dict[str, list[int]] = field(default_factory=dict)
    """Per module path, its own forward kernel time in each iteration."""
    backward_ns: dict[str, list[int]] = field(default_factory=dict)
    """Per module path, the time of the backward graphs' kernels booked to it (those that
    differentiate its forward nodes) in each iteration."""
    kernel_ns: dict[KernelKey, list[int]] = field(default_factory=dict)
    """Per graph kernel, its time in each iteration."""
    device_names: dict[KernelKey, Counter[str]] = field(
        default_factory=lambda: defaultdict(Counter))
    """Per graph kernel, the names of the device kernels (or CPU kernel ranges) booked to it,
    counted: which cuDNN or cuBLAS kernels an extern kernel ran."""
    launch_configs: dict[KernelKey, Counter[tuple[str, str]]] = field(
        default_factory=lambda: defaultdict(Counter))
    """Per graph kernel, the ``(device kernel name, launch configuration)`` pairs booked to
    it, counted (records without a configuration left out): two runs whose kernels have the
    same names may still differ in their grids or tiles' resources."""
    in_graph_ns: list[int] = field(default_factory=list)
    """Per iteration, the time of every kernel launched inside a compiled graph's call."""
    backward_in_graph_ns: list[int] = field(default_factory=list)
    """Per iteration, that of the backward graphs' calls alone."""
    eager_ns: list[int] = field(default_factory=list)
    """Per iteration, the time of every kernel launched by an eager module's code (outside
    the compiled graphs' calls, inside a module's range): all booked to modules."""
    direct_launches: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    """Per module path, kernels booked to it without a graph kernel of their own: those its
    eager code launched, and a CUDA graph's copies of its inputs (the graph's own)."""
    unmatched: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    """Kernels inside a graph's call that matched none of its kernels: name -> time."""
    replays: int = 0
    """Host launches inside graph calls that ran several kernels: CUDA graphs' replays."""
    replayed: int = 0
    """Kernels those replays ran."""
    outside_ns: int = 0
    """Kernel time launched outside every graph call (inputs' copies, eager code between
    graphs...)."""

    @property
    def kernel_launches(self) -> dict[KernelKey, int]:
        """Device kernels (or CPU kernel ranges) booked to each graph kernel."""
        return {key: sum(names.values()) for key, names in self.device_names.items()}

    @property
    def booked_ns(self) -> list[int]:
        """Per iteration, the kernel time booked to modules, forward and backward."""
        return [sum(times[k] for times in (*self.module_ns.values(),
                                           *self.backward_ns.values()))
                for k in range(self.iterations)]

    @property
    def backward_coverage(self) -> float | None:
        """Booked share of the backward graphs' kernel time (``None`` when none ran)."""
        total = sum(self.backward_in_graph_ns)
        booked = sum(sum(times) for times in self.backward_ns.values())
        return booked / total if total else None

    @property
    def coverage(self) -> float | None:
        """Booked share of the compiled graphs' kernel time, and of the eager modules' where
        there are some (``None`` when none ran)."""
        total = sum(self.in_graph_ns) + sum(self.eager_ns)
        return sum(self.booked_ns) / total if total else None


def _innermost(spans: Sequence[tuple[int, int, int]], starts: Sequence[int],
               time: int) -> int | None:
    """Index of the last span (sorted by start) that started at or before ``time`` and is still
    open then; spans of one kind do not nest, so that is the one."""
    at = bisect_right(starts, time) - 1
    if at >= 0 and spans[at][1] >= time:
        return spans[at][2]
    return None


def _spans(calls: Sequence[GraphCall]) -> tuple[dict[int, list[tuple[int, int, int]]],
                                                 dict[int, list[int]]]:
    """Per thread, the calls' ``(start, end, index)`` sorted by start, and the starts."""
    spans: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for index, call in enumerate(calls):
        spans[call.thread].append((call.start, call.end, index))
    for thread_spans in spans.values():
        thread_spans.sort()
    return spans, {t: [s[0] for s in thread_spans] for t, thread_spans in spans.items()}


_OPERATOR = re.compile(r"^\w+::\w")
"""An operator's range (``aten::addmm``, ``mylib::op``), not a wrapper's (Dynamo's, Inductor's
runtime ranges, the graphs' calls, the modules' ranges)."""


def _innermost_range(ranges: Sequence[ModuleRange], starts: Sequence[int],
                     time: int) -> ModuleRange | None:
    """The innermost of nested ``ranges`` (one thread's, sorted by start) open at ``time``:
    the latest-starting one that contains it."""
    at = bisect_right(starts, time) - 1
    while at >= 0:
        if ranges[at].end >= time:
            return ranges[at]
        at -= 1
    return None


def _range_index(ranges: Iterable[ModuleRange]) -> dict[int, tuple[list[ModuleRange],
                                                                    list[int]]]:
    by_thread: dict[int, list[ModuleRange]] = defaultdict(list)
    for item in ranges:
        by_thread[item.thread].append(item)
    out = {}
    for thread, items in by_thread.items():
        items.sort(key=lambda r: (r.start, -r.end))
        out[thread] = (items, [r.start for r in items])
    return out


def _outermost_eager(calls: Sequence[GraphCall], ops: Iterable[HostOp],
                     threads: Collection[int] | None = None) -> list[HostOp]:
    """The operators that ran outside every graph call (and hold none), inside no other
    operator (an operator's own time holds the operators it calls); ``threads``: only on
    those."""
    spans, starts = _spans(calls)
    found: list[HostOp] = []
    last_end: dict[int, int] = {}
    for op in sorted(ops, key=lambda o: (o.thread, o.start, -o.end)):
        if (threads is not None and op.thread not in threads) or not _OPERATOR.match(op.name):
            continue
        if op.end <= last_end.get(op.thread, -1):
            continue  # inside the previous operator
        last_end[op.thread] = op.end
        if op.thread in spans and (
                _innermost(spans[op.thread], starts[op.thread], op.start) is not None
                or bisect_right(starts[op.thread], op.end) > bisect_right(
                    starts[op.thread], op.start)):
            continue  # a compiled graph's (or around one)
        found.append(op)
    return found


def eager_ops(ranges: Iterable[ModuleRange], calls: Sequence[GraphCall],
              ops: Iterable[HostOp]) -> list[HostOp]:
    """On a CPU, the eager modules' kernels: the operators that started inside a module's
    range, outside every graph call, and inside no other operator."""
    index = _range_index(ranges)
    return [op for op in _outermost_eager(calls, ops, index)
            if _innermost_range(*index[op.thread], op.start) is not None]


def outside_ops(calls: Sequence[GraphCall], ops: Iterable[HostOp]) -> list[HostOp]:
    """On a CPU, the operators a model compiled whole ran outside every graph call, inside no
    other operator: code Dynamo left to run eagerly (a ``torch.nn`` container's forward
    resumed after a graph break in a child, ``.item()``...), booked to no module (the
    ``outside_ns`` of a CUDA run's kernels launched there)."""
    return _outermost_eager(calls, ops)


def top_level_ops(calls: Sequence[GraphCall],
                  ops: Iterable[HostOp]) -> dict[GraphCall, list[HostOp]]:
    """The operators directly inside each graph call (not inside another operator of it),
    in order: a CPU's kernels, and every platform's extern kernels."""
    spans, starts = _spans(calls)
    found: dict[GraphCall, list[HostOp]] = defaultdict(list)
    for op in sorted(ops, key=lambda o: (o.start, -o.end)):
        if op.thread not in spans:
            continue
        index = _innermost(spans[op.thread], starts[op.thread], op.start)
        if index is None or op.end > calls[index].end:
            continue
        siblings = found[calls[index]]
        if siblings and siblings[-1].end >= op.end:
            continue  # nested inside the previous operator of this call
        siblings.append(op)
    return found


def book_compiled(graphs: Mapping[str, Sequence[CompiledKernel]], calls: Iterable[GraphCall],
                  ops: Iterable[HostOp], kernels: Iterable[KernelRecord],
                  iterations: int,
                  versions: Mapping[str, Sequence[Sequence[CompiledKernel]]] | None = None,
                  ranges: Iterable[ModuleRange] = (),
                  backward: Collection[str] = ()) -> CompiledBooking:
    """Book every kernel record to its graph's kernel and that kernel's module.

    ``graphs``: each compiled graph's kernels by its key; ``calls``: the graphs' calls;
    ``ops``: the host operator ranges (only those directly inside a graph call count, the
    extern kernels); ``kernels``: what ran, with its launch point. ``versions``: for a key
    that several graphs share (the same code traced in several places, such as a block's
    graph after a graph break in each of several blocks), each one's kernels in the order they
    were compiled, which is the order of their first calls: the n-th call of that key in an
    iteration is the n-th graph's.
    ``ranges``: the eager modules' calls (compiled submodules inside an eager model); a kernel
    launched outside every graph call is booked to the innermost of them around its launch.
    ``backward``: the keys of the backward graphs, whose kernels are booked as the modules'
    backward time (:attr:`CompiledBooking.backward_ns`).

    A CUDA graph's replay (``mode="reduce-overhead"``, ``"max-autotune"``) launches all of a
    graph's kernels at one host point, with no ATen operator's range around its extern
    kernels: there a kernel no name matches is the next extern kernel of the graph (in the
    order the device ran them), or the one just booked (a GEMM's split-K reduction); a kernel
    an operator of the call launched that is none of the graph's kernels (a CUDA graph's
    copy of its inputs into its static buffers) is the graph's own work, booked to the
    deepest module holding all of it.
    """
    calls = sorted(calls, key=lambda c: (c.thread, c.start))
    of_call = _call_kernels(calls, graphs, versions or {})
    call_spans, call_starts = _spans(calls)
    by_call = top_level_ops(calls, ops)
    index_of = {call: index for index, call in enumerate(calls)}
    extern_of: dict[tuple[int, int], CompiledKernel] = {}  # (thread, op start) -> kernel
    op_spans: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    op_ids: list[tuple[int, int]] = []
    # the other operators directly inside a call (a CUDA graph's copies of its inputs)
    other_spans: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for call, siblings in by_call.items():
        queues = _queues(of_call[index_of[call]][0], extern=True)
        for op in siblings:
            queue = queues.get(op.name)
            if queue:
                extern_of[(op.thread, op.start)] = queue.pop(0)
                op_spans[op.thread].append((op.start, op.end, len(op_ids)))
                op_ids.append((op.thread, op.start))
            elif _OPERATOR.match(op.name):  # not a runtime call (cudaGraphLaunch...)
                other_spans[op.thread].append((op.start, op.end, index_of[call]))
    for spans in (*op_spans.values(), *other_spans.values()):
        spans.sort()
    op_starts = {t: [s[0] for s in spans] for t, spans in op_spans.items()}
    other_starts = {t: [s[0] for s in spans] for t, spans in other_spans.items()}

    booking = CompiledBooking(iterations, in_graph_ns=[0] * iterations,
                              eager_ns=[0] * iterations,
                              backward_in_graph_ns=[0] * iterations)
    eager = _range_index(ranges)
    generated: dict[int, _Replay] = {}
    kernels = sorted(kernels, key=lambda r: (r.time, r.start))
    # a host point that launched several kernels: a CUDA graph's replay
    launches = Counter((record.thread, record.time) for record in kernels)
    replays: set[tuple[int, int]] = set()
    for record in kernels:
        index = (_innermost(call_spans[record.thread], call_starts[record.thread], record.time)
                 if record.thread in call_spans else None)
        if index is None:
            launcher = (_innermost_range(*eager[record.thread], record.time)
                        if record.thread in eager else None)
            if launcher is not None and 0 <= launcher.iteration < iterations:
                booking.eager_ns[launcher.iteration] += record.duration
                booking.direct_launches[launcher.path] += 1
                times = booking.module_ns.setdefault(launcher.path, [0] * iterations)
                times[launcher.iteration] += record.duration
            else:
                booking.outside_ns += record.duration
            continue
        call = calls[index]
        if not 0 <= call.iteration < iterations:
            booking.outside_ns += record.duration
            continue
        booking.in_graph_ns[call.iteration] += record.duration
        booked = booking.module_ns
        if call.key in backward:
            booking.backward_in_graph_ns[call.iteration] += record.duration
            booked = booking.backward_ns
        if launches[(record.thread, record.time)] > 1:
            booking.replayed += 1
            booking.replays += (record.thread, record.time) not in replays
            replays.add((record.thread, record.time))
        if index not in generated:
            generated[index] = _Replay(of_call[index][0])
        state = generated[index]
        kernel: CompiledKernel | None = None
        queue = state.queues.get(_GRAPH_PREFIX.sub("", record.name))
        if queue:
            kernel = queue.pop(0)
        elif record.thread in op_spans:
            around = _innermost(op_spans[record.thread], op_starts[record.thread],
                                record.time)
            if around is not None:
                kernel = extern_of[op_ids[around]]
        if kernel is None and launches[(record.thread, record.time)] > 1:
            kernel = state.replayed(record.name)
        elif kernel is not None:
            state.ran(kernel)
        elif state.recorded and record.thread in other_spans and _innermost(
                other_spans[record.thread], other_starts[record.thread],
                record.time) is not None:
            own = state.own  # an input's copy: the graph's own work
            if call.key not in backward:  # launches are counted for the forward
                booking.direct_launches[own] += 1
            booked.setdefault(own, [0] * iterations)[call.iteration] += record.duration
            continue
        if kernel is None:
            booking.unmatched[record.name] += record.duration
            continue
        key = KernelKey(call.key, kernel.position, of_call[index][1])
        booking.kernel_ns.setdefault(key, [0] * iterations)[call.iteration] += record.duration
        booking.device_names[key][record.name] += 1
        if record.launch:
            booking.launch_configs[key][(record.name, record.launch)] += 1
        times = booked.setdefault(kernel.module, [0] * iterations)
        times[call.iteration] += record.duration
    return booking


class _Replay:
    """One graph call's kernels still to come: its generated kernels by name, and, for the
    kernels a CUDA graph's replay launched (no ATen operator's range around them), its extern
    kernels in order."""

    def __init__(self, kernels: Sequence[CompiledKernel]) -> None:
        self.queues = _queues(kernels, extern=False)
        self.externs = [kernel for kernel in sorted(kernels, key=lambda k: k.position)
                        if kernel.extern_op is not None]
        self.recorded = bool(kernels)
        """Whether the graph's kernels are known (Inductor kept its provenance)."""
        self.own = common_ancestor(module for kernel in kernels for module in kernel.modules)
        """The deepest module holding all the graph's work."""
        self.last = -1
        self.last_extern: CompiledKernel | None = None

    def ran(self, kernel: CompiledKernel) -> None:
        """``kernel`` was booked: later replayed kernels come after it."""
        self.last = max(self.last, kernel.position)
        if kernel.extern_op is not None:
            self.last_extern = kernel

    def replayed(self, name: str = "") -> CompiledKernel | None:
        """The extern kernel a replayed device kernel (``name``) that no name matched belongs
        to: the next extern kernel after the last booked kernel and before the next generated
        one; none there, the extern kernel just booked (an operator may run several device
        kernels, such as a GEMM and its split-K reduction). A memset or a copy prepares the
        kernel after it (cuDNN's attention sets its buffer first): it is the next extern
        kernel's, which stays next, for the kernel it prepares."""
        following = min((queue[0].position for queue in self.queues.values() if queue),
                        default=None)
        for kernel in self.externs:
            if kernel.position > self.last and (following is None
                                                or kernel.position < following):
                if not name.startswith(_PREPARES):
                    self.ran(kernel)
                return kernel
        if self.last_extern is not None and self.last_extern.position == self.last:
            return self.last_extern
        return None


def _call_kernels(calls: Sequence[GraphCall], graphs: Mapping[str, Sequence[CompiledKernel]],
                  versions: Mapping[str, Sequence[Sequence[CompiledKernel]]]
                  ) -> list[tuple[Sequence[CompiledKernel], int]]:
    """The kernels of each of ``calls``' graphs and which version of its key it is: for a key
    several graphs share, the n-th call of it in an iteration (by start) is the n-th
    version's (the last one's past the end)."""
    out: list[tuple[Sequence[CompiledKernel], int]] = [(graphs.get(call.key, ()), 0)
                                                        for call in calls]
    seen: dict[tuple[int, str], int] = defaultdict(int)
    for index in sorted(range(len(calls)), key=lambda i: (calls[i].iteration, calls[i].start)):
        call = calls[index]
        shared = versions.get(call.key)
        if shared and len(shared) > 1:
            n = min(seen[(call.iteration, call.key)], len(shared) - 1)
            seen[(call.iteration, call.key)] += 1
            out[index] = (shared[n], n)
    return out


def _queues(kernels: Iterable[CompiledKernel], extern: bool) -> dict[str, list[CompiledKernel]]:
    """A graph's kernels by the name a record carries (an extern kernel's ATen operator, a
    generated kernel's own name), in call order."""
    queues: dict[str, list[CompiledKernel]] = defaultdict(list)
    for kernel in sorted(kernels, key=lambda k: k.position):
        op = kernel.extern_op
        if extern and op is not None:
            queues[op].append(kernel)
        elif not extern and op is None:
            queues[kernel.name].append(kernel)
    return queues
