"""Column values as plain Python values: what every view and sum reads, with ``None`` for an
unknown value."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from moduleprofiler.export.units import is_missing

_ALWAYS_KNOWN = frozenset((int, bool, str, tuple))
"""Types whose values are never unknown and already plain: most of a column's values, passed
through without the test of :func:`~moduleprofiler.export.units.is_missing` (a long pass has
tens of thousands of rows)."""
_PLAIN = _ALWAYS_KNOWN | {type(None)}


def plain(values: Iterable[Any]) -> list[Any]:
    """``values`` as plain Python objects: numpy scalars become ``int``/``float``/``bool``
    and unknown values (``pd.NA``, NaN) ``None``."""
    if isinstance(values, pd.Series) and values.dtype.kind in "iub":
        # integers or flags (nullable or not): converted in one call, not value by value
        converted: list[Any] = values.to_numpy(
            dtype=object, na_value=None).tolist()  # type: ignore[call-overload]
        return converted
    values = list(values)
    if set(map(type, values)) <= _PLAIN:  # plain already: the types checked in one pass in C
        return values
    out: list[Any] = []
    append = out.append
    for value in values:
        if isinstance(value, np.generic):
            value = value.item()
        kind = type(value)
        if kind in _ALWAYS_KNOWN or value is None:
            append(value)
        elif value is pd.NA:  # a nullable column's missing value
            append(None)
        elif kind is float:
            append(value if value == value else None)  # NaN is unknown
        else:
            append(None if is_missing(value) else value)
    return out


def exact_sum(values: Iterable[Any]) -> Any:
    """Sum of the known values of ``values`` (a column: unknown ones are skipped, as pandas'
    ``sum`` skips them) in Python numbers: exact past 2**63, where ``Int64`` arithmetic wraps
    without a word; 0 when none is known."""
    return sum(value for value in plain(values) if value is not None)
