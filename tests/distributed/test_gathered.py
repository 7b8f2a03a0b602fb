"""The cross-rank views of a DistributedProfile, on profiles made in this process."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler
from moduleprofiler.distributed import DistributedProfile
from tests.distributed.models import mlp


def _gathered() -> DistributedProfile:
    # three "ranks" with 2, 3 and 7 rows: the first Linear(4, 8) does rows * 32 MACs
    return DistributedProfile(tuple(ModuleProfiler().profile(mlp(), torch.randn(rows, 4))
                                    for rows in (2, 3, 7)))


def test_module_stats_min_median_max_sum_and_skew() -> None:
    stats = _gathered().module_stats(["macs", "ops", "self_macs"]).set_index("module")
    first = stats.loc["0"]
    # MACs 64, 96, 224: min 64, median 96, max 224, sum 384, skew 224 / 96
    assert (first["macs_min"], first["macs_median"], first["macs_max"], first["macs_sum"]) \
        == (64, 96, 224, 384)
    assert first["macs_skew"] == pytest.approx(224 / 96)
    # ReLU on rows x 8: 16, 24, 56 ops
    assert stats.loc["1", ["ops_min", "ops_median", "ops_max"]].tolist() == [16, 24, 56]
    # the root does no work of its own: median 0, so no skew
    assert pd.isna(stats.loc["__root__", "self_macs_skew"])


def test_every_numeric_column_by_default() -> None:
    stats = _gathered().module_stats()
    assert {"macs_median", "flops_max", "params_sum"} <= set(stats.columns)
    assert "module_median" not in stats.columns and "complete_min" not in stats.columns


def test_totals_sum_over_ranks() -> None:
    gathered = _gathered()
    # 12 rows over the ranks: 12 * (4 * 8 + 8 * 6) MACs
    assert gathered.totals()["macs"] == 12 * 80
    assert gathered.world_size == 3


def test_stragglers_name_the_module_and_rank_above_the_median() -> None:
    gathered = _gathered()
    table = gathered.stragglers(2, by="self_macs")
    # the third rank's calls are furthest above the median: Linear(8, 6) 7*48 - 3*48 = 192,
    # then Linear(4, 8) 224 - 96 = 128
    assert table[["module", "rank", "self_macs_excess"]].values.tolist() == [
        ["2", 2, 192.0], ["0", 2, 128.0]]
    with pytest.raises(ValueError, match="no time column"):
        gathered.stragglers()


def test_files_round_trip_and_show_every_rank() -> None:
    gathered = _gathered()
    again = DistributedProfile.from_json(gathered.to_json())
    assert [p.total_macs for p in again.profiles] == [160, 240, 560]
    frame = pd.read_csv(io.StringIO(gathered.to_csv()))
    assert frame["rank"].tolist() == [0] * 4 + [1] * 4 + [2] * 4
    report = gathered.to_html(title="three ranks")
    assert "<h1>three ranks</h1>" in report and "per module across ranks" in report
    assert json.loads(gathered.to_json())["world_size"] == 3
    with pytest.raises(ValueError, match="distributed profile"):
        DistributedProfile.from_json(gathered.profiles[0].to_json())


def test_bad_input_is_a_typed_error() -> None:
    with pytest.raises(TypeError, match="one Profile per rank"):
        DistributedProfile(())
    with pytest.raises(KeyError, match="no column"):
        _gathered().module_stats(["nope"])


def test_the_totals_have_profiles_names() -> None:
    gathered = _gathered()
    # mlp(): Linear(4, 8) 32 MACs per row, Linear(8, 6) 48 per row; 2 + 3 + 7 = 12 rows
    assert gathered.total_macs == 12 * (32 + 48) == 960
    assert gathered.total_flops == 2 * 960
    # ops per row: Linear(4, 8) 8 * (2 * 4 - 1) + 8 = 64, ReLU 8, Linear(8, 6) 6 * 15 + 6 = 96
    assert gathered.total_ops == 12 * (64 + 8 + 96) == 2016
    # the model's parameters, the same on every rank: 4 * 8 + 8 + 8 * 6 + 6 = 94 (not 3 * 94)
    assert gathered.total_params == 94 and gathered.total_buffers == 0
    assert gathered.total_backward_ops is None  # no backward profiled: unknown, never 0
    assert gathered.complete and gathered.lower_bounds == ()
    totals = gathered.totals()
    # under the names a profile's summary() and to_dict()["totals"] give the same numbers
    for name in ("params", "buffers", "ops", "macs", "flops", "backward_ops", "backward_macs"):
        assert totals[name] == getattr(gathered, f"total_{name}"), name
    assert list(totals)[:7] == ["params", "buffers", "ops", "macs", "flops", "backward_ops",
                                "backward_macs"]
    assert totals["macs"] == sum(p.to_dict()["totals"]["macs"] for p in gathered.profiles) \
        == 960
    with pytest.warns(DeprecationWarning, match=r"DistributedProfile.totals\(\)'s key "
                                                r"'total_macs' is deprecated and will be removed "
                                                r"in moduleprofiler 0.3.0; use 'macs'"):
        assert totals["total_macs"] == 960
    with pytest.warns(DeprecationWarning, match="'total_flops'"):
        assert totals.get("total_flops") == 1920


def test_parameters_that_differ_between_ranks_are_unknown() -> None:
    # pipeline-like: each rank a different model (94 and 4 * 2 + 2 = 10 parameters): the
    # group's parameter count is not one rank's, and a sum would count replicas twice
    gathered = DistributedProfile((ModuleProfiler().profile(mlp(), torch.randn(2, 4)),
                                   ModuleProfiler().profile(nn.Linear(4, 2), torch.randn(2, 4))))
    assert gathered.total_params is None
    # the work still adds up: 2 * 80 + 2 * 8 = 176 MACs
    assert gathered.total_macs == 176


def test_summary_is_the_groups_one_row_table() -> None:
    summary = _gathered().summary()
    assert isinstance(summary, pd.DataFrame) and len(summary) == 1
    row = summary.iloc[0]
    # the model on every rank: 4 * 8 + 8 + 8 * 6 + 6 = 94 parameters, 94 * 4 = 376 bytes
    assert (row["model"], row["world_size"], row["params"], row["param_bytes"]) == \
        ("Sequential", 3, 94, 376)
    # the work of every rank: 12 rows * 80 MACs = 960, 1,920 FLOPs
    assert (row["macs"], row["flops"], bool(row["complete"])) == (960, 1920, True)
    # no rank's latency is the group's
    assert pd.isna(row["latency_ms"]) and pd.isna(row["throughput"])
    assert list(summary.columns)[:3] == ["model", "world_size", "params"]


def test_summary_of_ranks_holding_different_parts_leaves_the_parameters_unknown() -> None:
    gathered = DistributedProfile((ModuleProfiler().profile(mlp(), torch.randn(2, 4)),
                                   ModuleProfiler().profile(nn.Linear(4, 2), torch.randn(2, 4))))
    row = gathered.summary().iloc[0]
    # 94 and 10 parameters: neither is the group's, and a sum would count replicas twice
    assert pd.isna(row["params"]) and pd.isna(row["param_bytes"])
    # 2 * 80 + 2 * 8 = 176 MACs over the two ranks
    assert row["macs"] == 176


def test_module_stats_show_integer_counts_as_integers() -> None:
    stats = _gathered().module_stats(["self_macs", "macs"]).set_index("module")
    # integer columns keep integers: min, max and sum, and the median where it is whole
    for column in ("self_macs_min", "self_macs_median", "self_macs_max", "self_macs_sum"):
        assert str(stats[column].dtype) == "Int64", column
    assert str(stats["self_macs_skew"].dtype) == "float64"
    # the root's inclusive MACs are the whole model's: 80 per row -> 160, 240, 560
    root = stats.loc["__root__"]
    assert (root["macs_min"], root["macs_median"],
            root["macs_max"], root["macs_sum"]) == (160, 240, 560, 960)
    assert "160" in stats.to_string() and "160.0" not in stats.to_string()


def test_a_median_between_two_ranks_stays_exact() -> None:
    gathered = DistributedProfile(tuple(ModuleProfiler().profile(mlp(), torch.randn(rows, 4))
                                        for rows in (1, 2)))
    stats = gathered.module_stats(["macs"]).set_index("module")
    # Linear(4, 8): 32 and 64 MACs, median 48 (whole); Linear(8, 6): 48 and 96, median 72
    assert stats.loc["0", "macs_median"] == 48 and str(stats["macs_median"].dtype) == "Int64"
    uneven = DistributedProfile(tuple(ModuleProfiler().profile(nn.Linear(1, 1), torch.randn(r, 1))
                                      for r in (1, 2)))
    # 1 and 2 MACs: the median 1.5 is not whole, so that column stays float
    assert uneven.module_stats(["macs"]).set_index("module").loc["__root__", "macs_median"] == 1.5


def test_a_stragglers_median_is_named_as_module_stats_names_it() -> None:
    # stragglers() wrote the module's median across ranks as "median" where module_stats()
    # calls the same number <column>_median (and excess, ratio were bare, in no glossary)
    gathered = _gathered()
    table = gathered.stragglers(2, by="self_macs")
    stats = gathered.module_stats(["self_macs"]).set_index("module")
    # Linear(8, 6): self MACs 2*48, 3*48, 7*48 = 96, 144, 336; median 144, 336 / 144
    assert list(table.columns) == ["module", "rank", "self_macs", "self_macs_median",
                                   "self_macs_excess", "self_macs_ratio"]
    assert table.loc[0, "self_macs_median"] == stats.loc["2", "self_macs_median"] == 144
    assert table.loc[0, "self_macs_ratio"] == pytest.approx(336 / 144)
    # the old names still select their column, with a warning naming the release removing them
    with pytest.warns(DeprecationWarning, match="'median'.*0\\.3\\.0.*'self_macs_median'"):
        assert table["median"].tolist() == [144.0, 96.0]
    with pytest.warns(DeprecationWarning, match="'excess'"):
        assert table.excess.tolist() == [192.0, 128.0]


def test_module_answers_about_one_module_as_a_profiles_does() -> None:
    # every result's module(path) is that module's facts (Profile.module): the same on every
    # rank here, Linear(4, 8) with 4 * 8 + 8 = 40 parameters
    gathered = _gathered()
    assert gathered.module("0") == gathered.profiles[1].module("0")
    assert gathered.module("0").params == 40 and gathered.module("0").type_name == "Linear"
    # the root, by either name: 40 + (8 * 6 + 6) = 94
    assert gathered.module("__root__").params == gathered.module("").params == 94
    with pytest.raises(KeyError, match="no module 'nope' on any of the 3 ranks"):
        gathered.module("nope")
    with pytest.raises(TypeError, match="path"):
        gathered.module(0)  # type: ignore[arg-type]


def test_module_of_a_module_the_ranks_hold_differently_is_refused() -> None:
    # two ranks holding a different Linear under the same path (another part of it each):
    # no one module's facts to give; each rank's is its profile's
    first = ModuleProfiler().profile(nn.Sequential(nn.Linear(4, 8)), torch.randn(2, 4))
    second = ModuleProfiler().profile(nn.Sequential(nn.Linear(4, 2)), torch.randn(2, 4))
    gathered = DistributedProfile((first, second))
    with pytest.raises(ValueError, match=r"module '0' differs .*rank 1.*params"):
        gathered.module("0")
    assert gathered.profiles[1].module("0").params == 10  # 4 * 2 + 2


def test_module_of_a_pipeline_stage_is_its_ranks() -> None:
    # a module only one rank holds (a pipeline stage's) is that rank's
    first = ModuleProfiler().profile(nn.Sequential(nn.Linear(4, 8)), torch.randn(2, 4))
    second = ModuleProfiler().profile(nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 3)),
                                      torch.randn(2, 4))
    assert DistributedProfile((first, second)).module("1").params == 27  # 8 * 3 + 3


def test_the_summary_of_counts_past_64_bits_is_exact() -> None:
    # Linear(10**7, 10**7) without bias on 5 * 10**4 rows: 5 * 10**18 MACs a rank (under
    # 2**63 ~ 9.22e18); two ranks: 10**19 MACs, past it (Int64 arithmetic wrapped it)
    rank = ModuleProfiler().profile(nn.Linear(10**7, 10**7, bias=False, device="meta"),
                                    torch.zeros(5 * 10**4, 10**7, device="meta"))
    gathered = DistributedProfile((rank, rank))
    row = gathered.summary().iloc[0]
    assert (row["macs"], row["flops"]) == (10**19, 2 * 10**19)
    # the spread across ranks: its sum raised TypeError (Int64 cannot hold 10**19)
    stats = gathered.module_stats(["macs"]).iloc[0]
    assert (stats["macs_max"], stats["macs_sum"]) == (5 * 10**18, 10**19)
