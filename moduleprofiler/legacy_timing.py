"""Deprecated: moved to :mod:`moduleprofiler.compat.timing` (this module re-exports it and
warns)."""

from moduleprofiler.compat.timing import (
    LEGACY_MODULE_KEYS,
    LEGACY_TOTAL_KEYS,
    inference_time_dict,
    total_inference_time_dict,
)
from moduleprofiler.deprecation import warn_deprecated

__all__ = ["LEGACY_MODULE_KEYS", "LEGACY_TOTAL_KEYS", "inference_time_dict",
           "total_inference_time_dict"]

warn_deprecated("moduleprofiler.legacy_timing", "use moduleprofiler.compat.timing",
                stacklevel=2)  # the importing line
