"""Per-module forward time: a clock listener on the pass runner, one sample per call per
iteration, the hooks installed once per block of iterations.

``time_modules`` is the measurement loop (:mod:`moduleprofiler.timing.loop`) under
``torch.no_grad()`` with its blocks: hooked iterations (kept: the per-module samples), dropped
first; hook-free iterations (the reference for the overhead ratio); under the kernel clock,
traced iterations (the device times).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import torch
from numpy.typing import NDArray
from torch import nn

from moduleprofiler.codepaths import CodePathWarning, fast_path_changes
from moduleprofiler.export.names import module_name
from moduleprofiler.progress import Progress
from moduleprofiler.state import preserved_state
from moduleprofiler.timing.clock import issue_warnings
from moduleprofiler.timing.clocks.protocol import Clock
from moduleprofiler.timing.device_results import DeviceTimes
from moduleprofiler.timing.device_trace import ClockName
from moduleprofiler.timing.iteration import RawIteration
from moduleprofiler.timing.listener import ClockListener
from moduleprofiler.timing.loop import TimingOptions
from moduleprofiler.timing.ranges import RangeListener
from moduleprofiler.timing.results import (
    ModelLayout,
    ModuleStats,
    Phase,
    PhaseSamples,
    TimedModules,
    calls_column,
    stats_columns,
    timed_profile,
)
from moduleprofiler.timing.setup import HookedPass
from moduleprofiler.timing.stats import Summary, summarize
from moduleprofiler.validate import check_pass
from moduleprofiler.warn import warn


@dataclass(frozen=True, eq=False, repr=False, kw_only=True)
class ModuleTiming(TimedModules):
    """Per-module forward times of one model, with the evidence needed to trust them.

    Times are milliseconds per iteration; a module called k times per iteration reports the
    sum of its k calls (``calls_per_iter`` says k). Raw samples are kept in ``forward``
    (every call's inclusive and self time, which its record keeps; ``samples(path)`` gives a
    module's) and the whole-iteration times ``hooked_ms`` / ``unhooked_ms``.
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
    FIGURES: ClassVar[tuple[str, ...]] = ("overhead_ratio", "coverage", "leaf_coverage")

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
        return self._forward_coverage()

    @property
    def leaf_coverage(self) -> float:
        """Sum of the leaves' median inclusive times over the root's median."""
        return self._forward_coverage(leaves=True)

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
    def timed_phases(self) -> tuple[Phase, ...]:
        """The forward: the clock's samples, the host's beside them under the kernel clock."""
        cal = self.calibration
        return (Phase("forward", self.forward, self.host, cal.attribution_ns / 1e6,
                      cal.per_call_ns / 1e6),)

    def module_stats(self) -> tuple[ModuleStats, ...]:
        """:class:`ModuleStats` of every module, ``named_modules()`` order: device time
        under the kernel clock (kernel durations carry no hook error), else the clock's."""
        return self.phase_stats()[0]

    def host_modules(self) -> tuple[ModuleStats, ...]:
        """:class:`ModuleStats` of the host times (the CPU clock's; under the kernel clock
        its host samples), with the calibrated hook cost taken off in the ``corrected``
        medians."""
        return self.phase_stats(host=True)[0]

    def call_samples(self, path: str) -> NDArray[np.float64]:
        """Inclusive time of every single call (ms) of one module, in call order."""
        out: NDArray[np.float64] = self.forward.call_inclusive_ms[
            self.forward.call_module == self.layout.index(path)]
        return out

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
        for name in ("corrected_median_ms", "self_corrected_median_ms"):
            data[name if name.startswith("self_") else f"inclusive_{name}"] = [
                math.nan if (value := getattr(s, name)) is None else value for s in stats]
        data["self_share"] = [s.exclusive.median / root if s.exclusive else math.nan
                              for s in stats]
        for name in ("expected_error_ms", "self_expected_error_ms", "low_confidence",
                     "self_low_confidence"):
            data[name] = [getattr(s, name) for s in stats]
        if self.device_times is not None:  # the statistics above are device times
            columns = self.module_columns()
            for name in ("host_ms", "self_host_ms", "device_launches", "device_idle_share",
                         "time_bound"):
                data[name] = [columns[s.path].get(name) for s in stats]
        return pd.DataFrame(data)

    def __str__(self) -> str:
        return self.report()

    def report(self) -> str:
        """The model tree with median inclusive and self times, share of the root, calls and
        the low-confidence flag (within 10x of the hooks' expected error), followed by the
        model-level evidence (also ``print(timing)``). :meth:`summary` is the one-row
        model summary, as on every profile."""
        stats = self.module_stats()
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
            trace = self.device_times.hook_free
            if trace is not None:
                notes.insert(2, f"bound by: the model's row is the hook-free regime "
                             f"({trace.bound}-bound); each module's compares its host time "
                             "under hooks with its device time")
            return self._tree(stats, ("self_host_ms", "host_ms", "self_device_ms", "device_ms",
                                      "time_bound"), {"self_device_pct": share}, notes,
                              "module forward times: host and device")
        return self._tree(stats, ("time_median_ms", "self_time_median_ms"), {
            "self_pct": share, "low_confidence": [s.self_low_confidence for s in stats],
        }, notes, "module forward times")

    def to_dict(self) -> dict[str, Any]:
        """Plain-Python summary: model-level figures plus one dict per module; under the
        kernel clock the hook-free trace's regime too."""
        out = super().to_dict()
        trace = self.device_times.hook_free if self.device_times is not None else None
        if trace is not None:
            out.update(bound=trace.bound, device_busy_share=trace.busy_share,
                       launches_per_iter=trace.launches,
                       host_per_launch_us=trace.host_per_launch_us)
        return out


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
    clock: ClockName | Clock = "auto",
    options: TimingOptions | None = None,
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
            0.0.4; :data:`~moduleprofiler.timing.loop.ADAPTIVE_DROP_FIRST` in an adaptive
            run, after its warm-up).
        warmup_seconds: run (hooked and hook-free alternately) at least this long before.
        target_ci: adaptive: stop once the median's CI is within this fraction of it
            (0.01 = ±1 %); ``None``: run until the budget ends.
        max_seconds: adaptive: budget of the whole call in seconds (the hooks' calibration,
            warm-up, dropped iterations and rounds; ``budget`` says how it went); ``None``:
            none. The call ends within it plus one iteration of a round; the warm-up takes
            at most a quarter of it.
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
            has queued work), ``"cpu"``, or a clock object
            (:class:`~moduleprofiler.timing.clocks.protocol.Clock`).
        options: the timing keywords (``num_iters`` ... ``progress``) as one
            :class:`~moduleprofiler.timing.TimingOptions`; a keyword given as well (not at
            its default) wins.

    Returns:
        :class:`ModuleTiming`. Its ``warnings`` are also issued as
        :class:`~moduleprofiler.timing.clock.TimingWarning` (a changed code path as
        :class:`~moduleprofiler.codepaths.CodePathWarning`).

    Raises:
        ProfilingError: the forward raised; the message names the module whose forward
            failed.
    """
    bar = Progress("timing modules", progress)  # from the start: calibration and warm-up too
    check_pass(module, pred_fn=pred_fn, eval=eval)
    opts = TimingOptions.of_call(time_modules, locals(), options)
    plan = opts.plan(fixed_drop_first=20, fixed_rounds=8)
    timed = HookedPass.start(module, input, pred_fn, device, clock, bar, plan.kept)
    module, resolved, invoke, chosen = timed.module, timed.device, timed.invoke, timed.clock
    notes = timed.notes
    changed = fast_path_changes(module, eval, grad_enabled=False)
    if changed:
        message = (
            f"hooks disable the fused fast path of TransformerEncoderLayer at {changed}: "
            "times are of the unfused path; benchmark() gives the real latency"
        )
        notes.append(message)
        warn(message, CodePathWarning)
    listener = ClockListener(chosen.stamps)
    timed.runner([listener], [RangeListener(backward=False)] if ranges else ())
    layout = ModelLayout.of(module)
    raws: list[RawIteration] = []
    plain: list[dict[str, float]] = []  # hook-free iterations' marks (ns)

    def step(mark: Callable[[str], None], run: Callable[[Callable[[], Any]], Any]) -> None:
        mark("start")
        run(invoke)
        mark("issued")
        chosen.settle()
        mark("end")

    run = timed.measure(step, {"hooked whole-model times": (listener, raws)}, plain, plan,
                        opts, bar, [preserved_state(module, eval=eval), torch.no_grad()],
                        finish=partial(chosen.finish, invoke, plain))
    resolved_iterations = [listener.resolve(raw) for raw in raws]
    hooked_ms = np.asarray([t.marks["end"] - t.marks["start"]
                            for t in resolved_iterations]) / 1e6
    plain_ms = np.asarray([m["end"] - m["start"] for m in plain]) / 1e6
    raised = [*run.notes, *_overhead_warnings(hooked_ms, plain_ms, chosen.overhead_caveat)]
    issue_warnings(raised)
    readings = chosen.readings(layout, PhaseSamples.collect("forward", resolved_iterations,
                                                            len(layout.paths)))
    return timed_profile(ModuleTiming(
        layout=layout,
        forward=readings.forward,
        hooked_ms=hooked_ms,
        unhooked_ms=plain_ms,
        calibration=chosen.calibration,
        device=str(resolved),
        clock=readings.clock,
        dropped=run.dropped,
        confidence=opts.confidence,
        environment=run.environment,
        warnings=(*notes, *raised, *readings.notes),
        host=readings.host_forward,
        device_times=readings.device_times,
        stop_reason=run.stop_reason,
        elapsed_s=run.elapsed_s,
        budget=run.budget,
    ), resolved_iterations)


def _overhead_warnings(hooked_ms: NDArray[np.float64], plain_ms: NDArray[np.float64],
                       caveat: str) -> list[str]:
    """The note when the hooks slow the whole model down more than 5 %, with the clock's
    ``caveat`` (noisy hook-free times are the loop's noise note)."""
    ratio = (float(np.median(hooked_ms) / np.median(plain_ms)) if hooked_ms.size
             and plain_ms.size else math.nan)
    if not ratio > 1.05:
        return []
    return [f"hooks slow the whole model down {ratio:.3f}x (> 1.05): {caveat}"]
