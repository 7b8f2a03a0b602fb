"""JSON: schema-versioned, round-trips into an equal Profile (real and hand-built)."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler, Profile
from moduleprofiler.export import compare, load_json
from moduleprofiler.export.frame import SCHEMA_VERSION
from moduleprofiler.export.json_io import decode, encode
from tests.export.profiles import hostile, tiny
from tests.fixtures.models import ODD_MODELS


@pytest.mark.parametrize("name", [n for n in ODD_MODELS if n != "raises_inside"])
def test_real_profiles_round_trip(name: str) -> None:
    model, x = ODD_MODELS[name]()
    profile = ModuleProfiler().profile(model, x)
    again = Profile.from_json(profile.to_json() or "")
    assert again == profile
    assert again.records == profile.records and again.unsupported_ops == profile.unsupported_ops
    assert str(again) == str(profile)


def test_round_trip_through_a_file_and_a_stream(tmp_path: Path) -> None:
    path = tmp_path / "tiny.json"
    tiny().save(path)
    assert Profile.from_json(path) == tiny() == load_json(str(path))
    buffer = io.StringIO()
    tiny().to_json(buffer, indent=None)
    assert "\n" not in buffer.getvalue().strip()
    assert Profile.from_json(io.StringIO(buffer.getvalue())) == tiny()


def test_document_header() -> None:
    document = json.loads(hostile().to_json() or "")
    assert document["document"] == "moduleprofiler.profile"
    assert document["schema_version"] == SCHEMA_VERSION
    assert set(document) >= {"moduleprofiler_version", "totals", "records", "modules",
                             "unsupported_ops", "outside_ops"}


def test_shape_trees_keep_their_structure() -> None:
    tree = ((1, 2), [(3,), None], {"a": (4,), "b": [None]}, {1: (5,)}, {"__list__": 1})
    assert decode(json.loads(json.dumps(encode(tree)))) == tree
    assert encode(float("nan")) == {"__float__": "nan"}
    assert math.isinf(decode(encode(float("-inf"))))
    assert decode(encode(object()))[:9] == "<object o"


def test_newer_or_foreign_documents_are_refused() -> None:
    document = json.loads(tiny().to_json() or "")
    document["schema_version"] = SCHEMA_VERSION + 1
    with pytest.raises(ValueError, match="schema_version"):
        Profile.from_json(json.dumps(document))
    with pytest.raises(ValueError, match="not a moduleprofiler profile"):
        Profile.from_json('{"records": []}')
    # JSON that is not an object was an AttributeError ('list' object has no attribute 'get')
    with pytest.raises(ValueError, match="not a moduleprofiler profile"):
        Profile.from_json(io.StringIO("[1, 2]"))
    with pytest.raises(TypeError, match="source must be a path, a text file object or JSON "
                                        "text, got NoneType None"):
        Profile.from_json(None)  # type: ignore[arg-type]
    document["schema_version"] = SCHEMA_VERSION
    del document["records"][0]["module"]
    with pytest.raises(ValueError, match="lacks \\['module'\\]"):
        Profile.from_json(json.dumps(document))


def test_two_runs_compared_after_a_round_trip() -> None:
    model, x = ODD_MODELS["shared_twice"]()
    before = Profile.from_json(ModuleProfiler().profile(model, x).to_json() or "")
    import torch

    after = ModuleProfiler().profile(model, torch.randn(6, 4))  # 3x the batch
    frame = compare(before, after).df.set_index("module")
    assert frame.loc["__root__", "ops_ratio"] == pytest.approx(3.0)
    assert frame.loc["shared", "params_delta"] == 0


def test_backward_results_round_trip() -> None:
    import torch
    from torch import nn

    from moduleprofiler import ModuleProfiler, Profile

    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(inplace=True), nn.Linear(4, 2))
    profile = ModuleProfiler().profile(model, torch.randn(3, 4), backward=True)
    again = Profile.from_json(profile.to_json())
    assert again == profile
    # 3 rows: first Linear weight grad 3*4*4 = 48, last Linear input + weight grads 2*3*4*2 = 48
    assert again.total_backward_macs == 96 and again.backward


def test_version_1_documents_are_still_read() -> None:
    """Version 1 wrote ``"metrics": null`` and had no ``columns`` declaration."""
    from moduleprofiler.export.renamed import SCHEMA_2_NAMES

    old_name = {new: old for old, new in SCHEMA_2_NAMES.items()}  # own ops was "ops"
    document = json.loads(tiny().to_json() or "")
    document["schema_version"] = 1
    del document["columns"], document["groupings"]
    document["records"] = [{old_name.get(key, key): value for key, value in record.items()}
                           for record in document["records"]]
    document["modules"] = [{old_name.get(key, key): value for key, value in module.items()}
                           for module in document["modules"]]
    assert "inclusive_ops" in document["records"][0] and "own_params" in document["modules"][0]
    for record in document["records"]:
        record["metrics"] = None
    again = Profile.from_json(json.dumps(document))
    assert again == tiny() and all(record.metrics == {} for record in again.records)


def test_listener_columns_and_measured_columns_round_trip() -> None:
    from dataclasses import replace

    profile = tiny()
    records = tuple(replace(r, metrics={"wait_ms": 0.5 * r.index, "tag": f"call {r.index}"})
                    for r in profile.records)
    profile = replace(profile, records=records, _by_path={}).with_metrics(
        {"": {"peak_bytes": 4096}, "conv": {"peak_bytes": float("nan")}})
    again = Profile.from_json(profile.to_json() or "")
    assert again.records[3].metrics == {"wait_ms": 1.5, "tag": "call 3"}
    assert again.module_metrics["conv"]["peak_bytes"] != again.module_metrics["conv"][
        "peak_bytes"]  # NaN stays NaN
    assert again.to_df("module").set_index("module").loc["__root__", "peak_bytes"] == 4096


def test_totals_say_which_are_lower_bounds() -> None:
    class Opaque(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

    exact = ModuleProfiler().profile(nn.Linear(3, 2), torch.randn(1, 3)).to_dict()["totals"]
    assert (exact["complete"], exact["lower_bounds"]) == (True, [])
    # operator accounting off: Opaque's ops and macs are unknown, so the ops, the MACs and
    # the FLOPs (2 x MACs) are lower bounds: Linear's 2 x 3 = 6 MACs, 12 FLOPs, 6 x 2 = 12 ops
    partial = ModuleProfiler().profile(nn.Sequential(nn.Linear(3, 2), Opaque()),
                                       torch.randn(1, 3), operators=False).to_dict()["totals"]
    assert (partial["macs"], partial["flops"], partial["ops"]) == (6, 12, 12)
    assert (partial["complete"], partial["lower_bounds"]) == (False, ["ops", "macs", "flops"])
    # each forward total the list names is a total of the document, under the same key
    assert {"ops", "macs", "flops"} <= set(partial)


def test_an_older_document_without_flops_in_its_lower_bounds_reads_back_marked() -> None:
    # the list is written from the records, never read: a schema-4 file that listed only
    # ops and macs reads back, and says flops too when written again (no version bump)
    old = json.loads(SCHEMA_4.read_text())
    assert (old["schema_version"], old["totals"]["lower_bounds"]) == (4, ["ops", "macs"])
    again = Profile.from_json(SCHEMA_4)
    assert again.lower_bounds == ("ops", "macs", "flops")
    totals = json.loads(again.to_json() or "")["totals"]
    assert totals["lower_bounds"] == ["ops", "macs", "flops"]


def test_the_totals_of_a_pass_that_counted_nothing_are_unknown() -> None:
    model, x = nn.Linear(3, 2), torch.randn(1, 3)
    memory = ModuleProfiler().measure_memory(model, x).to_dict()["totals"]
    # a memory pass ran the model without counting: its ops are unknown, not 0
    assert (memory["ops"], memory["macs"], memory["flops"]) == (None, None, None)
    assert memory["params"] == 3 * 2 + 2  # what it knows is still there
    # a counting pass of the same model: 2 outputs of 3 products, 2 sums and a bias add = 12
    counted = ModuleProfiler().profile(model, x).to_dict()["totals"]
    assert (counted["ops"], counted["macs"], counted["flops"]) == (12, 6, 12)


def _linear_relu() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 8), nn.ReLU())


def test_a_prediction_reads_back_as_a_prediction_with_its_whole_pass() -> None:
    from moduleprofiler import Profiler
    from moduleprofiler.prediction.predict import PredictedProfile

    predicted = Profiler().predict(_linear_relu(), torch.randn(2, 8), "H100 SXM")
    again = Profile.from_json(predicted.to_json() or "")
    assert isinstance(again, PredictedProfile)
    # the pass's figures are the prediction's own fields, not any record's: a plain Profile
    # read of the document used to drop them
    assert again.predicted_latency_ms == predicted.predicted_latency_ms is not None
    assert again.predicted_device_ms_low == predicted.predicted_device_ms_low
    assert again.predicted_device_ms_high == predicted.predicted_device_ms_high
    assert again.prediction_notes == predicted.prediction_notes
    assert again.predicted_regime == predicted.predicted_regime
    assert again.records == predicted.records
    assert PredictedProfile.from_json(predicted.to_json() or "") == again


def test_a_memory_report_reads_back_with_its_peaks() -> None:
    from moduleprofiler import Profiler
    from moduleprofiler.memory import MemoryReport

    report = Profiler().measure_memory(_linear_relu(), torch.randn(2, 8), train=True)
    text = report.to_json() or ""
    for again in (Profile.from_json(text), MemoryReport.from_json(text)):
        assert isinstance(again, MemoryReport)
        # nested dataclasses (the passes and the calls that set their peaks) come back whole
        assert again.inference == report.inference and again.training == report.training
        assert again.peak_call == report.peak_call and again.peak_call is not None
        assert again.peak_bytes == report.peak_bytes
        assert again.records == report.records


def test_a_plain_profile_is_not_read_as_a_richer_result() -> None:
    from moduleprofiler.memory import MemoryReport

    text = tiny().to_json() or ""
    assert "result" not in json.loads(text)
    with pytest.raises(ValueError, match="not a MemoryReport"):
        MemoryReport.from_json(text)


def test_a_result_class_this_process_lacks_reads_as_a_profile_with_a_warning() -> None:
    document = json.loads(tiny().to_json() or "")
    document["result"] = "elsewhere.results.CustomProfile"
    document["result_fields"] = {"custom": 1}
    with pytest.warns(UserWarning, match="elsewhere.results.CustomProfile"):
        again = Profile.from_json(json.dumps(document))
    assert type(again) is Profile and again == tiny()


# -- one name per field: a record's and a module's keys are the frames' column names ----------
SCHEMA_4 = Path(__file__).resolve().parents[1] / "fixtures" / "profile_schema4.json"
"""``tiny()`` as 0.2.0.dev0 wrote it (schema version 4), whose records and modules named the
call's position, module path and class name ``index``, ``path`` and ``type_name``."""


def test_records_and_modules_are_keyed_as_the_frames_name_their_columns() -> None:
    # the frames call them call, module and type; the JSON called the same three fields
    # index, path and type_name: one quantity under two names
    profile = tiny()
    document = json.loads(profile.to_json() or "")
    assert document["schema_version"] == SCHEMA_VERSION == 5
    calls = profile.to_df("call", columns="all")
    records = document["records"]
    assert [list(row)[:6] for row in records[:1]] == [
        ["call", "parent", "depth", "module", "type", "call_number"]]
    assert not {"index", "path", "type_name"} & {key for row in records for key in row}
    assert [row["call"] for row in records] == calls["call"].tolist() == list(range(8))
    assert [row["type"] for row in records] == calls["type"].tolist()
    # the same paths; the root is named_modules()'s "" in the JSON and __root__ in frames
    assert [row["module"] or "__root__" for row in records] == calls["module"].tolist()
    modules = document["modules"]
    assert not {"path", "type_name"} & {key for row in modules for key in row}
    frame = profile.to_df("module", columns="all")
    assert [row["module"] or "__root__" for row in modules] == frame["module"].tolist()
    assert [row["type"] for row in modules] == frame["type"].tolist()
    assert Profile.from_json(json.dumps(document)) == profile


def test_a_schema_4_document_reads_back_as_the_same_profile() -> None:
    old = json.loads(SCHEMA_4.read_text())
    assert old["schema_version"] == 4 and old["records"][1]["path"] == "conv"
    again = Profile.from_json(SCHEMA_4)
    assert again == tiny()
    for aggregate in ("call", "module", "type"):
        pd.testing.assert_frame_equal(again.to_df(aggregate), tiny().to_df(aggregate))
    # the old keys' values, field by field: block.act's second call is record 6
    record = again.records[6]
    assert (record.index, record.path, record.type_name, record.call_number) == (
        old["records"][6]["index"], old["records"][6]["path"], old["records"][6]["type_name"],
        1) == (6, "block.act", "ReLU", 1)
    # written again, it is the current schema and reads back equal
    document = json.loads(again.to_json() or "")
    assert document["schema_version"] == SCHEMA_VERSION
    assert document["records"][6]["module"] == "block.act"
    assert Profile.from_json(json.dumps(document)) == tiny()


def test_to_dict_answers_the_old_keys_with_a_warning() -> None:
    data = tiny().to_dict()
    record, module = data["records"][6], data["modules"][4]
    assert (record["call"], record["module"], record["type"]) == (6, "block.act", "ReLU")
    assert list(record)[:5] == ["call", "parent", "depth", "module", "type"]
    for row, old, new, value in ((record, "index", "call", 6),
                                 (record, "path", "module", "block.act"),
                                 (record, "type_name", "type", "ReLU"),
                                 (module, "path", "module", "block.act"),
                                 (module, "type_name", "type", "ReLU")):
        with pytest.warns(DeprecationWarning) as caught:
            assert row[old] == value and row.get(old) == value
        message = str(caught[0].message)
        assert f"'{old}'" in message and f"use '{new}'" in message and "0.3.0" in message
        assert old not in list(row)
