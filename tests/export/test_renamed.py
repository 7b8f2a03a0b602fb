"""Column names of 0.1 still select their columns (with a warning naming the new one and the
removal version), and 0.1's JSON files read back with the same numbers under the new names."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler, Profile, Profiler
from moduleprofiler.deprecation import REMOVAL_VERSION
from moduleprofiler.export.renamed import RENAMED, current_name

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "profile_schema2.json"


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Sequential(nn.Linear(3, 2)))


def _profile() -> Profile:
    return Profiler().profile(_model(), torch.randn(2, 4))


def test_an_old_name_warns_naming_the_new_column_and_the_removal() -> None:
    with pytest.warns(DeprecationWarning) as caught:
        assert current_name("inclusive_ops") == "ops"
    message = str(caught[0].message)
    assert "'inclusive_ops'" in message and "'ops'" in message and REMOVAL_VERSION in message
    with pytest.warns(DeprecationWarning, match="'self_params'"):
        assert current_name("own_params") == "self_params"


def test_a_current_name_passes_silently() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [current_name(name) for name in ("ops", "self_ops", "params", "my_count")] \
            == ["ops", "self_ops", "params", "my_count"]


def test_every_old_name_maps_to_a_current_registered_column() -> None:
    import importlib

    from moduleprofiler.export.columns import is_registered

    for package in ("moduleprofiler.distributed", "moduleprofiler.efficiency"):
        importlib.import_module(package)  # their listeners' columns

    targets = {new.removesuffix("_pct") for new in RENAMED.values()}
    assert [name for name in targets if not is_registered(name)] == []


def test_views_select_by_an_old_name() -> None:
    profile = _profile()
    with pytest.warns(DeprecationWarning, match="'ops'"):
        table = profile.table(["inclusive_ops", "own_params"], sort_by="inclusive_ops")
    # Linear(4, 3) on 2 rows: 2 * 3 * (2 * 4 - 1 + 1) = 48; ReLU 6; Linear(3, 2): 2 * 2 * 6 = 24
    assert table.columns == ("module", "type", "ops", "self_params")
    assert table.df["ops"].tolist()[:2] == [48 + 6 + 24, 48]
    with pytest.warns(DeprecationWarning):
        tree = profile.tree(["inclusive_ops_pct"])
    assert tree.df["ops_pct"].tolist()[0] == 100.0
    with pytest.warns(DeprecationWarning):
        top = profile.top(2, by="inclusive_ops", depth=1)
    # depth 1: Linear 48 and the inner Sequential 24 are the two largest types there
    assert top.df["ops"].tolist() == [48, 24]


def test_the_command_line_sorts_by_an_old_name(capsys: pytest.CaptureFixture[str]) -> None:
    from moduleprofiler.cli import main

    with pytest.warns(DeprecationWarning, match="'ops'"):
        assert main(["torch.nn:Linear", "--arg", "in_features=4", "--arg", "out_features=3",
                     "-i", "2x4", "--sort", "inclusive_ops"]) == 0
    assert "48" in capsys.readouterr().out  # 2 * 3 * 8


def test_a_schema_2_file_reads_back_with_the_same_numbers_under_the_new_names() -> None:
    old = json.loads(FIXTURE.read_text())
    assert old["schema_version"] == 2
    profile = Profile.from_json(FIXTURE)
    records = {r.path: r for r in profile.records}
    for row in old["records"]:
        record = records[row["path"]]
        # the own count was "ops", the inclusive one "inclusive_ops"
        assert (record.self_ops, record.ops) == (row["ops"], row["inclusive_ops"])
        assert (record.self_macs, record.macs) == (row["macs"], row["inclusive_macs"])
        assert record.self_backward_ops == row["backward_ops"]
        assert record.self_params == row["own_params"]
        assert record.metrics["self_moved_bytes"] == row["metrics"]["moved_bytes"]
        assert "moved_bytes" not in record.metrics
    modules = profile.to_df("module").set_index("module")
    # the inner Sequential ("2") does no work of its own; its Linear(3, 2) on 2 rows does
    # 2 * 2 * (2 * 3 - 1 + 1) = 24 ops, and the root 48 + 6 + 24 = 78
    assert (modules.loc["2", "self_ops"], modules.loc["2", "ops"]) == (0, 24)
    assert modules.loc["__root__", "ops"] == 78 == old["totals"]["ops"] == profile.total_ops
    assert modules["self_ops"].sum() == 78
    assert modules.loc["__root__", "backward_ops"] == old["totals"]["backward_ops"] == 83
    # moved bytes: the root's inclusive value is the sum of its calls' own bytes
    own_moved = sum(row["metrics"]["moved_bytes"] for row in old["records"])
    assert modules.loc["__root__", "moved_bytes"] == own_moved == 236


def test_a_schema_2_file_round_trips_as_schema_3(tmp_path: Path) -> None:
    profile = Profile.from_json(FIXTURE)
    profile.to_json(tmp_path / "again.json")
    document = json.loads((tmp_path / "again.json").read_text())
    assert document["schema_version"] == 3
    assert "inclusive_ops" not in document["records"][0]
    assert "self_ops" in document["records"][0]
    again = Profile.from_json(tmp_path / "again.json")
    pd.testing.assert_frame_equal(again.to_df("module"), profile.to_df("module"))


def test_the_0_0_4_dicts_keep_their_names_and_numbers() -> None:
    ops = ModuleProfiler().estimate_ops(_model(), torch.randn(2, 4))
    # 0.0.4's "ops" is the own count, its "inclusive_ops" the module with its children
    assert (ops["2"]["ops"], ops["2"]["inclusive_ops"]) == (0, 24)
    assert (ops["__root__"]["ops"], ops["__root__"]["inclusive_ops"]) == (0, 78)
