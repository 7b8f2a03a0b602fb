"""A listener of the test's own writes a column in the same pass as the counting; once
registered, the tree, the DataFrames (per call, module and type), the HTML report, every file
format and a JSON round trip show it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch import nn

from moduleprofiler import Call, Listener, ModuleProfiler, Profile
from moduleprofiler.export import column_spec, inclusive_of, register_column
from moduleprofiler.export import columns as registry


class OutputElements(Listener):
    """``my_count``: elements of each call's output tensor."""

    def exit(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any],
             output: Any) -> None:
        if isinstance(output, torch.Tensor):
            call.values["my_count"] = output.numel()


@pytest.fixture
def my_count() -> Iterator[None]:
    """``my_count`` (own: summed over calls) and ``inclusive_my_count`` (each call with the
    calls inside it), registered for one test."""
    register_column("my_count", "count", label="my count", unit="elements", aggregation="sum")
    register_column("inclusive_my_count", "count", label="my count incl.",
                    aggregation="inclusive", derive=inclusive_of("my_count"))
    yield
    for name in ("my_count", "inclusive_my_count"):
        registry._REGISTRY.pop(name, None)


def profiled() -> Profile:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    return ModuleProfiler().profile(model, torch.randn(3, 4), listeners=[OutputElements()])


@pytest.mark.usefixtures("my_count")
def test_the_listener_column_in_the_frames() -> None:
    profile = profiled()
    assert [r.metrics["my_count"] for r in profile.records] == [6, 24, 24, 6]  # 3x2, 3x8, ...
    calls = profile.to_df("call")
    assert calls["my_count"].tolist() == [6, 24, 24, 6]
    # the root's call contains the three others: 6 + 24 + 24 + 6 = 60
    assert calls["inclusive_my_count"].tolist() == [60, 24, 24, 6]
    modules = profile.to_df("module").set_index("module")
    assert modules.loc["__root__", "my_count"] == 6
    assert modules.loc["__root__", "inclusive_my_count"] == 60
    types = profile.to_df("type").set_index("type")
    assert types.loc["Linear", "my_count"] == 24 + 6  # two Linear modules, summed


class Huge(Listener):
    """``my_count``: 2**62 for each call (each fits in 64 bits, a sum of four does not)."""

    def exit(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any],
             output: Any) -> None:
        call.values["my_count"] = 2**62


@pytest.mark.usefixtures("my_count")
def test_an_inclusive_column_past_64_bits_is_exact() -> None:
    # the root's call contains the three others: 4 * 2**62 = 2**64, past 2**63 - 1; each
    # call's 2**62 fits an Int64 column, whose arithmetic wrapped the root's sum round to 0
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    profile = ModuleProfiler().profile(model, torch.randn(3, 4), listeners=[Huge()])
    assert profile.to_df("call")["inclusive_my_count"].tolist() == [2**64] + [2**62] * 3


@pytest.mark.usefixtures("my_count")
def test_the_listener_column_in_the_tree_and_report() -> None:
    profile = profiled()
    text = str(profile.tree())  # a registered quantity is shown without being asked for
    assert "my count" in text.splitlines()[0] and "my count incl." in text.splitlines()[0]
    root = text.splitlines()[2].split()
    assert root[:2] == ["__root__", "(Sequential)"] and root[-2:] == ["6", "60"]
    page = profile.to_html() or ""
    assert ">my count<" in page  # a column of the module table
    assert "my count 24" in page  # the stats of a tree node
    assert 'id="chart-inclusive-my-count"' in page  # and a chart of the inclusive one
    assert "my count" in (profile.to_markdown() or "")
    assert "my count" in (profile.to_latex() or "")
    assert "my_count" in (profile.to_csv() or "").splitlines()[0]


@pytest.mark.usefixtures("my_count")
def test_the_listener_column_survives_json() -> None:
    profile = profiled()
    text = profile.to_json() or ""
    document = json.loads(text)
    assert document["columns"]["my_count"]["kind"] == "count"
    registry._REGISTRY.pop("my_count")  # another process, where nobody registered it
    again = Profile.from_json(text)
    assert again == profile
    assert column_spec("my_count").label == "my count"  # declared by the document
    assert again.to_df("module")["my_count"].tolist() == [6, 24, 24, 6]


@pytest.mark.usefixtures("my_count")
def test_the_code_that_registers_a_column_wins_over_a_document_read_before() -> None:
    text = profiled().to_json() or ""
    registry._REGISTRY.pop("my_count")  # another process, where nobody registered it yet
    Profile.from_json(text)  # declares my_count as the file says: count, summed
    # the listener's module, imported after the file was read, now keeps each call's largest
    # value: ValueError "column 'my_count' is already registered as count/sum" at its import
    spec = register_column("my_count", "count", label="my count", unit="elements",
                           aggregation="max")
    assert column_spec("my_count") is spec
    # 3x2, 3x8, 3x8, 3x2 outputs: the largest is 24, where their sum was 30 (two Linears)
    assert profiled().to_df("type").set_index("type").loc["Linear", "my_count"] == 24
    with pytest.raises(ValueError, match="already registered as count/max"):
        register_column("my_count", "count", aggregation="sum")  # code against code
