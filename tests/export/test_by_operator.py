"""Profile.by_operator: one row per aten operator, for the whole model or under a module."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from moduleprofiler import ModuleProfiler, OperatorListener, Profile
from moduleprofiler.operators.registry import get_default_operator_map
from tests.test_operator_listener import Functional


class Double(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class Inner(nn.Module):
    """Calls a module it shares with its parent: the call is inside ``inner`` at run time."""

    def __init__(self, shared: nn.Module) -> None:
        super().__init__()
        self.f = Functional()
        self.shared = [shared]  # not registered: its path stays the parent's "twice"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.shared[0](self.f(x))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.twice = Double()
        self.inner = Inner(self.twice)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.twice(self.inner(x)) - 1


def _profile(model: nn.Module, x: torch.Tensor, **kwargs: object) -> Profile:
    return ModuleProfiler().profile(model, x, listeners=[OperatorListener(**kwargs)])


def _rows(profile: Profile, module: str | None = None) -> dict[str, tuple[object, ...]]:
    df = profile.by_operator(module).df
    return {row.operator: (row.calls, row.ops, row.macs, row.flops, row.operator_bytes)
            for row in df.itertuples()}


def test_whole_model_rows_and_totals() -> None:
    profile = _profile(Net(), torch.randn(2, 4))
    # mm: 42 ops, 24 MACs, 104 bytes; relu, + 1: 6 ops, 48 bytes each; x 2 twice and - 1:
    # 6 ops and 48 bytes each (mul twice: 12 ops, 96 bytes; add 6 + sub 6)
    assert _rows(profile) == {
        "aten.mm": (1, 42, 24, 48, 104),
        "aten.mul": (2, 12, 0, 0, 96),
        "aten.add": (1, 6, 0, 0, 48),
        "aten.relu": (1, 6, 0, 0, 48),
        "aten.sub": (1, 6, 0, 0, 48),
    }
    # no module formula: the table's ops are the profile's, 42 + 12 + 6 + 6 + 6 = 72
    view = profile.by_operator()
    assert profile.total_ops == 72 and view.totals["ops"] == 72
    assert view.totals["flops"] == 48 and view.totals["operator_bytes"] == 344
    # shares of the table: mm 42 / 72 = 58.3 %, bytes 104 / 344 = 30.2 %
    first = view.df.iloc[0]
    assert first["operator"] == "aten.mm"
    assert first["ops_pct"] == pytest.approx(100 * 42 / 72)
    assert first["operator_bytes_pct"] == pytest.approx(100 * 104 / 344)
    assert not any(column.endswith("_ms") for column in view.df.columns)  # no time: docs say why


def test_under_a_module_counts_its_runtime_subtree() -> None:
    profile = _profile(Net(), torch.randn(2, 4))
    # inner: its Functional (mm, relu, + 1) and the shared Double called from inside it
    assert _rows(profile, "inner") == {
        "aten.mm": (1, 42, 24, 48, 104),
        "aten.add": (1, 6, 0, 0, 48),
        "aten.mul": (1, 6, 0, 0, 48),
        "aten.relu": (1, 6, 0, 0, 48),
    }
    # twice: both its calls (one inside inner); the root is everything
    assert _rows(profile, "twice") == {"aten.mul": (2, 12, 0, 0, 96)}
    assert _rows(profile, "__root__") == _rows(profile)
    assert profile.by_operator("inner").title == "Operators of inner and the calls inside it"


def test_resnet18_conv_rows_match_the_conv_modules_and_flop_counter() -> None:
    torchvision = pytest.importorskip("torchvision")
    model = torchvision.models.resnet18().eval()
    x = torch.randn(1, 3, 64, 64)
    profile = _profile(model, x)
    rows = profile.by_operator().df.set_index("operator")
    conv_macs = sum(r.macs for r in profile.records if r.type_name == "Conv2d")
    assert rows.loc["aten.convolution", "macs"] == conv_macs
    assert rows.loc["aten.convolution", "calls"] == 20  # 20 Conv2d modules, one call each
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(x)
    oracle = {str(op): flops for op, flops in counter.get_flop_counts()["Global"].items()}
    # FlopCounterMode's FLOPs = 2 x MACs, bias ignored
    assert oracle["aten.convolution"] == rows.loc["aten.convolution", "flops"]
    assert oracle["aten.addmm"] == rows.loc["aten.addmm", "flops"] == 2 * 512 * 1000
    # resnet18's module formulas and operator formulas agree: one total
    assert profile.by_operator().totals["ops"] == profile.total_ops


def test_a_module_formula_that_differs_is_said() -> None:
    # nn.CosineSimilarity's formula: 6D + 3 per row; its operators 8D + 1 (docs/operators.md)
    profile = _profile(nn.CosineSimilarity(dim=1), (torch.randn(2, 5), torch.randn(2, 5)))
    view = profile.by_operator()
    # formula: 2 rows x (6 x 5 + 3) = 66; operators: 2 x (8 x 5 + 1) = 82
    assert profile.total_ops == 66 and view.totals["ops"] == 82
    assert any("module rows count 66 ops" in note and "operators 82" in note
               for note in view.notes)


def test_unknown_operators_are_na_and_listed() -> None:
    table = get_default_operator_map()
    del table[torch.ops.aten.mm]
    profile = _profile(Functional(), torch.randn(2, 4), operators=table)
    view = profile.by_operator()
    row = view.df.set_index("operator").loc["aten.mm"]
    assert pd.isna(row["ops"]) and pd.isna(row["macs"]) and pd.isna(row["flops"])
    assert row["operator_bytes"] == 104
    assert view.totals["ops"] == 12  # relu 6 + add 6: a lower bound
    assert any("aten.mm" in note and "lower bounds" in note for note in view.notes)
    assert view.df["operator"].iloc[-1] == "aten.mm"  # unknown rows last


def test_work_outside_every_call_is_said() -> None:
    model = Functional()
    profile = ModuleProfiler().profile(model, torch.randn(2, 4),
                                       pred_fn=lambda x: model(x).sum(),
                                       listeners=[OperatorListener()])
    # sum of 6 elements: 5 adds, outside every module call
    assert profile.outside_ops == 5
    notes = profile.by_operator().notes
    assert any("5 ops ran outside every module call" in note for note in notes)
    assert "aten.sum" not in _rows(profile)


def test_round_trips_through_json() -> None:
    profile = _profile(Net(), torch.randn(2, 4))
    again = Profile.from_json(profile.to_json() or "")
    pd.testing.assert_frame_equal(again.by_operator().df, profile.by_operator().df)


def test_module_frames_leave_the_tallies_out() -> None:
    profile = _profile(Net(), torch.randn(2, 4))
    assert "operators" in profile.to_df().columns
    assert "operators" not in profile.to_df("module").columns
    assert "operators" not in profile.to_df("type").columns


def test_bad_arguments_are_named() -> None:
    plain = ModuleProfiler().profile(Functional(), torch.randn(2, 4))
    with pytest.raises(ValueError, match=r"listeners=\[moduleprofiler.OperatorListener\(\)\]"):
        plain.by_operator()
    profile = _profile(Net(), torch.randn(2, 4))
    with pytest.raises(ValueError, match="module='nope' is not a module"):
        profile.by_operator("nope")
    with pytest.raises(TypeError, match="module must be a module path"):
        profile.by_operator(3)  # type: ignore[arg-type]


def test_a_pass_that_ran_no_operator_says_so() -> None:
    # nn.Identity runs no aten operator: the table said "(no modules match the filters)",
    # of a table of operators with no filter given
    profile = ModuleProfiler().profile(nn.Identity(), torch.ones(2, 3),
                                       listeners=[OperatorListener()])
    text = str(profile.by_operator())
    assert "(no aten operator ran)" in text and "modules" not in text
    assert "(no modules match the filters)" in str(profile.tree(include="nothing*"))
