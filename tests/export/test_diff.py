"""``compare``: two profiles module by module (:mod:`moduleprofiler.export.diff`)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler
from moduleprofiler.export import compare


def test_deltas_of_counts_past_64_bits_are_exact() -> None:
    # Linear(10**7, 10**7) without bias: 10**7 * (2 * 10**7 - 1) = 199_999_990_000_000 ops a
    # row; 10**6 rows (1.99999990 * 10**20 ops, past 2**63) against 10**6 + 1 rows
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(10**7, 10**7, bias=False))
    profiler = ModuleProfiler()
    before = profiler.profile(model, torch.empty(10**6, 10**7, device="meta"))
    after = profiler.profile(model, torch.empty(10**6 + 1, 10**7, device="meta"))
    rows = compare(before, after, ["ops", "macs"]).df.set_index("module")
    per_row = 10**7 * (2 * 10**7 - 1)
    assert rows.loc["__root__", "ops_before"] == 10**6 * per_row
    assert rows.loc["__root__", "ops_delta"] == per_row  # a float64 made it 2 * 10**14
    assert rows.loc["__root__", "macs_delta"] == 10**14   # one row of 10**7 x 10**7 MACs
    assert compare(before, before, changed_only=True).df.empty


def test_a_module_on_one_side_only_leaves_the_others_exact_integers() -> None:
    # Linear(2**26, 1) without bias on 2**27 + 1 rows: (2**27 + 1) * (2**27 - 1)
    # = 2**54 - 1 ops, odd and past 2**53, where a float64 rounds to an even neighbour
    with torch.device("meta"):
        one = nn.Sequential(nn.Linear(2**26, 1, bias=False))
        two = nn.Sequential(nn.Linear(2**26, 1, bias=False), nn.ReLU())
    x = torch.empty(2**27 + 1, 2**26, device="meta")
    profiler = ModuleProfiler()
    rows = compare(profiler.profile(one, x), profiler.profile(two, x), ["ops"]).df
    rows = rows.set_index("module")
    assert rows.loc["0", "ops_before"] == 2**54 - 1 and rows["ops_before"].dtype == "Int64"
    assert rows.loc["__root__", "ops_delta"] == 2**27 + 1  # ReLU: one op per element
    assert rows["ops_before"].isna().tolist() == [False, False, True]  # no ReLU before


def test_a_column_of_no_number_is_refused() -> None:
    # shapes have no difference: every cell of output_shapes before / after / delta / ratio
    # read "-" (unknown), as if the shapes were not known
    profile = ModuleProfiler().profile(nn.Sequential(nn.Linear(3, 3)), torch.randn(2, 3))
    for columns in (["output_shapes"], ["ops", "ops_source"]):
        with pytest.raises(ValueError, match=r"column\(s\) of no number \['(output_shapes|"
                                             r"ops_source)'\]"):
            compare(profile, profile, columns)
    assert compare(profile, profile, ["calls"]).df["calls_delta"].tolist() == [0, 0]
