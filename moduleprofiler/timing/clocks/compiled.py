"""The compiled clock: a ``torch.compile``d model's time, kernel by kernel, booked to modules.

Hooks on a compiled model's modules would break its graph at every module, so this clock
never hooks what it times. It compiles the model's original module once more with the
model's own Inductor options and provenance tracking on (:mod:`~moduleprofiler.timing.
compiled.capture`: the same graph, options and Inductor, plus the map from every kernel to its
graph nodes and their modules), and its block runs that program with no hook installed inside
one profiler session per block (:mod:`~moduleprofiler.timing.compiled.trace`). Each kernel
record is booked to its graph's kernel and so to its module (:mod:`~moduleprofiler.timing.
compiled.booking`); a kernel that fuses work of several modules is booked to their deepest
common ancestor (listed by :meth:`CompiledClock.fused_across`).

The records are the eager module's calls: one hooked eager iteration, once, gives the call
tree, and a module's kernel time is its first call's own time in each traced iteration (a
compiled graph knows modules, not calls). The pass's hooked and hook-free blocks still run
the *eager* module (its host times, and the whole-model times without hooks); the device
columns (``device_ms``, ``self_device_ms``, ``device_launches``) are the compiled program's.
On CUDA a kernel's time is the device's own record; on a CPU it is the kernel's host range
(Inductor's ``cpp.enable_kernel_profile``). In a training step (``backward``) the compiled
backward graphs' kernels are booked the same way, to the modules whose forward nodes they
differentiate: the modules' backward device times.

An eager model with compiled submodules is timed as it runs (:mod:`~moduleprofiler.timing.
compiled.parts`): the compiled parts through recorded compiles of them, the rest eagerly, in
one program built beside the model, whose eager modules' kernels are booked to the module
that launched them. :meth:`CompiledClock.facts` gives the compiled graphs as regions (what
each covers, where and why the graph breaks) and Dynamo's recompilations of the model's
forwards (:mod:`~moduleprofiler.timing.compiled.regions`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch
from torch import nn
from torch._dynamo.exc import TorchDynamoException
from torch._dynamo.utils import counters

from moduleprofiler import devices
from moduleprofiler.call import Call
from moduleprofiler.errors import ProfilingError
from moduleprofiler.export.columns import ColumnSpec
from moduleprofiler.facts import CompiledFacts, Recompilation
from moduleprofiler.inputs import make_invocation
from moduleprofiler.records import display_path
from moduleprofiler.runner import PassRunner
from moduleprofiler.timing.clocks.compiled_columns import COMPILED_COLUMNS
from moduleprofiler.timing.clocks.protocol import Clock, Readings
from moduleprofiler.timing.compiled.booking import CompiledBooking, KernelKey, book_compiled
from moduleprofiler.timing.compiled.capture import (
    CompiledGraph,
    GraphRecorder,
    compiled_original,
    eager_call,
    recorded_compile,
)
from moduleprofiler.timing.compiled.parts import PartlyCompiled, forced_eager
from moduleprofiler.timing.compiled.regions import recompilations_of, regions_of
from moduleprofiler.timing.compiled.reuse import RecordedCompile, kept_compile
from moduleprofiler.timing.compiled.run import KernelRow, kernel_rows
from moduleprofiler.timing.compiled.trace import trace_compiled
from moduleprofiler.timing.device_results import DeviceIteration
from moduleprofiler.timing.iteration import iteration_of_own
from moduleprofiler.timing.listener import Step, no_mark, stamped_block
from moduleprofiler.timing.loop import Block


@dataclass
class CompiledProgram:
    """A compiled model taken apart: its original module, the model's own eager call of it
    and a recorded compile of it (:func:`~moduleprofiler.timing.compiled.capture.recorded_compile`,
    compiled at its first call), each called on one input."""

    original: nn.Module
    """The module that was compiled (a wrapper's ``_orig_mod``, or the model compiled in
    place): its paths are the records' paths."""
    eager: Callable[[], Any]
    """One eager call of ``original`` on the input (past a compiled call it carries)."""
    compiled: Callable[[], Any]
    """One call of the recorded compile on the input."""
    recorder: GraphRecorder
    notes: list[str] = field(default_factory=list)
    recompilations: tuple[Recompilation, ...] = ()
    """The recompilations Dynamo recorded for the model's forwards before it was timed."""
    partly: bool = False
    """Whether it is an eager model with compiled submodules."""
    break_reasons: Counter[str] = field(default_factory=Counter)
    """Why Dynamo broke the graph while compiling the program (reason -> times), kept with
    its recorded compile (a later pass over the same model calls the code compiled then)."""
    plain: Callable[[], Any] | None = None
    """One call of the program whose iterations with no hook are the model's latency
    (``None``: ``compiled``, a model compiled whole; a model with compiled submodules: the
    same program with no range, since ``compiled`` runs its eager modules inside range
    hooks)."""

    @classmethod
    def of(cls, model: nn.Module, input: Any,
           options: Mapping[str, Any] | None = None,
           backward: bool = False) -> CompiledProgram | None:
        """``model`` (a ``torch.compile(model)`` wrapper, a model whose root was compiled
        in place, or an eager model with compiled submodules) taken apart to be called on
        ``input`` (unpacked as ``time_modules`` unpacks it); ``None`` for a model with nothing
        compiled. ``options``: Inductor options over the model's own (a whole model's).
        ``backward``: for a training step. A model compiled whole is compiled once for the
        passes over it with the same compile settings, input structure and kind of pass
        (:mod:`~moduleprofiler.timing.compiled.reuse`)."""
        found = compiled_original(model)
        if found is None:
            partly = PartlyCompiled.of(model)
            if partly is None:
                return None
            return cls(model, make_invocation(model, input, target=forced_eager(model)),
                       make_invocation(model, input, target=partly.shadow),
                       partly.recorder, [partly.note()], recompilations_of(model), True,
                       plain=make_invocation(model, input, target=partly.plain))
        original, users, note = found
        settings = users.over(options)

        def compile() -> RecordedCompile:
            run, recorder = recorded_compile(original, settings)
            return RecordedCompile(run.func, recorder)

        kept = kept_compile(original, settings, input, backward, compile)
        # a compiled submodule inside runs eagerly too: its modules' hooks fire, and the
        # hooked calls leave its compiled code as it is
        own = forced_eager(eager_call(original) if original is model else original)
        return cls(original, make_invocation(original, input, target=own),
                   make_invocation(original, input,
                                   target=partial(kept.function, original)),
                   kept.recorder, [note] if note is not None else [],
                   recompilations_of(original), break_reasons=kept.break_reasons)


def compile_failed(exc: Exception) -> ProfilingError:
    """The :class:`~moduleprofiler.errors.ProfilingError` of a program whose eager call ran
    and whose compile with the model's own ``torch.compile`` options raised ``exc`` (a graph
    break under ``fullgraph=True``, as the model's own compiled call raises)."""
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return ProfilingError(f"the compiled clock's compile of the model, with the model's own "
                          f"torch.compile options, raised {type(exc).__name__}: {first} "
                          "(under fullgraph=True a graph break raises, as in the model's own "
                          "compiled call)")


def compiled_share(count: int) -> int:
    """Traced iterations of the compiled program beside ``count`` hooked ones: half, at
    least one. Also its block's own minimum beside the loop's ``min_iters``: a module whose
    compiled time comes from fewer is low-confidence (``device_low_confidence``)."""
    return max(1, count // 2)


class CompiledClock(Clock):
    """The :class:`~.protocol.Clock` of a compiled model's program: each module's share of
    the compiled graphs' kernel time (the module docstring says how), host times from the
    CPU clock at the eager module's hooks."""

    name = "compiled-kernels"
    overhead_caveat = ("host times are the eager module's under hooks; the compiled "
                       "program's kernel times carry no hook")
    columns: ClassVar[tuple[ColumnSpec, ...]] = COMPILED_COLUMNS
    """Its block (:mod:`.compiled_columns`): the kernel clock's device columns (a compiled
    program's kernel time is device time) and the fused kernels per module."""

    def __init__(self, device: torch.device, program: CompiledProgram,
                 backward: bool = False) -> None:
        if backward and program.partly:
            raise ValueError("the compiled clock times the training step of a model compiled "
                             "whole; in an eager model with compiled submodules the eager "
                             "modules' backward kernels are not booked")
        super().__init__(devices.CPU, backward)  # host times on the CPU's clock
        self.backward = backward
        """Whether its steps run a backward (a training step), whose compiled graphs'
        kernels are booked as the modules' backward device time."""
        self.device = device
        self.program = program
        self.traced: list[DeviceIteration] = []
        self.booking: CompiledBooking | None = None
        """Every kept traced iteration's booking, merged (:meth:`kernels`)."""
        self.break_reasons: Counter[str] = Counter()
        """Why Dynamo broke the graph while compiling: reason -> times."""
        self._calls: list[Call] = []
        self._index: dict[int, int] = {}
        self._prime: Callable[[], None] | None = None
        self._shaper: Callable[[], None] | None = None
        self._ran: Counter[str] = Counter()
        """The compiled graphs its traced iterations called: key -> calls in an iteration
        (the most in any)."""
        self.plain: list[dict[str, float]] = []
        """Marks (ns) of the kept iterations of the compiled program with no hook and no
        profiler: the model's latency."""

    # -- the pass's questions --------------------------------------------------------------
    def model(self) -> tuple[nn.Module, Callable[[], Any]]:
        """The original module, called eagerly: its calls are the records'."""
        return self.program.original, self.program.eager

    def blocks(self, runner: PassRunner, step: Step) -> list[Block]:
        """Traced iterations of the compiled program, no hook installed: half of a round's
        count (:func:`compiled_share`), none in the warm-up, at least half of
        ``min_iters`` in a run that meets its target; and as many untraced ones, the
        compiled program's latency (the pass's own hook-free block runs the eager module,
        the reference of the hooks' overhead)."""
        def traced(count: int, keep: bool) -> None:
            if not self._calls:
                self._shape(runner)
            trace = trace_compiled(partial(step, no_mark, self._run), count, self.device)
            per_iteration = Counter((call.iteration, call.key) for call in trace.calls)
            for (_, key), calls in per_iteration.items():
                self._ran[key] = max(self._ran[key], calls)
            if keep:
                recorder = self.program.recorder
                self._book(book_compiled(recorder.by_key(), trace.calls, trace.ops,
                                         trace.kernels, count, recorder.versions(),
                                         trace.ranges, recorder.backward_keys()))

        plain = self.program.plain or self.program.compiled

        def compiled(mark: Callable[[str], None], run: Callable[[Callable[[], Any]], Any]
                     ) -> None:
            step(mark, lambda invoke: plain())

        self._prime = partial(traced, 1, False)
        self._shaper = partial(self._shape, runner)
        return [Block(traced, share=compiled_share, warm=False, least=compiled_share),
                Block(stamped_block(self.stamps, compiled, self.plain), share=compiled_share)]

    def prime(self) -> None:
        """Take the call tree, then compile (the first call of the recorded program) and
        start the profiler once. The eager call comes first: a forward that raises does so
        under the runner's hooks, which name the module it raised in, and not inside Dynamo's
        trace of the clock's own compile, which names none."""
        shaper, self._shaper = self._shaper, None
        if shaper is not None and not self._calls:
            shaper()
        before = Counter(counters["graph_break"])
        try:
            self.program.compiled()
        except TorchDynamoException as exc:  # the eager call ran: compiling it failed
            raise compile_failed(exc) from exc
        devices.synchronize(self.device)
        self.program.break_reasons.update(Counter(counters["graph_break"]) - before)
        self.break_reasons.update(self.program.break_reasons)
        # the primer closes over the pass's runner: let go of it once used, so that a clock
        # kept after its pass keeps no runner, listeners or modules alive
        primer, self._prime = self._prime, None
        if primer is not None:
            primer()

    def settle(self) -> None:
        """Host stamps: a phase ends when the device has done its work."""
        devices.synchronize(self.device)

    def readings(self) -> Readings:
        """The traced iterations (their kernel times become the result's device times),
        the time booked to modules and all the compiled graphs' kernel time."""
        booking = self.booking
        notes = [*self.program.notes, *self.program.recorder.notes, self._what()]
        if booking is None or not self.traced:
            return Readings(clock=self.name, notes=notes)
        # on a CPU, a training step's operators outside the graphs are mostly the step's own
        # (the loss, the gradients' accumulation), not the model's: a forward's only
        outside = booking.outside_ns if self.device.type == "cuda" or not self.backward else 0
        facts = self.facts()
        notes.extend(facts.sentences())
        if outside and not self.program.partly and not self.backward:
            per = outside / max(booking.iterations, 1) / 1e6
            notes.append(f"{per:.4f} ms per iteration of {self._outside_work()} ran outside "
                         "the compiled graphs (code Dynamo ran eagerly, such as a container's "
                         "forward resumed after a graph break in a child): booked to no "
                         "module, so the modules that ran it show none of it")
        coverage = booking.coverage
        if coverage is not None and coverage < 0.99:
            notes.append(f"only {100 * coverage:.1f} % of the compiled program's kernel time "
                         "is booked to modules")
        if self.backward and booking.backward_coverage is None:
            notes.append("no compiled backward graph ran: the backward device times are "
                         "unknown")
        if booking.replays:
            per = max(booking.iterations, 1)
            notes.append(f"CUDA graphs: {booking.replayed / per:.0f} kernels per iteration "
                         f"replayed in {booking.replays / per:.0f} graph launches, booked to "
                         "modules in the order the device ran them")
        if booking.unmatched:
            notes.append("kernels of the compiled graphs booked to no module: "
                         + ", ".join(sorted(booking.unmatched)))
        return Readings(self.traced, sum(booking.booked_ns) / 1e6,
                        (sum(booking.in_graph_ns) + sum(booking.eager_ns) + outside) / 1e6,
                        clock=self.name,
                        notes=notes, module_metrics=self._fused(), compiled=facts)

    # -- what only this clock tells ----------------------------------------------------------
    @property
    def graphs(self) -> int:
        """Compiled graphs of the forward (more than one: the graph broke)."""
        return sum(not graph.backward for graph in self._graphs())

    def facts(self) -> CompiledFacts:
        """The forward's compiled graphs (regions: what each covers, where and why the graph
        breaks after it), the recompilations Dynamo recorded for the model's forwards and the
        compiled program's latency (median of its iterations with no hook and no profiler)."""
        # the step's last mark ends it (a forward's "end", a training step's last phase)
        latency = (float(np.median([max(marks.values()) - marks["start"]
                                    for marks in self.plain])) / 1e6 if self.plain else None)
        return CompiledFacts(regions_of(self._graphs()), self.program.recompilations, latency)

    def _graphs(self) -> list[CompiledGraph]:
        """The recorded graphs its traced iterations called (all, before any ran): a
        recorded compile used by an earlier pass may hold graphs of another variant (a
        training-mode forward compiled again by Dynamo), which this pass did not run, and the
        same graph recorded twice (compiled again after ``torch._dynamo.reset()``). Of the
        graphs sharing a key, the first as many as the key's calls in an iteration (the n-th
        call is the n-th graph's, as the booking reads it)."""
        graphs = self.program.recorder.graphs
        if not self._ran:
            return list(graphs)
        seen: Counter[str] = Counter()
        kept = []
        for graph in graphs:
            if seen[graph.key] < self._ran[graph.key]:
                seen[graph.key] += 1
                kept.append(graph)
        return kept

    @property
    def coverage(self) -> float | None:
        """Share of the compiled graphs' kernel time booked to modules (``None``: none ran)."""
        return self.booking.coverage if self.booking is not None else None

    def kernels(self) -> list[KernelRow]:
        """Every kernel of the compiled graphs that ran, with its module and its median time
        per kept traced iteration."""
        if self.booking is None:
            return []
        return kernel_rows(self.booking, self.program.recorder.graphs)

    @property
    def backward_coverage(self) -> float | None:
        """Share of the compiled backward graphs' kernel time booked to modules (``None``:
        none ran)."""
        return self.booking.backward_coverage if self.booking is not None else None

    def fused_across(self) -> list[KernelRow]:
        """The kernels that fuse work of several modules (booked to their deepest common
        ancestor), longest first, backward graphs' too (``row.backward``)."""
        return sorted((row for row in self.kernels() if row.fused_across),
                      key=lambda row: -row.time_ms)

    # -- inside ------------------------------------------------------------------------------
    def _what(self) -> str:
        backward = (" (a backward graph's kernel to the modules of the forward nodes it "
                    "differentiates)" if self.backward else "")
        return ("device times are the compiled program's kernels (booked to modules through "
                f"Inductor's provenance{backward}, fused kernels to the deepest module "
                "holding all they fuse), the model's latency_ms the compiled program's with "
                "no hook; host times and the hook-free times of the hooks' overhead are the "
                "eager module's")

    def _outside_work(self) -> str:
        """What ran outside the graphs: a CPU's operators, a device's kernels."""
        return "kernels" if self.device.type == "cuda" else "operators"

    def _fused(self) -> dict[str, dict[str, Any]]:
        """Per module, its fused kernels per iteration and the modules whose work they do."""
        out: dict[str, dict[str, Any]] = {}
        for row in self.fused_across():
            if row.backward:  # the columns count the forward's kernels
                continue
            metrics = out.setdefault(row.module, {"self_fused_kernels": 0.0,
                                                  "fused_across": set()})
            metrics["self_fused_kernels"] += row.launches
            metrics["fused_across"].update(row.fused_across)
        return {path: {"self_fused_kernels": round(m["self_fused_kernels"]),
                       "fused_across": ", ".join(sorted(map(display_path,
                                                            m["fused_across"])))}
                for path, m in out.items()}

    def _run(self, invoke: Callable[[], Any]) -> Any:
        """The step's model call, made on the compiled program instead."""
        return self.program.compiled()

    def _shape(self, runner: PassRunner) -> None:
        """One hooked eager call, no listener told: the call tree the records take."""
        with runner.installed(only=[]):
            runner.reset()
            runner.run(self.program.eager)
            self._calls = runner.calls
        self._index = {id(module): i for i, module in enumerate(runner.modules)}

    def _book(self, booking: CompiledBooking) -> None:
        """Keep one traced block: each iteration's kernel time per module, on the first call
        of the module (its descendants' added by the records' inclusive sums)."""
        first: dict[str, int] = {}
        for call in self._calls:
            first.setdefault(call.path, call.index)
        n = len(self._calls)
        later = np.fromiter((first[call.path] != call.index for call in self._calls), bool, n)
        launches = _module_launches(booking, self.program.recorder)
        for k in range(booking.iterations):
            own = np.zeros(n)
            back = np.zeros(n) if self.backward else None
            count = np.zeros(n, dtype=np.int64)
            for path, per_iteration in booking.module_ns.items():
                at = first.get(path, 0)  # a module with no eager call: the root's
                own[at] += per_iteration[k]
                count[at] += launches.get(path, 0)
            if back is not None:
                for path, per_iteration in booking.backward_ns.items():
                    back[first.get(path, 0)] += per_iteration[k]
            times = iteration_of_own(self._calls, self._index, own, back)
            # a later call's kernel time is in its first call's: unknown, not 0
            for array in (times.call_fwd_inclusive, times.call_fwd_exclusive,
                          times.call_bwd_inclusive, times.call_bwd_exclusive):
                array[later] = np.nan
            inclusive_count = _inclusive(self._calls, count)
            self.traced.append(DeviceIteration(
                times=times, call_launches=inclusive_count,
                call_busy_ns=times.call_fwd_inclusive.copy(),
                # kernels of one graph run one after another: busy is their sum; the span
                # from a module's first kernel to its last is not read
                call_span_ns=np.full(n, np.nan),
                total_ns=float(own.sum() + (back.sum() if back is not None else 0.0))))
        self.booking = booking if self.booking is None else _merged(self.booking, booking)


def _module_launches(booking: CompiledBooking, recorder: GraphRecorder) -> dict[str, int]:
    """Kernels (device kernels, or CPU kernel ranges) of the forward booked to each module per
    iteration."""
    backward = recorder.backward_keys()
    module_of = {KernelKey(key, kernel.position, version): kernel.module
                 for key, graphs in recorder.versions().items() if key not in backward
                 for version, kernels in enumerate(graphs) for kernel in kernels}
    out: Counter[str] = Counter()
    for key, launches in booking.kernel_launches.items():
        module = module_of.get(key)
        if module is not None:
            out[module] += launches
    out.update(booking.direct_launches)
    iterations = max(booking.iterations, 1)
    return {module: round(total / iterations) for module, total in out.items()}


def _inclusive(calls: Sequence[Call], own: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Each call's ``own`` count plus its descendants' (children come after parents)."""
    out = own.copy()
    for call in reversed(calls):
        if call.parent is not None:
            out[call.parent] += out[call.index]
    return out


_Key = TypeVar("_Key")


def _joined_series(first: Mapping[_Key, list[int]], second: Mapping[_Key, list[int]],
                   first_count: int, second_count: int) -> dict[_Key, list[int]]:
    """Per key, its ``first_count`` values then its ``second_count`` ones (0s where a block
    has none)."""
    return {key: [*first.get(key, [0] * first_count), *second.get(key, [0] * second_count)]
            for key in {*first, *second}}


def _merged(first: CompiledBooking, second: CompiledBooking) -> CompiledBooking:
    """Two blocks' bookings as one of their iterations together."""
    merged = CompiledBooking(first.iterations + second.iterations,
                             in_graph_ns=[*first.in_graph_ns, *second.in_graph_ns],
                             eager_ns=[*first.eager_ns, *second.eager_ns],
                             backward_in_graph_ns=[*first.backward_in_graph_ns,
                                                   *second.backward_in_graph_ns],
                             replays=first.replays + second.replays,
                             replayed=first.replayed + second.replayed,
                             outside_ns=first.outside_ns + second.outside_ns)
    merged.module_ns = _joined_series(first.module_ns, second.module_ns, first.iterations,
                                      second.iterations)
    merged.backward_ns = _joined_series(first.backward_ns, second.backward_ns,
                                        first.iterations, second.iterations)
    merged.kernel_ns = _joined_series(first.kernel_ns, second.kernel_ns, first.iterations,
                                      second.iterations)
    for names in (first.device_names, second.device_names):
        for key, counted in names.items():
            merged.device_names[key].update(counted)
    for configs in (first.launch_configs, second.launch_configs):
        for key, pairs in configs.items():
            merged.launch_configs[key].update(pairs)
    for eager in (first.direct_launches, second.direct_launches):
        for path, value in eager.items():
            merged.direct_launches[path] += value
    for unmatched in (first.unmatched, second.unmatched):
        for name, ns in unmatched.items():
            merged.unmatched[name] += ns
    return merged
