"""moduleprofiler 0.0.4's face, kept so that code written for 0.0.4 runs unchanged.

:class:`ModuleProfiler` is the core :class:`~moduleprofiler.core.Profiler` plus 0.0.4's
constructor keywords and its 25 methods (``count_params``, ``trace_io_sizes``, ``estimate_ops``,
``estimate_inference_time``, ``estimate_total_inference_time``, each with ``_df``, ``_csv``,
``_html``, ``_latex``); the io-size map and its registry; 0.0.4's helpers
(:mod:`moduleprofiler.compat.utils`). Every view here is built from the core's records and
timers; the core never imports this package.
"""

from moduleprofiler.compat.io_size import (
    get_default_io_size_map,
    register_io_size,
    unregister_io_size,
)
from moduleprofiler.compat.profiler import ModuleProfiler

__all__ = ["ModuleProfiler", "get_default_io_size_map", "register_io_size", "unregister_io_size"]
