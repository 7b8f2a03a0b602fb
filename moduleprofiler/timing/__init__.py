"""Timing engine: whole-model latency, per-module forward and backward time, live training.

Three separate passes, never mixed (hooks distort what they measure):

* :func:`benchmark` — hook-free whole-model latency/throughput with adaptive stopping;
* :func:`time_modules` — per-module forward time with hooks, with the hooks' cost measured;
* :func:`train_step_times` / :class:`TrainingProfiler` — per-module forward and backward time
  of training steps.

Every repeated-run pass is the one measurement loop (:mod:`moduleprofiler.timing.loop`) with
its own step; :class:`TimingOptions` carries its keywords as one object. The per-module passes
are a :class:`ClockListener` on the pass runner
(:class:`moduleprofiler.runner.PassRunner`); it also runs in any other pass's listeners. See
``docs/timing.md`` for the methodology. :class:`RangeListener` (``ranges=True``) names every
module call in the PyTorch profiler's trace and in NVTX.

Every caveat a result keeps in its ``warnings`` is also issued as a :class:`TimingWarning`
(``warnings.simplefilter("ignore", TimingWarning)`` silences them; the result keeps them).
"""

from moduleprofiler.codepaths import CodePathWarning
from moduleprofiler.timing.backward import TrainingTiming, train_step_times
from moduleprofiler.timing.clock import TimingWarning
from moduleprofiler.timing.environment import get_hardware_specs
from moduleprofiler.timing.forward import ModuleTiming, time_modules
from moduleprofiler.timing.latency import LatencyResult, benchmark
from moduleprofiler.timing.listener import ClockListener
from moduleprofiler.timing.live import TrainingProfiler, track
from moduleprofiler.timing.loop import TimingOptions
from moduleprofiler.timing.overhead import HookCalibration, calibrate_hooks
from moduleprofiler.timing.ranges import RangeListener
from moduleprofiler.timing.stats import Summary, median_ci, summarize

__all__ = [
    "ClockListener",
    "CodePathWarning",
    "HookCalibration",
    "LatencyResult",
    "ModuleTiming",
    "RangeListener",
    "Summary",
    "TimingOptions",
    "TimingWarning",
    "TrainingProfiler",
    "TrainingTiming",
    "benchmark",
    "calibrate_hooks",
    "get_hardware_specs",
    "median_ci",
    "summarize",
    "time_modules",
    "track",
    "train_step_times",
]
