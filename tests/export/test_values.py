"""Column values as plain Python values (:mod:`moduleprofiler.export.values`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from moduleprofiler.export.aggregate import sum_known
from moduleprofiler.export.values import plain


def test_plain_turns_every_kind_of_column_into_python_values() -> None:
    """Columns of a frame (nullable or numpy, integers, flags, floats) and lists of record
    values become plain Python values, with ``None`` for each unknown one."""
    cases = [
        (pd.Series([3, None, 2**63 - 1], dtype="Int64"), [3, None, 2**63 - 1], int),
        (pd.Series([2**64 - 1], dtype="UInt64"), [2**64 - 1], int),
        (pd.Series([True, None], dtype="boolean"), [True, None], bool),
        (pd.Series([4, 5]), [4, 5], int),
        (pd.Series([1.5, np.nan]), [1.5, None], float),
        (pd.Series([0.5, None], dtype="Float64"), [0.5, None], float),
        ([np.int64(7), pd.NA, float("nan"), (1, 2), "x"], [7, None, None, (1, 2), "x"], None),
        ([1, None, True, "s", (2,)], [1, None, True, "s", (2,)], None),
    ]
    for values, expected, kind in cases:
        got = plain(values)
        assert got == expected
        if kind is not None:  # Python values, not numpy scalars
            assert {type(value) for value in got if value is not None} == {kind}
    # sums: 1 + 2 + True = 4; one unknown value makes the sum unknown; none at all too
    assert sum_known([1, 2, True]) == 4 and type(sum_known([1, 2])) is int
    assert sum_known([1, None]) is None and sum_known([]) is None
    assert sum_known([1, 2.5]) == 3.5 and sum_known([1, float("nan")]) is None
