"""``moduleprofiler.profiler.ModuleProfiler``, moduleprofiler 0.0.4's path of the class (its
documentation links to it): the same class as ``moduleprofiler.ModuleProfiler``, defined in
:mod:`moduleprofiler.compat.profiler` on top of the core :class:`~moduleprofiler.core.Profiler`."""

from moduleprofiler.compat.profiler import ModuleProfiler

__all__ = ["ModuleProfiler"]
