"""moduleprofiler: where every parameter, operation and millisecond of a PyTorch model goes.

Start with :class:`Profiler` (``Profiler().profile(model, x)``); :class:`ModuleProfiler` is
the same class plus the 0.0.4 methods and keywords.

The names below load on first use (PEP 562): ``import moduleprofiler`` alone imports no torch,
so that the command line (``moduleprofiler --version``, ``--help``, an argument error) answers
before torch loads. The first public name used imports every module that used to load here,
so their registrations (formulas, columns) are in place exactly as before.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from moduleprofiler._version import __version__

if TYPE_CHECKING:  # the same names, for type checkers and readers; loaded by __getattr__
    from moduleprofiler.call import Call
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
    from moduleprofiler.runner import Listener, PassRunner
    from moduleprofiler.timing import TimingOptions, TrainingProfiler

_EXPORTS: dict[str, str] = {
    "ModuleProfiler": "moduleprofiler.compat",
    "get_default_io_size_map": "moduleprofiler.compat",
    "register_io_size": "moduleprofiler.compat",
    "unregister_io_size": "moduleprofiler.compat",
    "Profiler": "moduleprofiler.core",
    "FormulaError": "moduleprofiler.errors",
    "LossError": "moduleprofiler.errors",
    "ProfilingError": "moduleprofiler.errors",
    "RegistryError": "moduleprofiler.errors",
    "Profile": "moduleprofiler.export.profile",
    "OperatorListener": "moduleprofiler.operator_listener",
    "CallRecord": "moduleprofiler.records",
    "ModuleInfo": "moduleprofiler.records",
    "get_default_macs_map": "moduleprofiler.registry",
    "get_default_ops_map": "moduleprofiler.registry",
    "register_macs": "moduleprofiler.registry",
    "register_ops": "moduleprofiler.registry",
    "unregister_ops": "moduleprofiler.registry",
    "Call": "moduleprofiler.call",
    "Listener": "moduleprofiler.runner",
    "PassRunner": "moduleprofiler.runner",
    "TimingOptions": "moduleprofiler.timing",
    "TrainingProfiler": "moduleprofiler.timing",
}
"""Public name -> the module it comes from: the ``TYPE_CHECKING`` imports above and
``__all__`` below, which ``tests/test_public_api.py`` holds equal to this table."""

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


def __getattr__(name: str) -> Any:
    """Load the public names on first use (see :func:`_load_public_names`)."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _load_public_names()
    return globals()[name]


def _load_public_names() -> None:
    """Import every public name, in the order the eager ``__init__`` imported them, so that
    what their modules register (formulas, and the time, memory and prediction columns a
    saved profile derives) is in place as it was when ``import moduleprofiler`` did this."""
    for export, module in _EXPORTS.items():
        globals()[export] = getattr(importlib.import_module(module), export)


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
