"""The pandas column type of a column of counts, for every frame that holds counts."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

INT64 = range(-2**63, 2**63)
"""The values a nullable ``Int64`` column holds."""


def count_dtype(values: Iterable[Any]) -> str:
    """``"Int64"`` (nullable integers) for counts, ``"Float64"`` if any is fractional, and
    ``"object"`` (Python integers, exact) if any is beyond 64 bits: ``Int64`` cannot hold
    those (a ``Linear(10**7, 10**7)`` on the meta device runs 10**20 MACs), and its
    arithmetic would wrap them silently. ``values`` are plain (``None`` for unknown)."""
    data = list(values)
    # the types first (one pass in C): a column of tens of thousands of counts is checked
    # without a Python-level test per value
    kinds = set(map(type, data))
    if any(issubclass(kind, float) for kind in kinds):
        return "Float64"
    integers = [value for value in data if isinstance(value, int)] \
        if kinds - {int, bool, type(None)} else [value for value in data if value is not None]
    if integers and (min(integers) not in INT64 or max(integers) not in INT64):
        return "object"
    return "Int64"
