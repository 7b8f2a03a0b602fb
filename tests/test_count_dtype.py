"""The pandas column type of counts (:mod:`moduleprofiler.count_dtype`)."""

from __future__ import annotations

from moduleprofiler.count_dtype import count_dtype


def test_counts_are_nullable_integers_until_they_pass_64_bits() -> None:
    assert count_dtype([0, None, 2**63 - 1, -(2**63)]) == "Int64"  # the int64 range
    assert count_dtype([1, 2**63]) == "object"     # one past it: exact Python integers
    assert count_dtype([1, None, 0.5]) == "Float64"  # a fraction: floats
    assert count_dtype([]) == "Int64"
