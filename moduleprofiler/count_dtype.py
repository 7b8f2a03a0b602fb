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
    if any(isinstance(value, float) for value in data):
        return "Float64"
    if any(isinstance(value, int) and value not in INT64 for value in data):
        return "object"
    return "Int64"
