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
from moduleprofiler.export.frame import SCHEMA_VERSION
from moduleprofiler.export.renamed import OWN_ONLY, RENAMED, current_name

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FIXTURE = FIXTURES / "profile_schema2.json"
SCHEMA_3 = FIXTURES / "profile_schema3.json"
"""Written by 0.2.0.dev0 before the last own-only columns were renamed: a model of
``first`` (Linear(4, 3)), ``block`` (Sequential(Linear(3, 3), ReLU()) under activation
checkpointing), ``talks`` (an all-reduce of a copy of its input, then ``x * 2``) and ``out``
(Linear(3, 2)) on a (2, 4) input, profiled with backward, a ``TrafficListener`` and a
``CommunicationListener(timing=True)`` on the fake process group of 2 ranks, then
``with_efficiency`` for the H100 SXM."""


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


def test_a_profiles_frame_answers_an_old_name() -> None:
    # the views took inclusive_ops and own_params, but profile.to_df()["inclusive_ops"]
    # raised KeyError. Module frame: the root's ops 48 + 6 + 24 = 78, Linear(4, 3)'s 48; its
    # own parameters 4 * 3 + 3 = 15, the root's 0
    frame = _profile().to_df("module")
    with pytest.warns(DeprecationWarning, match=r"'inclusive_ops' .*0\.3\.0.*use 'ops'"):
        assert frame["inclusive_ops"].tolist()[:2] == [78, 48]
    with pytest.warns(DeprecationWarning, match="'self_params'"):
        assert frame.own_params.tolist()[:2] == [0, 15]
    with pytest.warns(DeprecationWarning, match="'ops'"):
        assert frame.sort_values("inclusive_ops")["module"].tolist()[-1] == "__root__"
    with pytest.warns(DeprecationWarning, match="'ops'"):
        assert "inclusive_ops" in frame
    assert "inclusive_ops" not in list(frame.columns) and "ops" in frame.columns
    with warnings.catch_warnings():  # an old name whose column the frame lacks: silent
        warnings.simplefilter("error")
        assert "inclusive_ops_pct" not in frame


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
        # own-only until schema 3: launches is self_launches now
        assert record.metrics["self_launches"] == row["metrics"]["launches"]
        assert record.metrics["self_recompute_ops"] == row["metrics"]["recompute_ops"]
        assert "launches" not in record.metrics
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


def test_a_schema_2_file_round_trips_as_the_current_schema(tmp_path: Path) -> None:
    profile = Profile.from_json(FIXTURE)
    profile.to_json(tmp_path / "again.json")
    document = json.loads((tmp_path / "again.json").read_text())
    assert document["schema_version"] == SCHEMA_VERSION == 5
    assert "inclusive_ops" not in document["records"][0]
    assert "self_ops" in document["records"][0]
    again = Profile.from_json(tmp_path / "again.json")
    pd.testing.assert_frame_equal(again.to_df("module"), profile.to_df("module"))


def test_a_schema_3_file_reads_back_with_the_same_numbers_under_the_new_names() -> None:
    old = json.loads(SCHEMA_3.read_text())
    assert old["schema_version"] == 3
    profile = Profile.from_json(SCHEMA_3)
    records = {r.path: r for r in profile.records}
    renamed = [name for name in OWN_ONLY if name in old["records"][0]["metrics"]]
    # every own-only column of the traffic, communication and efficiency columns is there
    assert sorted(renamed) == sorted(name for name in OWN_ONLY if name != "recompute_flops")
    for row in old["records"]:
        metrics = records[row["path"]].metrics
        for name in renamed:  # the own value, under its self_ name, the same number
            assert metrics[f"self_{name}"] == row["metrics"][name], (row["path"], name)
            assert name not in metrics
        assert metrics["self_moved_bytes"] == row["metrics"]["self_moved_bytes"]
    for path, columns in old["module_metrics"].items():
        assert profile.module_metrics[path]["self_roofline_ms"] == columns["roofline_ms"]
        assert "roofline_ms" not in profile.module_metrics[path]
    modules = profile.to_df("module").set_index("module")
    old_own = {row["path"] or "__root__": row["metrics"] for row in old["records"]}
    # each module is called once: its own value is the file's; the bare name is the subtree
    for name in ("launches", "backward_launches", "collectives", "comm_bus_bytes", "comm_ms",
                 "recompute_ops", "recompute_macs", "recompute_moved_bytes"):
        assert modules[f"self_{name}"].to_dict() == {path: old_own[path][name]
                                                     for path in modules.index}, name
        assert modules.loc["__root__", name] == pytest.approx(
            sum(own[name] for own in old_own.values())), name
    # launches by hand: first, block.0, block.1 and out run one operator each, talks two (the
    # clone of its buffer and x * 2): the root holds 1 + 1 + 1 + 2 + 1 = 6, block 1 + 1 = 2
    assert (modules.loc["__root__", "launches"], modules.loc["block", "launches"]) == (6, 2)
    assert modules.loc["__root__", "self_launches"] == 0
    # the one all-reduce of 2 x 3 floats (24 bytes) on 2 ranks is talks' and the root's
    assert (modules.loc["talks", "self_collectives"], modules.loc["__root__", "collectives"]) \
        == (1, 1)
    assert modules.loc["__root__", "comm_ms"] == pytest.approx(old_own["talks"]["comm_ms"])
    # block.1 (the ReLU) re-ran block.0's addmm in the backward: 2 rows x 3 x 3 = 18 MACs
    assert modules.loc["block", "recompute_macs"] == 18 == old_own["block.1"]["recompute_macs"]
    assert modules.loc["block", "recompute_flops"] == 36
    assert modules.loc["__root__", "roofline_ms"] == pytest.approx(
        sum(own["roofline_ms"] for own in old_own.values()))


def test_a_schema_3_file_round_trips_as_the_current_schema(tmp_path: Path) -> None:
    profile = Profile.from_json(SCHEMA_3)
    profile.to_json(tmp_path / "again.json")
    document = json.loads((tmp_path / "again.json").read_text())
    assert document["schema_version"] == SCHEMA_VERSION
    assert "self_launches" in document["records"][0]["metrics"]
    assert "launches" not in document["records"][0]["metrics"]  # derived, not stored
    again = Profile.from_json(tmp_path / "again.json")
    pd.testing.assert_frame_equal(again.to_df("module"), profile.to_df("module"))


def test_the_0_0_4_dicts_keep_their_names_and_numbers() -> None:
    ops = ModuleProfiler().estimate_ops(_model(), torch.randn(2, 4))
    # 0.0.4's "ops" is the own count, its "inclusive_ops" the module with its children
    assert (ops["2"]["ops"], ops["2"]["inclusive_ops"]) == (0, 24)
    assert (ops["__root__"]["ops"], ops["__root__"]["inclusive_ops"]) == (0, 78)


def _stragglers() -> pd.DataFrame:
    """A table whose columns were renamed, as a user gets it: ``stragglers()`` of three
    ranks of an MLP fed 2, 3 and 7 rows (its median was the column ``median``)."""
    from moduleprofiler.distributed import DistributedProfile

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 6))
    return DistributedProfile(tuple(ModuleProfiler().profile(model, torch.randn(rows, 4))
                                    for rows in (2, 3, 7))).stragglers(4, by="self_macs")


def _one_warning(read: object) -> object:
    """``read()``, which must warn exactly once, naming the new column and the removal."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = read()  # type: ignore[operator]
    messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(messages) == 1, messages
    assert "'median'" in messages[0] and REMOVAL_VERSION in messages[0]
    assert "'self_macs_median'" in messages[0]
    return value


def test_a_renamed_column_answers_the_pandas_accessors_of_old_code() -> None:
    # the old name answered frame["median"], frame[["median"]] and frame.median... but
    # frame.groupby("median") and frame.loc[:, "median"] raised KeyError. Self MACs per rank:
    # Linear(4, 8) 32 * 2, 3, 7 rows = 64, 96, 224 (median 96); Linear(8, 6) 48 * rows =
    # 96, 144, 336 (median 144); the stragglers are rank 2's two Linears (rank 1's equal the
    # median, rank 0's are below it)
    table = _stragglers()
    medians = [144.0, 96.0]
    assert list(table["self_macs_median"]) == medians
    assert list(_one_warning(lambda: table.loc[:, "median"])) == medians  # type: ignore[arg-type]
    assert _one_warning(lambda: table.loc[1, "median"]) == 96.0
    assert list(_one_warning(lambda: table.loc[:, ["module", "median"]].columns)) == [  # type: ignore[attr-defined]
        "module", "self_macs_median"]
    grouped = _one_warning(lambda: table.groupby("median")["self_macs"].sum())
    assert grouped.to_dict() == {96.0: 224.0, 144.0: 336.0}  # type: ignore[attr-defined]
    grouped = _one_warning(lambda: table.groupby(by=["median", "rank"]).size())
    assert grouped.to_dict() == {(96.0, 2): 1, (144.0, 2): 1}  # type: ignore[attr-defined]
    ordered = _one_warning(lambda: table.sort_values("median"))
    assert list(ordered["module"]) == ["0", "2"]  # type: ignore[index]
    ordered = _one_warning(lambda: table.sort_values(by=["median"], ascending=False))
    assert list(ordered["module"]) == ["2", "0"]  # type: ignore[index]
    assert list(_one_warning(lambda: table.set_index("median").index)) == medians  # type: ignore[attr-defined]
    assert _one_warning(lambda: "median" in table) is True
    assert list(_one_warning(lambda: table.get("median"))) == medians  # type: ignore[arg-type]
    # written through the old name, read under the new one
    _one_warning(lambda: table.loc.__setitem__((slice(None), "median"), [1.0, 2.0]))
    assert list(table["self_macs_median"]) == [1.0, 2.0]
    # the columns are the new names only: a column under both names would show one quantity
    # twice; a name neither old nor new is no column, silently
    assert "median" not in list(table.columns) and "nothing" not in table


def test_loc_falls_back_to_pandas_own_where_its_private_indexer_is_gone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the old names' .loc subclasses a private pandas class: without it, .loc is pandas' own
    # (the new names answer; the package still imports and every other accessor still works)
    from moduleprofiler.export import renamed

    monkeypatch.setattr(renamed, "_LocIndexer", None)
    table = _stragglers()
    assert list(table.loc[:, "self_macs_median"]) == [144.0, 96.0]
    assert list(_one_warning(lambda: table["median"])) == [144.0, 96.0]  # type: ignore[arg-type]


@pytest.mark.parametrize("aggregate", ["call", "module", "type"])
def test_a_profiles_frame_refuses_a_name_now_on_another_scale(aggregate: str) -> None:
    # ops_fraction (0-1) is self_ops_pct (0-100): the views refused it naming the new column,
    # where the frame of to_df() said a bare KeyError 'ops_fraction'
    from moduleprofiler import ModuleProfiler
    from moduleprofiler.errors import RescaledColumnError

    frame = ModuleProfiler().profile(nn.Linear(4, 4), torch.randn(2, 4)).to_df(aggregate)
    with pytest.raises(RescaledColumnError, match="'ops_fraction' is now 'self_ops_pct'"):
        frame["ops_fraction"]
    with pytest.raises(RescaledColumnError):
        frame.loc[:, ["module", "ops_fraction"]]


def _frame() -> pd.DataFrame:
    """``to_df("module")`` of :func:`_model` on 2 rows. ops (inclusive_ops until 0.2): the
    Linear(4, 3) 2 * 3 * (2 * 4 - 1 + 1) = 48, the ReLU 2 * 3 = 6, the Linear(3, 2)
    2 * 2 * (2 * 3 - 1 + 1) = 24 and so its Sequential "2" 24, the root 48 + 6 + 24 = 78."""
    frame = _profile().to_df("module")
    assert frame["ops"].tolist() == [78, 48, 6, 24, 24]
    assert frame["type"].tolist() == ["Sequential", "Linear", "ReLU", "Sequential", "Linear"]
    return frame


def _warned_once(read: object, old: str = "inclusive_ops", new: str = "ops") -> object:
    """``read()``, which must warn exactly once, naming the old and the new column and the
    removal."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = read()  # type: ignore[operator]
    messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(messages) == 1, messages
    assert f"'{old}'" in messages[0] and f"use '{new}'" in messages[0]
    assert REMOVAL_VERSION in messages[0]
    return value


def test_a_profiles_frame_answers_an_old_name_in_a_groupby() -> None:
    # per type: Linear 48 + 24 = 72, ReLU 6, Sequential 78 + 24 = 102. The groupby object's
    # list selection and agg raised KeyError on the old name, its one-column selection warned
    # three times
    frame = _frame()
    per_type = {"Linear": 72, "ReLU": 6, "Sequential": 102}
    grouped = _warned_once(lambda: frame.groupby("type")[["inclusive_ops"]].sum())
    assert grouped["ops"].to_dict() == per_type  # type: ignore[index]
    grouped = _warned_once(lambda: frame.groupby("type")["inclusive_ops"].sum())
    assert grouped.to_dict() == per_type  # type: ignore[attr-defined]
    grouped = _warned_once(lambda: frame.groupby("type").inclusive_ops.sum())
    assert grouped.to_dict() == per_type  # type: ignore[attr-defined]
    grouped = _warned_once(lambda: frame.groupby("type").agg({"inclusive_ops": "sum"}))
    assert grouped["ops"].to_dict() == per_type  # type: ignore[index]
    grouped = _warned_once(lambda: frame.groupby("type").agg(total=("inclusive_ops", "sum")))
    assert grouped["total"].to_dict() == per_type  # type: ignore[index]
    grouped = _warned_once(lambda: frame.groupby("type").sum(numeric_only=True)
                           ["inclusive_ops"])
    assert grouped.to_dict() == per_type  # type: ignore[attr-defined]
    pivot = _warned_once(lambda: frame.pivot_table(values="inclusive_ops", index="type",
                                                   aggfunc="sum"))
    assert pivot["ops"].to_dict() == per_type  # type: ignore[index]


def test_a_profiles_frame_answers_an_old_name_as_an_index_level() -> None:
    # level= named a level by the old name: KeyError 'Level inclusive_ops not found'
    frame = _frame().set_index(["type", "ops"])
    sizes = _warned_once(lambda: frame.groupby(level="inclusive_ops").size())
    assert sizes.to_dict() == {6: 1, 24: 2, 48: 1, 78: 1}  # type: ignore[attr-defined]
    flat = _warned_once(lambda: frame.droplevel("inclusive_ops"))
    assert list(flat.index) == ["Sequential", "Linear", "ReLU", "Sequential", "Linear"]  # type: ignore[attr-defined]
    # ops 6, 24, 24, 48, 78; the two 24s by type then (sort_remaining): Linear, Sequential
    ordered = _warned_once(lambda: frame.sort_index(level="inclusive_ops"))
    assert list(ordered["module"]) == ["1", "2.0", "2", "0", "__root__"]  # type: ignore[index]
    back = _warned_once(lambda: frame.reset_index(level="inclusive_ops"))
    assert back["ops"].tolist() == [78, 48, 6, 24, 24]  # type: ignore[index]
    # set_index by the old name, then .loc by its values: the Sequential "2" and its Linear
    rows = _warned_once(lambda: _frame().set_index("inclusive_ops").loc[24, "module"])
    assert list(rows) == ["2", "2.0"]  # type: ignore[call-overload]
    melted = _warned_once(lambda: _frame().melt(id_vars="module", value_vars="inclusive_ops"))
    assert melted["variable"].unique().tolist() == ["ops"]  # type: ignore[index]


def test_a_profiles_frame_writes_a_column_through_an_old_attribute() -> None:
    # frame.own_params = ... made an attribute (pandas' rule for a name that is no column),
    # which then hid the column from frame.own_params; it writes self_params now
    frame = _frame()
    _warned_once(lambda: setattr(frame, "own_params", [1, 2, 3, 4, 5]), "own_params",
                 "self_params")
    assert frame["self_params"].tolist() == [1, 2, 3, 4, 5]
    assert "own_params" not in frame.__dict__ and "own_params" not in frame.columns


def test_a_profiles_frame_lists_and_looks_up_its_columns_by_the_new_names_only() -> None:
    # frame.columns is pandas' own Index of the new names: what is built from it (to_dict()'s
    # keys, list(frame)) holds them only, and columns.get_loc takes the new names (an Index
    # answering old names would list one quantity under two names)
    frame = _frame()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert "ops" in frame.to_dict() and "inclusive_ops" not in frame.to_dict()
        assert frame.to_dict()["ops"] == {0: 78, 1: 48, 2: 6, 3: 24, 4: 24}
        assert frame.columns.get_loc("ops") == list(frame).index("ops")
        with pytest.raises(KeyError, match="inclusive_ops"):
            frame.columns.get_loc("inclusive_ops")
