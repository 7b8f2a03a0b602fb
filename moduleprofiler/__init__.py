"""moduleprofiler: where every parameter, operation and millisecond of a PyTorch model goes.

Start with :class:`Profiler` (``Profiler().profile(model, x)``); :class:`ModuleProfiler` is
the same class plus the 0.0.4 methods and keywords."""

from moduleprofiler._version import __version__
from moduleprofiler.compat import (
    ModuleProfiler,
    get_default_io_size_map,
    register_io_size,
    unregister_io_size,
)
from moduleprofiler.core import Profiler
from moduleprofiler.errors import FormulaError, LossError, ProfilingError, RegistryError
from moduleprofiler.export.profile import Profile
from moduleprofiler.operator_listener import OperatorListener
from moduleprofiler.records import CallRecord, ModuleInfo
from moduleprofiler.registry import (
    get_default_macs_map,
    get_default_ops_map,
    register_macs,
    register_ops,
    unregister_ops,
)
from moduleprofiler.runner import Call, Listener, PassRunner
from moduleprofiler.timing import TimingOptions, TrainingProfiler

__all__ = [
    "Call",
    "CallRecord",
    "FormulaError",
    "Listener",
    "LossError",
    "ModuleInfo",
    "ModuleProfiler",
    "OperatorListener",
    "PassRunner",
    "Profile",
    "Profiler",
    "ProfilingError",
    "RegistryError",
    "TimingOptions",
    "TrainingProfiler",
    "__version__",
    "get_default_io_size_map",
    "get_default_macs_map",
    "get_default_ops_map",
    "register_io_size",
    "register_macs",
    "register_ops",
    "unregister_io_size",
    "unregister_ops",
]
