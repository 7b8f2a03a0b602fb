"""Every registered column in every view, with its numbers checked by hand on a small model:
``Linear(4, 8) -> ReLU -> Linear(8, 2)`` on a 3 x 4 input, forward and backward."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from io import StringIO

import pandas as pd
import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler, Profile
from moduleprofiler.cli import main
from moduleprofiler.export import column_spec, register_column
from moduleprofiler.export.cells import header
from moduleprofiler.export.columns import BUILTIN
from moduleprofiler.export.select import columns_for

NOT_PER_MODULE = {"call", "parent", "call_number", "model", "modules", "unknown_calls"}
"""Facts of one call (index, parent), of a type or of a summary row only."""
ONLY_WHEN_TIED = {"shared_with"}
"""Columns of models that tie a parameter only (tests/export/test_shared_params.py)."""
MODULE_COLUMNS = sorted(BUILTIN - NOT_PER_MODULE - ONLY_WHEN_TIED - {"module", "type"})
QUANTITIES = [name for name in MODULE_COLUMNS
              if column_spec(name).aggregation in ("sum", "inclusive", "max", "all")]
"""The columns a module type has a value of (shapes and text have none)."""


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


@pytest.fixture(scope="module")
def profile() -> Profile:
    torch.manual_seed(0)
    return ModuleProfiler().profile(Mlp(), torch.randn(3, 4), backward=True)


def test_the_numbers_by_hand(profile: Profile) -> None:
    modules = profile.to_df("module").set_index("module")
    # fc1: 3 rows x 4 in x 8 out = 96 MACs -> 192 FLOPs; fc2: 3 x 8 x 2 = 48 MACs -> 96 FLOPs
    assert list(modules["self_flops"]) == [0, 192, 0, 96]
    assert modules.loc["__root__", "flops"] == 2 * (96 + 48)  # 288
    # backward: fc1 weight grad 3 x 4 x 8 = 96 (its input needs no grad); fc2 input grad and
    # weight grad 3 x 8 x 2 each = 96
    assert list(modules["self_backward_macs"]) == [0, 96, 0, 96]
    assert modules.loc["__root__", "backward_macs"] == 192
    assert modules.loc["fc2", "self_backward_flops"] == 192
    assert modules.loc["__root__", "backward_flops"] == 384
    # parameters as float32: fc1 (4 x 8 + 8) x 4 B = 160 B, fc2 (8 x 2 + 2) x 4 B = 72 B
    assert list(modules["param_bytes"]) == [232, 160, 0, 72]
    assert list(modules["buffer_bytes"]) == [0, 0, 0, 0]
    # outputs: fc1 and act 3 x 8 x 4 B = 96 B each (ReLU is not in place), fc2 3 x 2 x 4 = 24
    assert list(modules["output_bytes"]) == [24, 96, 96, 24]
    assert profile.tree(["self_backward_macs"]).df["self_backward_macs"].tolist() == [0, 96, 0, 96]


@pytest.mark.parametrize("name", MODULE_COLUMNS)
def test_in_the_call_and_module_frames(profile: Profile, name: str) -> None:
    calls, modules = profile.to_df("call"), profile.to_df("module")
    assert name in modules and (name in calls or name == "calls")  # calls: one row, one call
    if name != "output_dtypes" and name != "input_dtypes":
        assert modules[name].notna().all(), name  # every module ran: every value is known


@pytest.mark.parametrize("name", QUANTITIES)
def test_in_the_type_frame_and_top(profile: Profile, name: str) -> None:
    types = profile.to_df("type").set_index("type")
    assert name in types
    if column_spec(name).kind != "flag":
        top = profile.top(None, by=name).df
        assert top["type"].tolist()[0] in ("Linear", "Mlp")


def test_compute_headers_state_their_convention(profile: Profile) -> None:
    """ops, MACs and FLOPs (2·MACs) in every view's header, beside their numbers: the root
    does 96 + 48 = 144 MACs, so 288 FLOPs, and 312 ops (fc1 3 x 8 x (2 x 4) = 192, ReLU 24,
    fc2 3 x 2 x (2 x 8) = 96)."""
    tree = profile.tree(["ops", "macs", "flops"])
    text = str(tree).splitlines()  # plain ASCII: the dot is an x
    assert re.split(r"\s{2,}", text[0]) == ["module", "ops", "MACs", "FLOPs (2xMACs)"]
    assert text[2].split()[-3:] == ["312", "144", "288"]
    assert re.split(r"\s{2,}", (tree.to_text(unicode=True) or "").splitlines()[0]) == [
        "module", "ops", "MACs", "FLOPs (2·MACs)"]
    markdown = (tree.to_markdown() or "").splitlines()
    assert markdown[0] == "| module | type | ops | MACs | FLOPs (2·MACs) |"
    assert markdown[2].endswith("| 312 | 144 | 288 |")
    assert "module & type & ops & MACs & FLOPs (2·MACs) \\\\" in (tree.to_latex() or "")
    html = tree.to_html() or ""
    assert ">FLOPs (2·MACs)</th>" in html and ">288</td>" in html
    assert ">FLOPs (2·MACs)</th>" in tree._repr_html_()
    own = profile.table(["self_ops", "self_macs", "self_flops"])
    assert own.df.set_index("module").loc["fc1"].tolist()[1:] == [192, 96, 192]  # 3x4x8 MACs
    assert re.split(r"\s{2,}", _header(str(own))) == [
        "module", "type", "self ops", "self MACs", "self FLOPs (2xMACs)"]


def _header(text: str | None) -> str:
    assert text is not None
    return text.splitlines()[0]


VIEWS: dict[str, Callable[[Profile, str], None]] = {}


def view(function: Callable[[Profile, str], None]) -> Callable[[Profile, str], None]:
    VIEWS[function.__name__] = function
    return function


@view
def tree(profile: Profile, name: str) -> None:
    # plain-text views write the header in ASCII (FLOPs (2xMACs))
    assert header(column_spec(name)) in _header(str(profile.tree([name])))


@view
def table(profile: Profile, name: str) -> None:
    assert header(column_spec(name)) in _header(str(profile.table([name])))


@view
def call_table(profile: Profile, name: str) -> None:
    if name != "calls":  # one row is one call
        assert header(column_spec(name)) in _header(str(profile.table([name],
                                                                      aggregate="call")))


@view
def markdown(profile: Profile, name: str) -> None:
    assert column_spec(name).label in _header(profile.to_markdown(columns=[name]))


@view
def latex(profile: Profile, name: str) -> None:
    text = profile.to_latex(columns=[name]) or ""
    assert column_spec(name).label in text.split("\\midrule")[0]


@view
def html(profile: Profile, name: str) -> None:
    assert f">{column_spec(name).label}<" in (profile.table([name]).to_html() or "")


@view
def notebook(profile: Profile, name: str) -> None:
    assert f">{column_spec(name).label}<" in profile.table([name])._repr_html_()


@view
def csv(profile: Profile, name: str) -> None:
    for aggregate in ("call", "module") if name != "calls" else ("module",):
        frame = pd.read_csv(StringIO(profile.to_csv(aggregate=aggregate) or ""))
        assert name in frame, aggregate
    assert name in _header(profile.table([name]).to_csv())


@view
def json_document(profile: Profile, name: str) -> None:
    again = Profile.from_json(profile.to_json() or "")
    assert again == profile
    left, right = profile.to_df("module")[name], again.to_df("module")[name]
    assert left.astype(str).tolist() == right.astype(str).tolist()


@view
def command_line(profile: Profile, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = _saved(profile)
    assert main([path, "--what", name]) == 0
    # a group of the same name (ops, flops, params) shows the group's columns
    shown = columns_for([name], profile.to_df("module"))[0]
    assert header(column_spec(shown)) in _header(capsys.readouterr().out)


_SAVED: dict[int, str] = {}


def _saved(profile: Profile) -> str:
    import tempfile

    if id(profile) not in _SAVED:
        handle = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
        with handle:
            handle.write(profile.to_json() or "")
        _SAVED[id(profile)] = handle.name
    return _SAVED[id(profile)]


@pytest.mark.parametrize("view_name", list(VIEWS))
@pytest.mark.parametrize("name", MODULE_COLUMNS)
def test_every_column_in_every_view(profile: Profile, name: str, view_name: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    if view_name == "command_line":
        command_line(profile, name, capsys)
    else:
        VIEWS[view_name](profile, name)


def test_unknown_metrics_render_by_their_suffix() -> None:
    """Columns a listener writes without registering them: ``*_bytes`` shows as memory,
    ``*_ms`` as time, and both are summed or totalled by what their name says."""
    from moduleprofiler import Listener

    class Scratch(Listener):
        def exit(self, call, args, kwargs, output):  # type: ignore[no-untyped-def]
            call.values["scratch_bytes"] = 2048
            call.values["wait_ms"] = 0.25

    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    profile = ModuleProfiler().profile(model, torch.randn(2, 4), listeners=[Scratch()])
    text = str(profile.tree())
    # scratch and wait are inclusive by default: the root's own call is 2048 B, 0.25 ms
    assert "2.00 KiB" in text and "250.0 us" in text
    assert "scratch" in _header(text) and "wait" in _header(text)
    assert column_spec("scratch_bytes").aggregation == "inclusive"


def test_registering_a_different_meaning_twice_is_refused() -> None:
    register_column("test_widgets", "count", aggregation="sum")
    register_column("test_widgets", "count", label="widgets", aggregation="sum")  # same meaning
    with pytest.raises(ValueError, match="already registered"):
        register_column("test_widgets", "bytes", aggregation="max")
    with pytest.raises(ValueError, match="_pct"):
        register_column("widgets_pct", "percent")
    with pytest.raises(ValueError, match="aggregation"):
        register_column("test_gadgets", "count", aggregation="mean")  # type: ignore[arg-type]


def test_tree_of_any_column_json_schema(profile: Profile) -> None:
    document = json.loads(profile.to_json() or "")
    assert document["schema_version"] == 5
    assert all(isinstance(record["metrics"], dict) for record in document["records"])
