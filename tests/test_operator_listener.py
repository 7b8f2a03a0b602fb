"""OperatorListener: every aten operator of the forward, tallied per module call."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler, OperatorListener
from moduleprofiler.operators.registry import get_default_operator_map


class Functional(nn.Module):
    """Plain functional ops: no module formula covers anything."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ self.w) + 1


def _operators(model: nn.Module, x: torch.Tensor, listener: OperatorListener | None = None
               ) -> list[dict[str, dict[str, int | None]]]:
    profile = ModuleProfiler().profile(model, x, listeners=[listener or OperatorListener()])
    return [record.metrics["operators"] for record in profile.records]


def test_functional_operators_per_call() -> None:
    # (2, 4) @ (4, 3): 6 outputs x (4 multiplies + 3 adds) = 42 ops, 6 x 4 = 24 MACs;
    # bytes: reads 8 + 12 floats, writes 6: (8 + 12 + 6) x 4 = 104
    # relu and + 1: 6 ops each; each reads 6 floats and writes 6: 48 bytes
    assert _operators(Functional(), torch.randn(2, 4)) == [{
        "aten.mm": {"calls": 1, "ops": 42, "macs": 24, "bytes": 104},
        "aten.relu": {"calls": 1, "ops": 6, "macs": 0, "bytes": 48},
        "aten.add": {"calls": 1, "ops": 6, "macs": 0, "bytes": 48},
    }]


def test_a_module_formula_does_not_hide_its_operators() -> None:
    # nn.Linear has a module formula, so the counting observes nothing inside it; the listener
    # does: addmm of (2, 4) x (4, 3) + bias: 6 x 7 + 6 = 48 ops (the formula's 48), 24 MACs;
    # reads bias 3 + x 8 + weight 12 floats, writes 6: 29 x 4 = 116 bytes; t is a view
    assert _operators(nn.Linear(4, 3), torch.randn(2, 4)) == [{
        "aten.t": {"calls": 1, "ops": 0, "macs": 0, "bytes": 0},
        "aten.addmm": {"calls": 1, "ops": 48, "macs": 24, "bytes": 116},
    }]


def test_the_counting_is_unchanged_by_the_listener() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), Functional())
    x = torch.randn(2, 4)
    plain = ModuleProfiler().profile(model, x)
    observed = ModuleProfiler().profile(model, x, listeners=[OperatorListener()])
    assert [(r.self_ops, r.self_macs, r.ops_source) for r in observed.records] == [
        (r.self_ops, r.self_macs, r.ops_source) for r in plain.records]


def test_an_operator_without_a_formula_is_unknown_not_zero() -> None:
    table = get_default_operator_map()
    del table[torch.ops.aten.mm]
    operators = _operators(Functional(), torch.randn(2, 4), OperatorListener(table))[0]
    # its calls and bytes are still known; its ops and MACs are not
    assert operators["aten.mm"] == {"calls": 1, "ops": None, "macs": None, "bytes": 104}
    assert operators["aten.relu"]["ops"] == 6


def test_by_default_the_profilers_own_operator_formulas_count() -> None:
    # the pass hands its operator_fn_map to every listener: a formula the profiler was given
    # prices the listener's rows too
    profiler = ModuleProfiler()
    profiler.operator_fn_map[torch.ops.aten.mm] = lambda args, kwargs, out: (1000, 10)
    profile = profiler.profile(Functional(), torch.randn(2, 4), listeners=[OperatorListener()])
    assert profile.records[0].metrics["operators"]["aten.mm"] == {
        "calls": 1, "ops": 1000, "macs": 10, "bytes": 104}


def test_a_bad_operator_map_is_named() -> None:
    with pytest.raises(TypeError, match="operators must be a mapping"):
        OperatorListener("aten.mm")  # type: ignore[arg-type]


def test_the_model_is_left_as_it_was() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)).train()
    state = {name: value.clone() for name, value in model.state_dict().items()}
    ModuleProfiler().profile(model, torch.randn(3, 4), listeners=[OperatorListener()])
    assert model.training and all(
        torch.equal(value, state[name]) for name, value in model.state_dict().items())
    assert not any(module._forward_hooks or module._forward_pre_hooks
                   for module in model.modules())
