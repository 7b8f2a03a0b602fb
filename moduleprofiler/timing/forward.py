"""Per-module forward time: a clock listener on the pass runner, one sample per call per
iteration, the hooks installed once per block of iterations.

``time_modules`` is the measurement loop (:mod:`moduleprofiler.timing.loop`) under
``torch.no_grad()`` with its blocks: hooked iterations (kept: the per-module samples), dropped
first; hook-free iterations (the reference for the overhead ratio); under the kernel clock,
traced iterations (the device times).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

from moduleprofiler.codepaths import CodePathWarning, fast_path_changes
from moduleprofiler.export.renamed import RenamedKeysDict
from moduleprofiler.forward_grad import without_gradients
from moduleprofiler.inputs import check_reusable, input_shapes_of
from moduleprofiler.modules import module_infos
from moduleprofiler.progress import Progress
from moduleprofiler.records import ModuleInfo
from moduleprofiler.state import preserved_state
from moduleprofiler.timing.clock import issue_warnings
from moduleprofiler.timing.clocks.protocol import Clock
from moduleprofiler.timing.device_trace import ClockName
from moduleprofiler.timing.iteration import RawIteration
from moduleprofiler.timing.listener import ClockListener
from moduleprofiler.timing.loop import LoopRun, TimingOptions
from moduleprofiler.timing.ranges import RangeListener
from moduleprofiler.timing.results import TimedCalls, TimedModules, pass_facts, timed_profile
from moduleprofiler.timing.setup import HookedPass
from moduleprofiler.timing.stats import Summary, summarize
from moduleprofiler.validate import check_pass
from moduleprofiler.warn import warn


@dataclass(frozen=True, eq=False, repr=False, kw_only=True)
class ModuleTiming(TimedModules):
    """Per-module forward times of one model, with the evidence needed to trust them.

    Times are milliseconds per iteration; a module called k times per iteration reports the
    sum of its k calls. Every call's samples are in its record (``samples(path)`` gives a
    module's per-iteration totals), every statistic in ``to_df("module")``, and the
    whole-iteration times with and without hooks in :attr:`facts`.
    """

    FIGURES: ClassVar[tuple[str, ...]] = ("overhead_ratio", "coverage", "leaf_coverage")

    @property
    def hooked_ms(self) -> NDArray[np.float64]:
        """Whole iteration (the ``input``/``pred_fn`` call) with hooks, per kept iteration."""
        return np.asarray(self.timing.hooked_ms, dtype=np.float64)

    @property
    def unhooked_ms(self) -> NDArray[np.float64]:
        """Whole iteration without hooks, measured in the interleaved rounds."""
        return np.asarray(self.timing.hook_free_ms, dtype=np.float64)

    # -- model-level figures ---------------------------------------------------------------
    @property
    def overhead_ratio(self) -> float:
        """Median hooked / median hook-free whole-iteration time (interleaved rounds)."""
        if self.unhooked_ms.size == 0 or self.hooked_ms.size == 0:
            return math.nan
        return float(np.median(self.hooked_ms) / np.median(self.unhooked_ms))

    def _ratio_text(self) -> str:
        ratio = self.overhead_ratio
        return "not measured" if math.isnan(ratio) else f"{ratio:.3f}"

    @property
    def coverage(self) -> float:
        """Sum of the modules' median self times over the root's median (expect 1 +- 0.03)."""
        return self._coverage()

    @property
    def leaf_coverage(self) -> float:
        """Sum of the leaves' median inclusive times over the root's median."""
        return self._coverage(leaves=True)

    @property
    def whole(self) -> Summary | None:
        """Statistics of the hooked whole-iteration time."""
        return summarize(self.hooked_ms, self.confidence)

    @property
    def hook_free(self) -> Summary | None:
        """Statistics of the hook-free whole-iteration time (was ``unhooked``, which on a
        profile names the TorchScript submodules that carry no hooks)."""
        return summarize(self.unhooked_ms, self.confidence)

    def call_samples(self, path: str) -> NDArray[np.float64]:
        """Inclusive time (ms) of every single call of one module: its calls in call order,
        each over the kept iterations in which it was made."""
        name = self.sample_column()
        values = [v for r in self.calls(path) for v in r.metrics.get(name, ())]
        out = np.asarray(values, dtype=np.float64)
        return out[~np.isnan(out)]

    # -- views -----------------------------------------------------------------------------
    def report(self) -> str:
        """The model tree with median inclusive and self times, share of the root, calls and
        the low-confidence flag (within 10x of the hooks' expected error, or fewer samples
        than ``min_iters``; under the kernel clock the device time's: fewer traced samples
        than the traced block's own minimum), followed by the model-level evidence (also
        ``print(timing)``). :meth:`summary` is the one-row model
        summary, as on every profile."""
        cal = self.calibration
        notes = [
            f"device {self.device} ({self.clock}); {self.iterations} iterations kept, "
            f"{self.dropped} dropped; times are medians per iteration",
            f"hooked / hook-free whole model: {self._ratio_text()}; "
            f"coverage (sum of self / root): {self.coverage:.3f}; "
            f"hook error per call ~{cal.attribution_ns / 1e3:.2f} us, "
            f"cost per call ~{cal.per_call_ns / 1e3:.2f} us",
            *self.warnings,
        ]
        if self.kernels:  # torchprof's four times, shares of the device's
            notes[1] = (f"hooked / hook-free whole model: {self._ratio_text()} (host "
                        f"times only); device time booked to modules: "
                        f"{100 * self.timing.booked_share:.1f} %; host times less the "
                        f"hooks' cost (~{cal.attribution_ns / 1e3:.2f} us a call)")
            trace = self.timing.hook_free
            if trace is not None:
                notes.insert(2, f"bound by: the model's row is the hook-free regime "
                             f"({trace.bound}-bound); each module's compares its host time "
                             "under hooks with its device time")
            return self._tree(("self_host_ms", "host_ms", "self_device_ms", "device_ms",
                               "time_bound", "self_device_ms_pct",
                               "device_low_confidence"), notes,
                              "module forward times: host and device")
        return self._tree(("time_median_ms", "self_time_median_ms", "self_low_confidence"),
                          notes, "module forward times", share="self_time_median_ms")

    def to_dict(self) -> dict[str, Any]:
        """Plain-Python summary: model-level figures plus one dict per module; under the
        kernel clock the hook-free trace's regime too (``time_bound``, the model row's value
        of the column; ``bound``, its name until 0.2, reads it with a ``DeprecationWarning``)."""
        out = super().to_dict()
        trace = self.timing.hook_free
        if trace is not None:  # the regime is the model row's time_bound ("bound" is a call's
            # compute or memory roof): the old key still reads, with a warning
            out.update(time_bound=trace.bound, device_busy_share=trace.busy_share,
                       launches_per_iter=trace.launches,
                       host_per_launch_us=trace.host_per_launch_us)
        return RenamedKeysDict(out, {"bound": "time_bound"}, "ModuleTiming.to_dict()")


def _as_walked(module: nn.Module, walked: Sequence[ModuleInfo]) -> tuple[ModuleInfo, ...]:
    """The facts of the modules the pass hooked, in the order it walked them, as they are now
    (a lazy module's parameters materialised by the pass); a submodule the forward created
    carried no hooks and is left out: its time is in its caller's own."""
    now = {info.path: info for info in module_infos(module)}
    return tuple(now.get(info.path, info) for info in walked)


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
    check_pass(module, pred_fn=pred_fn, eval=eval, ranges=ranges)
    check_reusable(input, "time_modules")
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
    runner = timed.runner([listener], [RangeListener(backward=False)] if ranges else ())
    # the modules as the runner walked them: each call's module is a position in this order,
    # which a submodule the forward creates (``self.extra = ...`` on its first call) shifts
    walked = module_infos(module)
    raws: list[RawIteration] = []
    plain: list[dict[str, float]] = []  # hook-free iterations' marks (ns)

    def step(mark: Callable[[str], None], run: Callable[[Callable[[], Any]], Any]) -> None:
        mark("start")
        run(invoke)
        mark("issued")
        chosen.settle()
        mark("end")

    def measured(grad: bool) -> LoopRun:
        raws.clear()
        plain.clear()
        return timed.measure(step, {"hooked whole-model times": (listener, raws)}, plain, plan,
                             opts, bar, [preserved_state(module, eval=eval, input=input),
                                         torch.set_grad_enabled(grad)],
                             finish=partial(chosen.finish, invoke, plain))

    run = without_gradients(measured)  # with them on for a forward that takes gradients
    resolved_iterations = [listener.resolve(raw) for raw in raws]
    hooked_ms = np.asarray([t.marks["end"] - t.marks["start"]
                            for t in resolved_iterations]) / 1e6
    plain_ms = np.asarray([m["end"] - m["start"] for m in plain]) / 1e6
    raised = [*run.notes, *_overhead_warnings(hooked_ms, plain_ms, chosen.overhead_caveat)]
    issue_warnings(raised)
    readings = chosen.readings()
    cal = chosen.calibration
    shapes, dtypes = input_shapes_of(input, pred_fn)  # what merge checks another pass by
    return timed_profile(ModuleTiming, _as_walked(module, walked), TimedCalls(
        forward=resolved_iterations,
        forward_error=(cal.attribution_ns / 1e6, cal.per_call_ns / 1e6),
        traced=readings.traced), pass_facts(
            readings, cal, run.environment, len(resolved_iterations), run.budget,
            device=str(resolved), confidence=opts.confidence, dropped=run.dropped,
            stop_reason=run.stop_reason, elapsed_s=run.elapsed_s,
            hooked_ms=tuple(hooked_ms.tolist()), hook_free_ms=tuple(plain_ms.tolist()),
            warnings=(*notes, *raised), input_shapes=shapes, input_dtypes=dtypes),
        readings.module_metrics, unhooked=runner.unhooked)


def _overhead_warnings(hooked_ms: NDArray[np.float64], plain_ms: NDArray[np.float64],
                       caveat: str) -> list[str]:
    """The note when the hooks slow the whole model down more than 5 %, with the clock's
    ``caveat`` (noisy hook-free times are the loop's noise note)."""
    ratio = (float(np.median(hooked_ms) / np.median(plain_ms)) if hooked_ms.size
             and plain_ms.size else math.nan)
    if not ratio > 1.05:
        return []
    return [f"hooks slow the whole model down {ratio:.3f}x (> 1.05): {caveat}"]
