"""Deprecated: moved to :mod:`moduleprofiler.compat.profiler` (this module re-exports it and
warns). Use ``from moduleprofiler import ModuleProfiler``."""

from moduleprofiler.compat.profiler import ModuleProfiler, dict_to_frame
from moduleprofiler.deprecation import warn_deprecated
from moduleprofiler.export.names import module_name as legacy_name

LegacyPasses = ModuleProfiler
"""The 0.0.4 methods now live on ``ModuleProfiler`` itself (formerly a mixin)."""

__all__ = ["LegacyPasses", "dict_to_frame", "legacy_name"]

warn_deprecated("moduleprofiler.legacy", "the 0.0.4 methods are in "
                "moduleprofiler.compat.profiler (use moduleprofiler.ModuleProfiler)",
                stacklevel=2)  # the importing line
