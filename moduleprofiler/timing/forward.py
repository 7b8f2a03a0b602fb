"""Per-module forward time: a clock listener on the pass runner, one sample per call per
iteration, the hooks installed once per block of iterations.

``time_modules`` runs, under ``torch.no_grad()`` and with the garbage collector paused:

1. optional time-based warm-up (hooked and hook-free iterations alternate);
2. ``drop_first`` hooked iterations, discarded (0.0.4's warm-up);
3. ``rounds`` rounds, each a block of hooked iterations (kept: the per-module samples) and a
   block of hook-free iterations of the same size (the reference for the overhead ratio), in
   alternating order.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from numpy.typing import NDArray
from torch import nn

from moduleprofiler.codepaths import CodePathWarning, eager_module, fast_path_changes
from moduleprofiler.export.names import module_name
from moduleprofiler.inputs import make_invocation
from moduleprofiler.progress import Progress
from moduleprofiler.state import preserved_state
from moduleprofiler.timing.booking import busy_ns
from moduleprofiler.timing.clock import (
    TimingWarning,
    issue_warnings,
    make_stamps,
    resolve_device,
    synchronize,
)
from moduleprofiler.timing.device_results import DeviceTimes, HookFreeTrace
from moduleprofiler.timing.device_trace import ClockName, choose_clock, device_trace
from moduleprofiler.timing.environment import (
    capture_environment,
    environment_warnings,
    get_hardware_specs,
    minor_faults,
    timing_context,
)
from moduleprofiler.timing.iteration import marks_span_ns
from moduleprofiler.timing.kernel_clock import DeviceIteration, KernelClock
from moduleprofiler.timing.listener import ClockListener
from moduleprofiler.timing.overhead import (
    calibrate_hooks,
    interleave,
    plain_count,
    run_rounds,
    split_rounds,
)
from moduleprofiler.timing.ranges import RangeListener
from moduleprofiler.timing.results import (
    ModelLayout,
    ModuleStats,
    PhaseSamples,
    TimedModules,
    calls_column,
    stats_columns,
    timed_profile,
    tree_text,
)
from moduleprofiler.timing.stats import StoppingRule, Summary, summarize


def validate_iterations(num_iters: int | None, drop_first: int) -> None:
    """``num_iters >= 1`` (or ``None``: adaptive) and ``0 <= drop_first < num_iters``, else
    ``ValueError`` naming the argument."""
    if num_iters is not None and (not isinstance(num_iters, int) or num_iters < 1):
        raise ValueError(f"num_iters must be a positive int or None, got {num_iters!r}")
    if not isinstance(drop_first, int) or drop_first < 0 or (
            num_iters is not None and drop_first >= num_iters):
        raise ValueError(
            f"drop_first must be an int with 0 <= drop_first < num_iters ({num_iters}), "
            f"got {drop_first!r}: at least one timed iteration must be kept"
        )


@dataclass(frozen=True, eq=False, repr=False, kw_only=True)
class ModuleTiming(TimedModules):
    """Per-module forward times of one model, with the evidence needed to trust them.

    Times are milliseconds per iteration; a module called k times per iteration reports the
    sum of its k calls (``calls_per_iter`` says k). Raw samples are kept in ``forward``
    (``(iterations, modules)`` matrices, modules in ``layout`` order, and every call's
    inclusive and self time) and the whole-iteration times ``hooked_ms`` / ``unhooked_ms``.
    """

    hooked_ms: NDArray[np.float64]
    """Whole iteration (the ``input``/``pred_fn`` call) with hooks, per kept iteration."""
    unhooked_ms: NDArray[np.float64]
    """Whole iteration without hooks, measured in the interleaved rounds."""
    host: PhaseSamples | None = None
    """Kernel clock: host time samples (wall time between each call's hooks); ``forward``
    then holds the device times. ``None`` with the other clocks."""
    device_times: DeviceTimes | None = None
    """Kernel clock: launches, the device's idle share per module, the hook-free trace."""

    # -- model-level figures ---------------------------------------------------------------
    @property
    def overhead_ratio(self) -> float:
        """Median hooked / median hook-free whole-iteration time (interleaved rounds)."""
        if self.unhooked_ms.size == 0 or self.hooked_ms.size == 0:
            return math.nan
        return float(np.median(self.hooked_ms) / np.median(self.unhooked_ms))

    @property
    def coverage(self) -> float:
        """Sum of the modules' median self times over the root's median (expect 1 +- 0.03)."""
        return self.forward.coverage(self.layout)

    @property
    def leaf_coverage(self) -> float:
        """Sum of the leaves' median inclusive times over the root's median."""
        return self.forward.leaf_coverage(self.layout)

    @property
    def whole(self) -> Summary | None:
        """Statistics of the hooked whole-iteration time."""
        return summarize(self.hooked_ms, self.confidence)

    @property
    def hook_free(self) -> Summary | None:
        """Statistics of the hook-free whole-iteration time (was ``unhooked``, which on a
        profile names the TorchScript submodules that carry no hooks)."""
        return summarize(self.unhooked_ms, self.confidence)

    # -- per module and per call -----------------------------------------------------------
    def module_stats(self) -> tuple[ModuleStats, ...]:
        """:class:`ModuleStats` of every module, ``named_modules()`` order: device time
        under the kernel clock (kernel durations carry no hook error), else the clock's."""
        if self.device_times is not None:
            return self.forward.module_stats(self.layout, 0.0, 0.0, self.confidence)
        return self.host_modules()

    def host_modules(self) -> tuple[ModuleStats, ...]:
        """:class:`ModuleStats` of the host times (the CPU clock's; under the kernel clock
        its host samples), with the calibrated hook cost taken off in the ``corrected``
        medians."""
        samples = self.host if self.host is not None else self.forward
        return samples.module_stats(
            self.layout, self.calibration.attribution_ns / 1e6,
            self.calibration.per_call_ns / 1e6, self.confidence, correct=True)

    def module(self, path: str) -> ModuleStats:  # type: ignore[override]
        """Statistics of the module at ``path`` (``""`` or ``"__root__"`` for the root)."""
        return self.module_stats()[self.layout.index(path)]

    def samples(self, path: str, exclusive: bool = False) -> NDArray[np.float64]:
        """Per-iteration samples (ms) of one module, inclusive or self."""
        return self.forward.column(self.layout.index(path), exclusive)

    def call_samples(self, path: str) -> NDArray[np.float64]:
        """Inclusive time of every single call (ms) of one module, in call order."""
        out: NDArray[np.float64] = self.forward.call_inclusive_ms[
            self.forward.call_module == self.layout.index(path)]
        return out

    def module_columns(self) -> dict[str, dict[str, Any]]:
        """Per module path, medians per iteration: ``time_median_ms`` (with its children)
        and ``self_time_median_ms`` (its own code); under the kernel clock instead
        ``device_ms`` / ``self_device_ms``, ``host_ms`` / ``self_host_ms`` (less the
        calibrated hook cost), ``device_launches``, ``device_idle_share`` and ``time_bound``."""
        if self.device_times is None:
            return {s.path: {"time_median_ms": s.inclusive.median if s.inclusive else None,
                             "self_time_median_ms": s.exclusive.median if s.exclusive
                             else None}
                    for s in self.module_stats()}
        launches = self.device_times.module_launches()
        idle = self.device_times.module_idle_share()
        out: dict[str, dict[str, Any]] = {}
        for i, (device, host) in enumerate(zip(self.module_stats(), self.host_modules())):
            values = device_host_values(
                device.inclusive.median if device.inclusive else None,
                device.exclusive.median if device.exclusive else None,
                host.corrected_median_ms, host.self_corrected_median_ms)
            if device.called:
                values["device_launches"] = float(launches[i])
                values["device_idle_share"] = None if math.isnan(idle[i]) else float(idle[i])
            out[device.path] = values
        return out

    def call_columns(self) -> dict[tuple[str, int], dict[str, Any]]:
        """Per call ``(path, call_number)``, medians over the kept iterations:
        ``forward_ms`` and ``self_forward_ms``; under the kernel clock instead
        ``device_ms`` / ``self_device_ms``, ``host_ms`` / ``self_host_ms`` (less the
        calibrated hook cost of the call itself) and ``time_bound``."""
        device = self.forward.call_medians(self.layout)
        if self.host is None:
            return {key: {"forward_ms": incl, "self_forward_ms": excl}
                    for key, (incl, excl) in device.items()}
        error = self.calibration.attribution_ns / 1e6
        host = self.host.call_medians(self.layout)
        return {key: device_host_values(
                    incl, excl,
                    *((max(0.0, host[key][0] - error), max(0.0, host[key][1] - error))
                      if key in host else (None, None)))
                for key, (incl, excl) in device.items()}

    # -- views -----------------------------------------------------------------------------
    def stats_frame(self) -> pd.DataFrame:
        """One row per module (``named_modules()`` order, root ``"__root__"``, uncalled modules
        included with NaN): calls per iteration, inclusive and self statistics in ms, the
        share of the root's time, the expected instrumentation error and confidence flags."""
        stats = self.module_stats()
        root = stats[0].inclusive.median if stats[0].inclusive else math.nan
        data: dict[str, Any] = {
            "module": [module_name(s.path) for s in stats],
            "type": [s.type_name for s in stats],
            "depth": [s.depth for s in stats],
            "is_leaf": [s.is_leaf for s in stats],
            "calls": calls_column([s.calls_per_iter for s in stats]),
        }
        data.update(stats_columns("inclusive_", [s.inclusive for s in stats]))
        data.update(stats_columns("self_", [s.exclusive for s in stats]))
        data["inclusive_corrected_median_ms"] = [
            s.corrected_median_ms if s.corrected_median_ms is not None else math.nan
            for s in stats]
        data["self_corrected_median_ms"] = [
            s.self_corrected_median_ms if s.self_corrected_median_ms is not None else math.nan
            for s in stats]
        data["self_share"] = [s.exclusive.median / root if s.exclusive else math.nan
                              for s in stats]
        data["expected_error_ms"] = [s.expected_error_ms for s in stats]
        data["self_expected_error_ms"] = [s.self_expected_error_ms for s in stats]
        data["low_confidence"] = [s.low_confidence for s in stats]
        data["self_low_confidence"] = [s.self_low_confidence for s in stats]
        if self.device_times is not None:  # the statistics above are device times
            columns = self.module_columns()
            for name in ("host_ms", "self_host_ms", "device_launches", "device_idle_share",
                         "time_bound"):
                data[name] = [columns[s.path].get(name) for s in stats]
        return pd.DataFrame(data)

    def summary(self) -> str:  # type: ignore[override]
        """The model tree with median inclusive and self times, share of the root, calls and
        the low-confidence flag (within 10x of the hooks' expected error), followed by the
        model-level evidence."""
        stats = self.module_stats()
        columns = self.module_columns()
        root = stats[0].inclusive.median if stats[0].inclusive else math.nan
        notes = [
            f"device {self.device} ({self.clock}); {self.iterations} iterations kept, "
            f"{self.dropped} dropped; times are medians per iteration",
            f"hooked / hook-free whole model: {self.overhead_ratio:.3f}; "
            f"coverage (sum of self / root): {self.coverage:.3f}; "
            f"hook error per call ~{self.calibration.attribution_ns / 1e3:.2f} us, "
            f"cost per call ~{self.calibration.per_call_ns / 1e3:.2f} us",
            *self.warnings,
        ]
        share = [100 * s.exclusive.median / root if s.exclusive and root > 0 else None
                 for s in stats]
        if self.device_times is not None:  # torchprof's four times, shares of the device's
            notes[1] = (f"hooked / hook-free whole model: {self.overhead_ratio:.3f} (host "
                        f"times only); device time booked to modules: "
                        f"{100 * self.device_times.booked_share:.1f} %; host times less the "
                        f"hooks' cost (~{self.calibration.attribution_ns / 1e3:.2f} us a call)")
            names = ("self_host_ms", "host_ms", "self_device_ms", "device_ms", "time_bound")
            shown: dict[str, list[Any]] = {
                name: [columns[s.path].get(name) for s in stats] for name in names}
            shown["self_device_pct"] = share
            return tree_text(self.layout, [s.calls_per_iter for s in stats], shown, notes,
                             "module forward times: host and device")
        return tree_text(self.layout, [s.calls_per_iter for s in stats], {
            "time_median_ms": [columns[s.path]["time_median_ms"] for s in stats],
            "self_time_median_ms": [columns[s.path]["self_time_median_ms"] for s in stats],
            "self_pct": share,
            "low_confidence": [s.self_low_confidence for s in stats],
        }, notes, "module forward times")

    def to_dict(self) -> dict[str, Any]:
        """Plain-Python summary: model-level figures plus one dict per module."""
        out = {**super().to_dict(), "overhead_ratio": self.overhead_ratio,
               "coverage": self.coverage, "leaf_coverage": self.leaf_coverage}
        trace = self.device_times.hook_free if self.device_times is not None else None
        if trace is not None:
            out.update(bound=trace.bound, device_busy_share=trace.busy_share,
                       launches_per_iter=trace.launches,
                       host_per_launch_us=trace.host_per_launch_us)
        return out


def plan_iterations(num_iters: int | None, drop_first: int | None, rounds: int | None, *,
                    fixed_drop_first: int, fixed_rounds: int, target_ci: float | None,
                    max_seconds: float | None, min_iters: int, confidence: float
                    ) -> tuple[int, int | None, StoppingRule, list[int] | None]:
    """The checked iteration plan of a per-module timing run: ``drop_first`` (default
    ``fixed_drop_first`` for a fixed ``num_iters``, :data:`ADAPTIVE_DROP_FIRST` for an adaptive
    run), the kept count (``None``: adaptive), the stopping rule and the fixed rounds' sizes
    (``None``: adaptive). ``ValueError`` naming the argument for a bad combination."""
    fixed = num_iters is not None
    if drop_first is None:
        drop_first = fixed_drop_first if fixed else ADAPTIVE_DROP_FIRST
    validate_iterations(num_iters, drop_first)
    if rounds is not None and not fixed:
        raise ValueError("rounds splits a fixed num_iters; an adaptive run (num_iters=None) "
                         f"sizes its rounds by time, got rounds={rounds!r}")
    if num_iters is None:
        return drop_first, None, StoppingRule(
            target_ci=target_ci, max_seconds=max_seconds, min_samples=min_iters,
            confidence=confidence), None
    kept = num_iters - drop_first
    return drop_first, kept, StoppingRule(count=kept), split_rounds(
        kept, rounds, fixed_rounds, 0.0)[0]


def device_host_values(device_ms: float | None, self_device_ms: float | None,
                       host_ms: float | None, self_host_ms: float | None) -> dict[str, Any]:
    """The kernel clock's four times of a call or module, and its ``time_bound``: ``"host"``
    when issuing its work took the host longer than the device took to run it (the device
    then waits for launches), else ``"device"``."""
    bound = None
    if device_ms is not None and host_ms is not None:
        bound = "host" if host_ms > device_ms else "device"
    return {"device_ms": device_ms, "self_device_ms": self_device_ms, "host_ms": host_ms,
            "self_host_ms": self_host_ms, "time_bound": bound}


ADAPTIVE_DROP_FIRST = 2
"""Hooked iterations an adaptive run (``num_iters=None``) drops after its time-based warm-up
(a fixed count keeps 0.0.4's default of 20)."""


def time_modules(
    module: nn.Module,
    input: Any = None,
    *,
    pred_fn: Callable[..., Any] | None = None,
    eval: bool = True,
    num_iters: int | None = None,
    drop_first: int | None = None,
    warmup_seconds: float = 0.5,
    target_ci: float | None = 0.01,
    max_seconds: float | None = 5.0,
    min_iters: int = 10,
    rounds: int | None = None,
    measure_overhead: bool = True,
    overhead_fraction: float = 1.0,
    device: str | torch.device | None = None,
    num_threads: int | None = None,
    confidence: float = 0.95,
    progress: bool | None = None,
    ranges: bool = False,
    clock: ClockName = "auto",
) -> ModuleTiming:
    """Time every module's forward, in situ, with hooks.

    On CUDA the default clock is the *kernel clock*: each call's device time is the summed
    duration of the kernels, copies and sets it launched, from the GPU's own records (the
    PyTorch profiler's CUPTI backend), and its host time is the wall time between its hooks;
    both are right whether the host or the device is the bottleneck. On the CPU, wall time.

    By default the run is adaptive: interleaved rounds are added until the ``confidence``
    interval of the median hooked iteration (the root's time) is within ``target_ci`` of it,
    or ``max_seconds`` have passed; ``stop_reason`` says which. ``num_iters`` asks for a fixed
    count instead (0.0.4's meaning).

    Args:
        module: the model; left as found (hooks removed, every ``training`` flag and, if it
            ran in training mode, every buffer restored), also when its forward raises.
        input: a tensor (``module(x)``), tuple/list (``module(*input)``), dict
            (``module(**input)``) or other object (``module(input)``).
        pred_fn: called instead of ``module`` with the same unpacking; it must call
            ``module`` itself (the hooked instance).
        eval: run in eval mode (restored afterwards). Always under ``torch.no_grad()``.
        num_iters: ``None`` (default): adaptive. An int: exactly that many hooked iterations,
            ``drop_first`` of them discarded (0.0.4's meaning); ``target_ci`` and
            ``max_seconds`` are then not used.
        drop_first: first hooked iterations to discard (default: 20 with ``num_iters``, as
            0.0.4; :data:`ADAPTIVE_DROP_FIRST` in an adaptive run, after its warm-up).
        warmup_seconds: run (hooked and hook-free alternately) at least this long before.
        target_ci: adaptive: stop once the median's CI is within this fraction of it
            (0.01 = ±1 %); ``None``: run until the budget ends.
        max_seconds: adaptive: budget of the timed phase in seconds (dropped iterations
            included; warm-up and calibration not); ``None``: none. The run ends within the
            budget plus one round.
        min_iters: adaptive: never stop on the CI with fewer kept iterations.
        rounds: interleaved rounds of a fixed ``num_iters`` (default ``min(8, kept)``); an
            adaptive run sizes its rounds by time.
        measure_overhead: also run hook-free iterations, interleaved, for ``overhead_ratio``.
        overhead_fraction: hook-free iterations per round as a fraction of the hooked ones
            (at least one per round).
        device: whose clock to use (default: the model's device); the model and input are
            not moved.
        num_threads: intra-op threads while timing (restored afterwards).
        confidence: level of the median's confidence intervals.
        progress: show a progress line (default: on a terminal, after 2 s of the call,
            warm-up included).
        ranges: name every module call in the PyTorch profiler's trace and, with CUDA, in
            NVTX (Nsight Systems): a :class:`~moduleprofiler.timing.RangeListener` outside
            the clock.
        clock: ``"auto"`` (kernels on CUDA where the kernel records can be had, else CUDA
            events with a :class:`TimingWarning`; wall time on the CPU), ``"kernels"``,
            ``"events"`` (CUDA events at the hooks, as before 0.2: right only while the GPU
            has queued work) or ``"cpu"``.

    Returns:
        :class:`ModuleTiming`. Its ``warnings`` are also issued as
        :class:`~moduleprofiler.timing.clock.TimingWarning` (a changed code path as
        :class:`~moduleprofiler.codepaths.CodePathWarning`).

    Raises:
        ProfilingError: the forward raised; the message names the module whose forward
            failed.
    """
    bar = Progress("timing modules", progress)  # from the start: calibration and warm-up too
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    drop_first, kept, rule, sizes = plan_iterations(
        num_iters, drop_first, rounds, fixed_drop_first=20, fixed_rounds=8,
        target_ci=target_ci, max_seconds=max_seconds, min_iters=min_iters,
        confidence=confidence)
    fraction = overhead_fraction if measure_overhead else 0.0
    module, compiled = eager_module(module)
    if compiled is not None:
        warnings.warn(compiled, CodePathWarning, stacklevel=2)
    resolved = resolve_device(module, input, device)
    invoke = make_invocation(module, input, pred_fn)

    notes: list[str] = [compiled] if compiled is not None else []
    changed = fast_path_changes(module, eval, grad_enabled=False)
    if changed:
        message = (
            f"hooks disable the fused fast path of TransformerEncoderLayer at {changed}: "
            "the per-module times describe the slower unfused path; overhead_ratio shows "
            "the difference and benchmark() measures the real (hook-free) latency"
        )
        notes.append(message)
        warnings.warn(message, CodePathWarning, stacklevel=2)

    mode, fallback = choose_clock(resolved, clock)
    if fallback is not None:
        notes.append(fallback)
        warnings.warn(fallback, TimingWarning, stacklevel=2)
    kernels = mode == "kernels"
    # the kernel clock's host times come from the CPU clock, calibrated on the CPU
    host = torch.device("cpu") if kernels else resolved
    bar.update(0, kept, "calibrating the hooks")
    calibration = calibrate_hooks(host)
    stamps = make_stamps(host)
    clock_listener = ClockListener.on(module, stamps, outer=[RangeListener(backward=False)]
                                      if ranges else ())
    kernel_clock = KernelClock.on(module) if kernels else None
    layout = ModelLayout.of(module)
    raws = []
    spans: list[float] = []  # whole hooked iterations (ns), for the stopping rule
    plain: list[float] = []
    issued: list[float] = []
    traced: list[DeviceIteration] = []
    outside = [0.0]
    keep = [False]

    def run_hooked() -> None:
        clock_listener.begin()
        clock_listener.mark("start")
        clock_listener.run(invoke)
        if kernels:  # host stamps: the iteration ends when the device is done
            synchronize(resolved)
        clock_listener.mark("end")
        raw = clock_listener.snapshot()  # resolved after the timed loop
        if keep[0]:
            raws.append(raw)
            spans.append(marks_span_ns(raw))
            bar.update(len(raws), kept, rule.progress_text() if kept is None else "")
        else:
            bar.update(0, kept, "warming up")

    def run_plain() -> None:
        stamps.reset()
        first = stamps.stamp()
        invoke()
        handed = stamps.stamp()
        if kernels:
            synchronize(resolved)
        last = stamps.stamp()
        a, b, c = stamps.resolve([first, handed, last])
        if keep[0]:
            plain.append(float(c - a))
            issued.append(float(b - a))

    def run_traced(count: int) -> None:
        assert kernel_clock is not None
        with kernel_clock.installed(), kernel_clock.traced(resolved) as block:
            for _ in range(count):
                kernel_clock.run(invoke)
        if keep[0] and block.iterations is not None:
            traced.extend(block.iterations)
            outside[0] += block.outside_ns

    def run_round(number: int, count: int) -> None:
        # a round: hooked block, hook-free block and (kernel clock) traced block, rotated
        extra = ([max(1, count // 4)], run_traced) if kernels else None
        interleave([count], [plain_count(count, fraction)], clock_listener.installed,
                   run_hooked, run_plain, extra, offset=number)

    env: dict[str, Any] = {}
    faults: float | None = None
    hook_free: HookFreeTrace | None = None
    try:
        with preserved_state(module, eval=eval), torch.no_grad(), timing_context(num_threads):
            env = capture_environment(resolved)
            if kernels:
                run_traced(1)  # the first profiler session starts CUPTI: seconds, not kept
            deadline = time.perf_counter() + warmup_seconds
            while time.perf_counter() < deadline:
                interleave([1], [1], clock_listener.installed, run_hooked, run_plain)
            rule.restart()  # the budget covers the dropped iterations, as benchmark()'s
            with clock_listener.installed():
                for _ in range(drop_first):
                    run_hooked()
            keep[0] = True
            faults_before = minor_faults()
            run_rounds(run_round, rule, lambda: (spans,), sizes)
            faults_after = minor_faults()
            elapsed = rule.elapsed
            if faults_before is not None and faults_after is not None:
                faults = (faults_after - faults_before) / (len(raws) + len(plain))
            if kernels and plain:
                with device_trace(resolved) as records:
                    invoke()
                hook_free = HookFreeTrace(
                    host_ms=float(np.median(issued)) / 1e6,
                    device_ms=busy_ns(records.activities) / 1e6,
                    launches=len(records.activities),
                    latency_ms=float(np.median(plain)) / 1e6)
    finally:
        bar.close()
    resolved_iterations = [clock_listener.resolve(raw) for raw in raws]
    env["minor_faults_per_iter"] = faults
    hooked_ms = np.asarray([t.marks["end"] - t.marks["start"]
                            for t in resolved_iterations]) / 1e6
    plain_ms = np.asarray(plain) / 1e6
    both = np.concatenate([hooked_ms, plain_ms])
    raised = environment_warnings(env, faults, resolved,
                                  float(np.median(both)) if both.size else None)
    raised.extend(_spread_warnings(hooked_ms, plain_ms, resolved, kernels))
    whole = summarize(hooked_ms, confidence)
    shortfall = rule.shortfall(whole.ci_halfwidth_rel if whole is not None else math.inf)
    if shortfall is not None:
        raised.append(shortfall)
    issue_warnings(raised)
    notes.extend(raised)
    if hook_free is not None:
        notes.append(hook_free.sentence())
    host_samples = PhaseSamples.collect("forward", resolved_iterations, len(layout.paths))
    device_times = (DeviceTimes.collect(traced, layout, False, outside[0], hook_free)
                    if kernels else None)
    return timed_profile(ModuleTiming(
        records=(), modules=(),
        layout=layout,
        forward=device_times.samples if device_times is not None else host_samples,
        hooked_ms=hooked_ms,
        unhooked_ms=plain_ms,
        calibration=calibration,
        device=str(resolved),
        clock="cuda-kernels" if kernels else stamps.kind,
        dropped=drop_first,
        confidence=confidence,
        environment=env,
        hardware=get_hardware_specs(),
        warnings=tuple(notes),
        host=host_samples if kernels else None,
        device_times=device_times,
        stop_reason=rule.reason,
        elapsed_s=elapsed,
    ), resolved_iterations[0] if resolved_iterations else None)


def _spread_warnings(hooked_ms: NDArray[np.float64], plain_ms: NDArray[np.float64],
                     device: torch.device, kernels: bool = False) -> list[str]:
    notes = []
    if hooked_ms.size and plain_ms.size:
        ratio = float(np.median(hooked_ms) / np.median(plain_ms))
        if ratio > 1.05 and kernels:
            notes.append(
                f"hooks slow the whole model down {ratio:.3f}x: host times include the hooks' "
                "share (see low_confidence); device times come from the kernel records and "
                "do not depend on it"
            )
        elif ratio > 1.05 and device.type == "cuda":
            notes.append(
                f"hooks slow the whole model down {ratio:.3f}x (> 1.05): with hooks the CPU "
                "no longer keeps ahead of the GPU (launch-bound), so GPU-timeline times include "
                "idle gaps waiting for launches; a larger batch makes the model GPU-bound again"
            )
        elif ratio > 1.05:
            notes.append(
                f"hooks slow the whole model down {ratio:.3f}x (> 1.05): small modules' "
                "times include a noticeable share of instrumentation; see low_confidence"
            )
    for name, data in (("hooked", hooked_ms), ("hook-free", plain_ms)):
        summary = summarize(data)
        if summary is not None and summary.n >= 4 and summary.iqr_rel > 0.10:
            notes.append(
                f"{name} whole-model times are spread out (IQR/median {summary.iqr_rel:.2f} "
                "> 0.10): the machine is noisy; medians are still usable, means are not"
            )
    return notes
