"""The pandas column type of counts (:mod:`moduleprofiler.count_dtype`)."""

from __future__ import annotations

from moduleprofiler.count_dtype import count_dtype


def test_counts_are_nullable_integers_until_they_pass_64_bits() -> None:
    assert count_dtype([0, None, 2**63 - 1, -(2**63)]) == "Int64"  # the int64 range
    assert count_dtype([1, 2**63]) == "object"     # one past it: exact Python integers
    assert count_dtype([1, None, 0.5]) == "Float64"  # a fraction: floats
    assert count_dtype([]) == "Int64"


def test_a_count_past_64_bits_is_found_beside_other_kinds_of_value() -> None:
    # the check reads the values' types first: a column that holds a bool, or a value of
    # another type, beside a count past 2**63 - 1 still needs exact Python integers
    assert count_dtype([True, None, 2**64]) == "object"
    assert count_dtype(["-", 5, -(2**63) - 1]) == "object"
    assert count_dtype([True, False, None]) == "Int64"
