"""A memory pass's peak call in ``to_dict()`` and the JSON names the call's position, module
and type as the frames do (``call``, ``module``, ``type``), and a report written before
(schema version 4: ``index``, ``path``, ``type_name``) reads back the same."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch import nn

from moduleprofiler import Profile, Profiler
from moduleprofiler.memory import MemoryReport, PeakCall

SCHEMA_4 = Path(__file__).resolve().parents[1] / "fixtures" / "memory_schema4.json"
"""``Profiler().measure_memory(Net(), torch.randn(2, 4), train=True)`` on the CPU (seed 0), as
0.2.0.dev0 wrote it (schema version 4)."""


class Net(nn.Module):
    """fc1 (Linear(4, 3)), act (ReLU, called twice), fc2 (Linear(3, 2))."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 3)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc2(self.act(self.fc1(x))))


def _report() -> MemoryReport:
    torch.manual_seed(0)
    return Profiler().measure_memory(Net(), torch.randn(2, 4), train=True)


def test_the_inference_peak_is_at_the_first_relu() -> None:
    # baseline: 23 params * 4 bytes = 92, the input 2 * 4 * 4 = 32: 124; the peak adds fc1's
    # output (2 * 3 * 4 = 24) and act's (24): 172, while act (call 2, its first) runs
    report = _report()
    assert (report.inference.baseline_bytes, report.inference.peak_bytes) == (124, 172)
    assert report.inference.peak_call == PeakCall("act", 0, 2, "forward", type_name="ReLU",
                                                  calls=2)


def test_the_peak_call_is_keyed_as_the_frames_name_its_fields() -> None:
    # to_dict() and the JSON named them path, index and type_name, the frames module, call and
    # type: one field under two names
    report = _report()
    frame = report.to_df("call")
    expected = {"module": "act", "call_number": 0, "call": 2, "phase": "forward",
                "accumulating": False, "type": "ReLU", "calls": 2}
    data = report.to_dict()
    document = json.loads(report.to_json() or "")
    for peak in (data["inference"]["peak_call"],
                 data["result_fields"]["inference"]["peak_call"],
                 document["result_fields"]["inference"]["peak_call"]):
        assert dict(peak) == expected
    row = frame.loc[frame["call"] == expected["call"]].iloc[0]
    assert (row["module"], row["type"], row["call_number"]) == ("act", "ReLU", 0)
    # fc1's backward (call 1, its only one) set the training peak
    assert dict(document["result_fields"]["training"]["peak_call"]) == {
        "module": "fc1", "call_number": 0, "call": 1, "phase": "backward",
        "accumulating": False, "type": "Linear", "calls": 1}
    again = Profile.from_json(report.to_json() or "")
    assert isinstance(again, MemoryReport) and again == report
    assert again.inference.peak_call == report.inference.peak_call


def test_the_peak_calls_dict_answers_the_old_keys_with_a_warning() -> None:
    peak = _report().to_dict()["inference"]["peak_call"]
    for old, new, value in (("path", "module", "act"), ("index", "call", 2),
                            ("type_name", "type", "ReLU")):
        with pytest.warns(DeprecationWarning) as caught:
            assert peak[old] == value and peak.get(old) == value
        message = str(caught[0].message)
        assert f"'{old}'" in message and f"use '{new}'" in message and "0.3.0" in message
        assert old not in list(peak)


def test_a_schema_4_report_reads_back_the_same() -> None:
    old = json.loads(SCHEMA_4.read_text())
    assert old["schema_version"] == 4
    assert old["result_fields"]["inference"]["peak_call"]["path"] == "act"
    again = Profile.from_json(SCHEMA_4)
    report = _report()
    assert isinstance(again, MemoryReport) and again == report
    assert again.inference.peak_call == PeakCall("act", 0, 2, "forward", type_name="ReLU",
                                                 calls=2)
    assert again.training is not None and again.training.peak_call == PeakCall(
        "fc1", 0, 1, "backward", type_name="Linear", calls=1)
    for aggregate in ("call", "module"):
        pd.testing.assert_frame_equal(again.to_df(aggregate), report.to_df(aggregate))
    assert str(again.inference.peak_call) == "act (ReLU), call 1 of 2, forward"
