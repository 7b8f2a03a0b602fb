"""``moduleprofiler.utils``, moduleprofiler 0.0.4's path of its helpers: the same functions as
:mod:`moduleprofiler.compat.utils` (importing from here keeps working, without a warning, so
that 0.0.4 code runs unchanged)."""

from moduleprofiler.compat.utils import (
    add_extension,
    dict_keys_common,
    dict_keys_diff,
    dict_merge,
    frames_per_second,
    get_hardware_specs,
    make_list,
    ops_to_flops,
    realtime_factor,
)

__all__ = [
    "add_extension", "dict_keys_common", "dict_keys_diff", "dict_merge", "frames_per_second",
    "get_hardware_specs", "make_list", "ops_to_flops", "realtime_factor",
]
