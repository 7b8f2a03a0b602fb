"""What a timing pass found about the run as a whole, beside its per-call records: the one
typed attachment of a timed profile (:attr:`moduleprofiler.records.ProfileData.facts`),
written to its JSON and read back by ``Profile.from_json``.

Plain data (numbers, strings, tuples, dicts), so the records can hold it without importing
the timing package; the timing results give it its typed faces (``calibration``,
``budget``...)."""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

DEVICE_BOUND_BUSY = 0.8
"""A model whose device is busy at least this share of the hook-free forward is device-bound:
the host keeps ahead, and faster kernels would make it faster."""


@dataclass(frozen=True)
class HookFreeTrace:
    """One traced iteration without hooks: how busy the device is when nothing is measured."""

    host_ms: float
    """Host time to issue the iteration (the call returns before the device finishes)."""
    device_ms: float
    """Time the device ran at least one of the iteration's activities (of a model on several
    devices, the busiest device's)."""
    launches: int
    """Kernels, copies and sets the iteration ran."""
    latency_ms: float
    """The hook-free iteration's median latency: of iterations run before the process's first
    kernel-record session when it had none (``unprofiled``), else of the interleaved rounds'."""
    devices: int = 1
    """How many devices ran the iteration's activities (``device_ms`` is the busiest's)."""
    unprofiled: bool = False
    """Whether ``latency_ms`` and ``host_ms`` come from iterations before any kernel-record
    session of the process, as an unprofiled run goes: after one, CUPTI stays attached and
    every launch costs the host more (1.32 to 1.68 times in tight loops on an H200's host)."""

    @property
    def busy_share(self) -> float:
        """Device busy time over latency."""
        return self.device_ms / self.latency_ms if self.latency_ms > 0 else math.nan

    @property
    def host_per_launch_us(self) -> float:
        """Host time per device launch (Python, dispatch, the launch itself)."""
        return 1e3 * self.host_ms / self.launches if self.launches else math.nan

    @property
    def bound(self) -> str:
        """``"device"`` when the device is busy at least :data:`DEVICE_BOUND_BUSY` of the
        forward, else ``"host"``."""
        return "device" if self.busy_share >= DEVICE_BOUND_BUSY else "host"

    def sentence(self) -> str:
        """One line: the regime, its evidence and what would change it."""
        device = "the GPU" if self.devices <= 1 else f"the busiest of its {self.devices} GPUs"
        evidence = (f"{device} is busy {100 * self.busy_share:.0f} % of the hook-free "
                    f"iteration ({self.latency_ms:.3f} ms; {self.launches} launches, "
                    f"{self.host_per_launch_us:.1f} us of host time per launch"
                    + ("" if self.unprofiled else ", timed after a kernel-record session of "
                       "this process, which makes launches cost the host more than in an "
                       "unprofiled run") + ")")
        if self.bound == "device":
            return (f"device-bound: {evidence}; faster kernels (lower precision, fused "
                    "operators, a better layout) make it faster")
        return (f"host-bound: {evidence}; the GPU waits for launches: a larger batch, CUDA "
                "graphs or torch.compile (fewer, larger launches) would keep it busy")


FIXED_COUNT_MIN_SAMPLES = 2
"""Fewest kept samples a module of a fixed-count run may have and be trusted: one sample has
no spread (no confidence interval) to judge it by."""


@dataclass(frozen=True)
class GraphRegion:
    """One compiled graph of a compiled forward, in call order: the modules whose work its
    kernels do and, where the graph breaks after it, where and why."""

    graph: str
    """Inductor's key of the graph (its calls' profiler ranges carry it)."""
    modules: tuple[str, ...]
    """The modules whose work its kernels do (``""``: the root), sorted."""
    first: str = ""
    """The module of its first operation."""
    last: str = ""
    """The module of its last operation."""
    breaks_in: str | None = None
    """Where the graph breaks after it: the deepest module holding its last operation and the
    next graph's first (``None``: no break follows)."""
    reason: str | None = None
    """Why Dynamo broke the graph there (the first line of its reason)."""
    at: str | None = None
    """The line of the user's code it broke at (``file:line in function``)."""


@dataclass(frozen=True)
class Recompilation:
    """A module's forward that Dynamo compiled again because a guard of an earlier compile
    failed."""

    module: str
    """The first module (path) whose class's forward it is (every instance shares it)."""
    reason: str
    """The guard that failed (``0/0: tensor 'x' size mismatch at index 0...``)."""


@dataclass(frozen=True)
class CompiledFacts:
    """The compiled clock's facts of a compiled forward: its graphs (regions) and breaks, the
    recompilations Dynamo recorded for the model's forwards, and the compiled program's
    latency."""

    regions: tuple[GraphRegion, ...] = ()
    recompilations: tuple[Recompilation, ...] = ()
    latency_ms: float | None = None
    """The compiled program's median iteration with no hook and no profiler (the model's
    ``latency_ms``: a compiled model's latency is its compiled program's, not its eager
    module's); ``None``: none ran."""

    @property
    def breaks(self) -> tuple[GraphRegion, ...]:
        """The regions a graph break ends."""
        return tuple(region for region in self.regions if region.breaks_in is not None)

    def sentences(self) -> list[str]:
        """The breaks and recompilations, one line each (none: no line)."""
        lines = [f"the graph breaks in module {_shown(region.breaks_in)} after "
                 f"{_shown(region.last)} (graph {n + 1} of {len(self.regions)}"
                 + (f", at {region.at}" if region.at else "") + f"): {region.reason}"
                 for n, region in enumerate(self.regions) if region.breaks_in is not None]
        lines += [f"recompiled: the forward of module {_shown(item.module)} ({item.reason})"
                  for item in self.recompilations]
        return lines

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CompiledFacts:
        """The inverse of ``dataclasses.asdict``."""
        return cls(tuple(GraphRegion(**{**region, "modules": tuple(region["modules"])})
                         for region in data.get("regions", ())),
                   tuple(Recompilation(**item) for item in data.get("recompilations", ())),
                   data.get("latency_ms"))


def _shown(path: str | None) -> str:
    return repr(path or "__root__")


def equal_values(first: Any, second: Any) -> bool:
    """``first == second`` for a result's fields, where a value a run did not measure (a float
    NaN) equals a NaN: through dicts, lists, tuples, numpy arrays and dataclasses (a pickled
    copy holds new NaN objects, and ``nan == nan`` is false)."""
    if isinstance(first, float) and isinstance(second, float):
        return first == second or (math.isnan(first) and math.isnan(second))
    if isinstance(first, np.ndarray) or isinstance(second, np.ndarray):
        return (isinstance(first, np.ndarray) and isinstance(second, np.ndarray)
                and first.shape == second.shape
                and bool(np.array_equal(first, second, equal_nan=first.dtype.kind == "f")))
    if isinstance(first, dict) and isinstance(second, dict):
        return first.keys() == second.keys() and all(equal_values(first[key], second[key])
                                                      for key in first)
    if isinstance(first, (list, tuple)) and type(first) is type(second):
        return len(first) == len(second) and all(map(equal_values, first, second))
    if dataclasses.is_dataclass(first) and type(first) is type(second):
        return all(equal_values(getattr(first, f.name), getattr(second, f.name))
                   for f in dataclasses.fields(first) if f.compare)
    return bool(first == second)


@dataclass(frozen=True)
class TimingFacts:
    """The facts of one timing pass (times in ms): its clock and device, the hooks'
    calibration, the environment, the whole-iteration times with and without hooks, how many
    iterations were kept and dropped and why the run stopped, the hook-free regime under the
    kernel clock, a training timing's step phases, and the warnings it issued."""

    KEYS: ClassVar[dict[str, str]] = {
        # the facts' own fields
        "facts": "a timing result's facts about the run as a whole (the JSON's object of "
                 "them; a timing's to_dict() holds them at its top level)",
        "clock": "the clock that timed the calls: host, cuda_events, kernel or compiled",
        "device_name": "the device's own name (a GPU's; the processor on the CPU)",
        "calibration": "the hooks' per-call costs on the device, in ns",
        "environment": "what moves timings, read at the start of the run: threads, load, "
                       "library switches, the device's properties",
        "hardware": "the machine: host name, operating system, processors, memory, GPUs "
                    "(0.0.4's get_hardware_specs())",
        "confidence": "the level of the medians' confidence intervals (0.95)",
        "iterations": "kept iterations: the samples each statistic is of",
        "dropped": "timed iterations discarded before the kept ones (drop_first)",
        "stop_reason": "why the timed phase ended: target_ci, max_seconds or num_iters",
        "elapsed_s": "wall time of the timed phase, dropped iterations included",
        "budget": "how the run's time budget went, phase by phase",
        "hooked_ms": "the whole iteration with hooks, one a kept iteration",
        "hook_free_ms": "the whole iteration without hooks, one an interleaved round",
        "hook_free": "kernel clock: the traced iteration without hooks (the model's regime)",
        "device_booked_ms": "kernel clock: device time booked to module calls over the traced "
                            "iterations",
        "device_total_ms": "kernel clock: all device time of the traced session",
        "phases_ms": "training: per-step times of the phases of hook-free steps (forward, "
                     "loss, backward, optimizer, step), by phase",
        "hooked_phases_ms": "training: phases_ms of each kind of hooked step (forward_hooks, "
                            "backward_hooks)",
        "unattributed_ms": "training: backward time of nodes made outside every module (the "
                           "loss), one a step",
        "method": "training: how backward time is attributed to modules (nodes)",
        "separate_passes": "training: forward and backward samples come from different "
                           "kinds of step",
        "compiled": "compiled clock: the compiled graphs, their breaks, the recompilations "
                    "and the compiled program's latency_ms",
        "warnings": "the warnings the run issued, in words",
        # the hook-free trace
        "unprofiled": "hook_free: its latency_ms and host_ms come from iterations run before "
                      "the process's first kernel-record session",
        "devices": "hook_free: how many devices ran its work (its device_ms is the busiest's)",
        # the compiled facts
        "regions": "compiled: the compiled graphs in call order",
        "recompilations": "compiled: the forwards Dynamo compiled again, each with the "
                          "guard that failed",
        "graph": "a compiled graph's key (its kernels' profiler ranges carry it)",
        "first": "the module of a compiled graph's first operation",
        "last": "the module of a compiled graph's last operation",
        "breaks_in": "where the graph breaks after a compiled graph: the deepest module "
                     "holding its last operation and the next graph's first",
        "reason": "why Dynamo broke the graph, or compiled a forward again",
        "at": "the line of the user's code a graph broke at",
        # the calibration
        "attribution_ns": "calibration: the time a hooked empty module reads as its own",
        "per_call_ns": "calibration: whole-model cost of one hooked call",
        "grad_per_call_ns": "calibration: forward cost of one hooked call that makes an "
                            "autograd node",
        "backward_attribution_ns": "calibration: backward time read for a trivial node",
        # the budget
        "max_seconds": "budget: the time asked for (None: none)",
        "setup_s": "budget: seconds before the loop (calibration, clock, environment)",
        "warmup_s": "budget: seconds of warm-up and dropped iterations",
        "rounds_s": "budget: seconds of the interleaved rounds",
        "finish_s": "budget: seconds after the rounds, inside the loop",
        "total_s": "budget: seconds of the whole call up to the end of the loop",
        "kept": "budget: kept samples of the shortest watched series",
        "min_kept": "budget: the fewest kept samples the stopping rule trusts (min_iters)",
        "min_traced": "budget: the fewest kept iterations of a traced block",
        "warmup_cut": "budget: the budget ended the warm-up before its own target",
        "cut_short": "budget: the budget ended the rounds with fewer than min_kept samples",
        # the environment
        "torch_version": "the PyTorch version that ran the model",
        "intraop_threads": "intra-op threads while timing (torch.get_num_threads())",
        "interop_threads": "inter-op threads while timing",
        "cpu_count": "logical processors of the machine",
        "loadavg": "the machine's load averages (1, 5, 15 minutes) at the start",
        "omp_mkl_env": "the OMP_, MKL_ and KMP_ environment variables, by name",
        "allocator_env": "the allocator's environment variables that were set, by name",
        "mkldnn_enabled": "whether oneDNN (mkldnn) was on",
        "minor_faults_per_iter": "minor page faults per timed iteration",
        "step_kinds": "training: the kinds of step the run timed (plain, forward_hooks, "
                      "backward_hooks)",
        "cuda_version": "CUDA: the CUDA version PyTorch was built with",
        "cudnn_benchmark": "CUDA: torch.backends.cudnn.benchmark",
        "cudnn_allow_tf32": "CUDA: cuDNN's fp32 convolutions on TF32 tensor cores "
                            "(torch.backends.cudnn.conv.fp32_precision, either API)",
        "matmul_allow_tf32": "CUDA: cuBLAS's fp32 matmuls on TF32 tensor cores "
                             "(torch.backends.cuda.matmul.fp32_precision, either API)",
        "multi_processor_count": "CUDA: the GPU's streaming multiprocessors",
        "gpu_clock_mhz": "CUDA: the GPU's clock at the start (needs pynvml)",
        # the hardware
        "host_name": "hardware: the machine's host name",
        "os": "hardware: the operating system",
        "os_release": "hardware: its release",
        "total_memory": "hardware: the machine's memory (\"<int> MB\")",
        "gpu": "hardware: the GPUs' names, or \"unavailable\"",
    }
    """The keys of a timing's facts (:meth:`to_dict`, the JSON's ``facts``) and of what they
    nest (the hook-free trace, the compiled facts, the calibration, the budget, the
    environment, the hardware) that no other table of the glossary holds, with their
    meaning (docs/glossary.md lists them); a latency's (``LatencyResult.to_dict()``) are
    these too."""

    clock: str
    device: str
    device_name: str | None = None
    """The device's own name (a GPU's ``"NVIDIA H200"``; the processor on the CPU)."""
    calibration: dict[str, Any] = field(default_factory=dict)
    """The hooks' per-call costs in ns (``HookCalibration``'s fields)."""
    environment: dict[str, Any] = field(default_factory=dict)
    hardware: dict[str, Any] = field(default_factory=dict)
    confidence: float = 0.95
    """Level of the medians' confidence intervals."""
    iterations: int = 0
    """Kept iterations of the samples the records hold (the forward's)."""
    dropped: int = 0
    stop_reason: str | None = None
    """``"target_ci"``, ``"max_seconds"``, ``"num_iters"``; ``None`` for live profiling."""
    elapsed_s: float | None = None
    budget: dict[str, Any] | None = None
    """How the time budget went (``BudgetUse``'s fields); ``None`` for live profiling."""
    hooked_ms: tuple[float, ...] = ()
    """Whole iteration with hooks, per kept iteration."""
    hook_free_ms: tuple[float, ...] = ()
    """Whole iteration without hooks, measured in the interleaved rounds."""
    hook_free: HookFreeTrace | None = None
    """Kernel clock: the traced hook-free iteration (the model's regime)."""
    device_booked_ms: float | None = None
    """Kernel clock: device time booked to module calls over the traced iterations."""
    device_total_ms: float | None = None
    """Kernel clock: all device time over the traced session."""
    phases_ms: dict[str, tuple[float, ...]] = field(default_factory=dict)
    """Training: per-step times of the marked phases of hook-free steps (``"forward"``,
    ``"loss"``, ``"backward"``, ``"optimizer"``, ``"step"``)."""
    hooked_phases_ms: dict[str, dict[str, tuple[float, ...]]] = field(default_factory=dict)
    """Training: the same for each kind of hooked step (``"forward_hooks"``...)."""
    unattributed_ms: tuple[float, ...] = ()
    """Training: backward time of nodes created outside every module (the loss), per step."""
    method: str | None = None
    """Training: the backward attribution (``"nodes"``)."""
    separate_passes: bool | None = None
    """Training: forward and backward samples from different kinds of step."""
    compiled: CompiledFacts | None = None
    """Compiled clock: the compiled graphs, their breaks, the recompilations."""
    warnings: tuple[str, ...] = ()
    input_shapes: Any = None
    """The shape tree of the model's arguments in every iteration, as the root call's
    ``input_shapes`` column holds it; ``None`` where the pass did not know them before it ran
    (a ``pred_fn``, live profiling, a document written before it was kept)."""
    input_dtypes: tuple[str, ...] = ()
    """The dtypes of those arguments, as the root call's ``input_dtypes`` column holds them."""

    def __eq__(self, other: object) -> bool:
        """Field by field, an unmeasured figure (NaN: the calibration of a pass without a
        backward) equal to itself: a timing read back from pickle, as a process pool returns
        it, equals the one written (float ``nan == nan`` is false, and only the very same NaN
        object compared equal inside a dict)."""
        if other.__class__ is not self.__class__:
            return NotImplemented
        return equal_values(self, other)

    @property
    def min_samples(self) -> int:
        """Fewest samples a module may keep and be trusted: an adaptive run's ``min_iters``;
        in a fixed count (the caller's own choice, its spread shown by the CI columns) two, as
        one sample has no spread to judge it by."""
        if self.budget is None:
            return 0
        if self.stop_reason == "num_iters":
            return FIXED_COUNT_MIN_SAMPLES
        return int(self.budget.get("min_kept", 0))

    @property
    def min_traced_samples(self) -> int | None:
        """Fewest traced samples a module's device time may come from and be trusted: the
        traced block's own minimum in an adaptive run (its share of ``min_iters``, one at
        least: the kernel clock's quarter; the rest of the kept iterations are not traced,
        by design), 0 where
        :attr:`min_samples` is; ``None`` where the run's budget does not say (a document
        written before the traced block had a minimum)."""
        if self.budget is None or self.stop_reason == "num_iters":
            return 0
        least = self.budget.get("min_traced")
        return None if least is None else int(least)

    @property
    def latency_ms(self) -> float | None:
        """The model's hook-free latency (median over the hook-free iterations; the kernel
        clock's, timed before the process's first profiler session where it could be:
        :attr:`HookFreeTrace.latency_ms`; the compiled clock's, of the compiled program:
        :attr:`CompiledFacts.latency_ms`); ``None`` for a pass that ran none."""
        if self.compiled is not None and self.compiled.latency_ms is not None:
            return self.compiled.latency_ms
        if self.hook_free is not None:
            return self.hook_free.latency_ms
        return statistics.median(self.hook_free_ms) if self.hook_free_ms else None

    @property
    def booked_share(self) -> float:
        """Kernel clock: share of the traced device time that ran inside some module call."""
        if self.device_booked_ms is None or not self.device_total_ms:
            return math.nan
        return self.device_booked_ms / self.device_total_ms

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain Python (the hook-free trace and the compiled facts dicts)."""
        return {f.name: (dataclasses.asdict(value) if isinstance(
                    value := getattr(self, f.name), (HookFreeTrace, CompiledFacts)) else value)
                for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TimingFacts:
        """The inverse of :meth:`to_dict` (fields it does not know are left out)."""
        names = {f.name for f in dataclasses.fields(cls)}
        values = {key: value for key, value in data.items() if key in names}
        trace = values.get("hook_free")
        if isinstance(trace, Mapping):
            values["hook_free"] = HookFreeTrace(**trace)
        compiled = values.get("compiled")
        if isinstance(compiled, Mapping):
            values["compiled"] = CompiledFacts.from_dict(compiled)
        for name in ("hooked_ms", "hook_free_ms", "unattributed_ms", "warnings",
                     "input_dtypes"):
            if name in values:
                values[name] = tuple(values[name])
        values["phases_ms"] = {k: tuple(v) for k, v in values.get("phases_ms", {}).items()}
        values["hooked_phases_ms"] = {k: {n: tuple(v) for n, v in phases.items()}
                                      for k, phases in values.get("hooked_phases_ms",
                                                                  {}).items()}
        return cls(**values)
