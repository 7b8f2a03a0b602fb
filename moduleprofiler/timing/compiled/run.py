"""Per-module time of a compiled model's forward: the compiled program timed, kernel by kernel.

:func:`time_compiled` compiles the model with a recording backend (:mod:`.capture`), runs it,
traces a block of iterations (:mod:`.trace`) and books every kernel to the modules its nodes
come from (:mod:`.booking`). A kernel that fuses work of several modules is booked to their
deepest common ancestor and listed as fused across them.
"""

from __future__ import annotations

import statistics
import time
from collections import Counter
from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch._dynamo.utils import counters

from moduleprofiler.deprecation import warn_deprecated
from moduleprofiler.devices import resolve_device, synchronize
from moduleprofiler.records import display_path
from moduleprofiler.timing.compiled.booking import CompiledBooking, KernelKey, book_compiled
from moduleprofiler.timing.compiled.capture import (
    CompiledGraph,
    CompileSettings,
    compiled_original,
    recorded_compile,
)
from moduleprofiler.timing.compiled.trace import trace_compiled


@dataclass(frozen=True)
class KernelRow:
    """One kernel of a compiled graph, its module and its time."""

    graph: str
    position: int
    name: str
    module: str
    """The module it is booked to (``""``: the root)."""
    fused_across: tuple[str, ...]
    """The modules whose work it fuses, when there are several."""
    time_ms: float
    """Its time per iteration (median over the traced iterations)."""
    launches: float
    """Device kernels (CPU: kernel ranges) booked to it per iteration."""
    backward: bool = False
    """Whether it is a kernel of a backward graph (booked to the module whose forward nodes
    it differentiates)."""
    device_kernels: tuple[str, ...] = ()
    """The names of the device kernels (CPU: kernel ranges) booked to it, sorted: for an
    extern kernel, the cuDNN or cuBLAS kernels its operator ran."""
    launch_configs: tuple[tuple[str, str], ...] = ()
    """CUDA: each device kernel booked to it with its launch configuration (grid, block,
    registers per thread, shared memory), as ``(name, configuration)`` pairs, sorted; empty
    on a CPU."""


@dataclass
class CompiledTiming:
    """Where a compiled model's forward time goes, module by module."""

    device: str
    iterations: int
    own_ms: dict[str, float]
    """Per module path, the median over iterations of its own kernels' time."""
    kernels: list[KernelRow]
    coverage: float | None
    """Share of the compiled graphs' kernel time booked to modules (1.0: all of it)."""
    compiled_ms: float
    """Median per iteration of the kernel time inside the compiled graphs' calls."""
    iteration_ms: float
    """Median wall time of one traced iteration on the host."""
    outside_ms: float
    """CUDA: kernel time per iteration launched outside the compiled graphs' calls (eager
    code between graphs after a graph break, copies); 0 on a CPU, whose eager operators are
    not read."""
    compile_s: float
    """Seconds the first call took (compiling, or loading from Inductor's cache)."""
    graphs: int
    """Compiled graphs of the forward (more than one: the graph breaks)."""
    regions: list[tuple[str, str, str]] = field(default_factory=list)
    """The forward's compiled graphs in order: ``(key, first module, last module)``; between
    two of them the graph breaks (eager Python runs)."""
    break_reasons: dict[str, int] = field(default_factory=dict)
    """Why Dynamo broke the graph while compiling it: reason -> times."""
    unmatched: dict[str, float] = field(default_factory=dict)
    """Kernels in a graph's call that matched none of its kernels: name -> ms per iteration."""
    notes: list[str] = field(default_factory=list)

    def inclusive_ms(self, path: str) -> float:
        """The time of ``path``'s own kernels and its descendants' (``""``: the root)."""
        prefix = path + "."
        return sum(ms for module, ms in self.own_ms.items()
                   if not path or module == path or module.startswith(prefix))

    def fused_across(self) -> list[KernelRow]:
        """The kernels that fuse work of several modules, longest first."""
        return sorted((row for row in self.kernels if row.fused_across),
                      key=lambda row: -row.time_ms)

    def table(self, depth: int | None = None) -> list[tuple[str, float, float]]:
        """``(module, own ms, inclusive ms)`` for every module with time, in path order, down
        to ``depth`` dots (``None``: all)."""
        paths = set()
        for module in self.own_ms:
            parts = module.split(".") if module else []
            for cut in range(len(parts) + 1):
                paths.add(".".join(parts[:cut]))
        rows = []
        for path in sorted(paths, key=lambda p: p.split(".") if p else []):
            if depth is not None and path and path.count(".") >= depth:
                continue
            rows.append((display_path(path), self.own_ms.get(path, 0.0),
                         self.inclusive_ms(path)))
        return rows


def kernel_rows(booking: CompiledBooking, graphs: list[CompiledGraph]) -> list[KernelRow]:
    """One row per kernel of ``graphs`` that ran in the booked iterations, in graph order."""
    n = max(booking.iterations, 1)
    launches = booking.kernel_launches
    rows = []
    versions: dict[str, int] = {}
    for graph in graphs:
        version = versions[graph.key] = versions.get(graph.key, -1) + 1
        for kernel in graph.kernels:
            key = KernelKey(graph.key, kernel.position, version)
            if key not in booking.kernel_ns:
                continue
            rows.append(KernelRow(graph.key, kernel.position, kernel.name, kernel.module,
                                  kernel.fused_across,
                                  statistics.median(booking.kernel_ns[key]) / 1e6,
                                  launches.get(key, 0) / n, graph.backward,
                                  tuple(sorted(booking.device_names.get(key, ()))),
                                  tuple(sorted(booking.launch_configs.get(key, ())))))
    return rows


def time_compiled(model: nn.Module, *args: Any, iterations: int = 20, warmup: int = 3,
                  grad: bool = False, options: Mapping[str, Any] | None = None,
                  **kwargs: Any) -> CompiledTiming:
    """Deprecated (removed in 0.3.0): ``time_modules`` of the compiled model gives the same
    booking as a timing profile. Time ``model(*args, **kwargs)`` compiled, per module.

    ``model`` is a ``torch.compile(model)`` wrapper, a model compiled in place
    (``model.compile()``), whose compile options are kept, or a plain model, compiled with
    Inductor and ``options``. ``warmup`` calls (the first compiles) precede ``iterations``
    traced ones; under ``torch.no_grad()`` unless ``grad``.
    """
    warn_deprecated("moduleprofiler.compiled.time_compiled", "time_modules(torch.compile("
                    "model), x) times the compiled program per module (the compiled clock)")
    if iterations < 1:
        raise ValueError(f"iterations must be at least 1, got {iterations}")
    notes: list[str] = []
    found = compiled_original(model)
    if found is None:
        original, settings = model, CompileSettings().over(options)
    else:
        original, users, note = found
        settings = users.over(options)
        if note is not None:
            notes.append(note)
    compiled, recorder = recorded_compile(original, settings)
    device = resolve_device(original, args)
    context = nullcontext() if grad else torch.no_grad()
    breaks_before = Counter(counters["graph_break"])
    with context:
        started = time.perf_counter()
        compiled(*args, **kwargs)
        synchronize(device)
        compile_s = time.perf_counter() - started
        breaks = Counter(counters["graph_break"]) - breaks_before
        for _ in range(max(warmup - 1, 0)):
            compiled(*args, **kwargs)
        trace = trace_compiled(lambda: compiled(*args, **kwargs), iterations, device)
    forward = [graph for graph in recorder.graphs if not graph.backward]
    booking = book_compiled(recorder.by_key(), trace.calls, trace.ops, trace.kernels,
                            iterations, recorder.versions())
    notes.extend(recorder.notes)
    return CompiledTiming(
        device=str(device), iterations=iterations,
        own_ms={module: statistics.median(times) / 1e6
                for module, times in booking.module_ns.items()},
        kernels=kernel_rows(booking, recorder.graphs),
        coverage=booking.coverage,
        compiled_ms=statistics.median(booking.in_graph_ns) / 1e6,
        iteration_ms=statistics.median(trace.iteration_ns) / 1e6,
        outside_ms=booking.outside_ns / iterations / 1e6,
        compile_s=compile_s, graphs=len(forward),
        regions=[(graph.key, graph.first, graph.last) for graph in forward],
        break_reasons=dict(breaks),
        unmatched={name: ns / iterations / 1e6 for name, ns in booking.unmatched.items()},
        notes=notes)
