"""Deprecated: moved to :mod:`moduleprofiler.compat.timing` (this module re-exports it and
warns)."""

import warnings

from moduleprofiler.compat.timing import (
    LEGACY_MODULE_KEYS,
    LEGACY_TOTAL_KEYS,
    inference_time_dict,
    total_inference_time_dict,
)

__all__ = ["LEGACY_MODULE_KEYS", "LEGACY_TOTAL_KEYS", "inference_time_dict",
           "total_inference_time_dict"]

warnings.warn("moduleprofiler.legacy_timing is deprecated: use moduleprofiler.compat.timing",
              DeprecationWarning, stacklevel=2)
