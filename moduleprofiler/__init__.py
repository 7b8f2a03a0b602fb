"""moduleprofiler: where every parameter, operation and millisecond of a PyTorch model goes."""

from moduleprofiler._version import __version__
from moduleprofiler.compat import (
    ModuleProfiler,
    get_default_io_size_map,
    register_io_size,
    unregister_io_size,
)
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
from moduleprofiler.timing import TrainingProfiler

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
    "ProfilingError",
    "RegistryError",
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
