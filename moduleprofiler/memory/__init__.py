"""Memory: parameter and buffer bytes, serialized size, activation and saved-for-backward bytes
per module call, and peak memory of inference and training (``docs/memory.md``). The measured
numbers come from listeners of the pass runner, which also put them on a profile's records."""

from moduleprofiler.memory.measure import measure_memory
from moduleprofiler.memory.peak import LiveBytesListener
from moduleprofiler.memory.report import CallMemory, MemoryReport, PassMemory, PeakCall
from moduleprofiler.memory.saved import SavedTensorsListener
from moduleprofiler.memory.serialized import state_dict_bytes
from moduleprofiler.memory.static import memory_by_dtype, module_bytes, parameter_memory
from moduleprofiler.summary_row import model_summary

__all__ = [
    "CallMemory",
    "LiveBytesListener",
    "MemoryReport",
    "PassMemory",
    "PeakCall",
    "SavedTensorsListener",
    "measure_memory",
    "memory_by_dtype",
    "model_summary",
    "module_bytes",
    "parameter_memory",
    "state_dict_bytes",
]
