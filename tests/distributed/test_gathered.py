"""The cross-rank views of a DistributedProfile, on profiles made in this process."""

from __future__ import annotations

import io
import json

import pandas as pd
import pytest
import torch

from moduleprofiler import ModuleProfiler
from moduleprofiler.distributed import DistributedProfile
from tests.distributed.models import mlp


def _gathered() -> DistributedProfile:
    # three "ranks" with 2, 3 and 7 rows: the first Linear(4, 8) does rows * 32 MACs
    return DistributedProfile(tuple(ModuleProfiler().profile(mlp(), torch.randn(rows, 4))
                                    for rows in (2, 3, 7)))


def test_module_stats_min_median_max_sum_and_skew() -> None:
    stats = _gathered().module_stats(["macs", "ops"]).set_index("module")
    first = stats.loc["0"]
    # MACs 64, 96, 224: min 64, median 96, max 224, sum 384, skew 224 / 96
    assert (first["macs_min"], first["macs_median"], first["macs_max"], first["macs_sum"]) \
        == (64, 96, 224, 384)
    assert first["macs_skew"] == pytest.approx(224 / 96)
    # ReLU on rows x 8: 16, 24, 56 ops
    assert stats.loc["1", ["ops_min", "ops_median", "ops_max"]].tolist() == [16, 24, 56]
    # the root does no work of its own: median 0, so no skew
    assert pd.isna(stats.loc["__root__", "macs_skew"])


def test_every_numeric_column_by_default() -> None:
    stats = _gathered().module_stats()
    assert {"macs_median", "inclusive_flops_max", "params_sum"} <= set(stats.columns)
    assert "module_median" not in stats.columns and "complete_min" not in stats.columns


def test_totals_sum_over_ranks() -> None:
    gathered = _gathered()
    # 12 rows over the ranks: 12 * (4 * 8 + 8 * 6) MACs
    assert gathered.totals()["total_macs"] == 12 * 80
    assert gathered.world_size == 3


def test_stragglers_name_the_module_and_rank_above_the_median() -> None:
    gathered = _gathered()
    table = gathered.stragglers(2, by="macs")
    # the third rank's calls are furthest above the median: Linear(8, 6) 7*48 - 3*48 = 192,
    # then Linear(4, 8) 224 - 96 = 128
    assert table[["module", "rank", "excess"]].values.tolist() == [["2", 2, 192.0],
                                                                   ["0", 2, 128.0]]
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
