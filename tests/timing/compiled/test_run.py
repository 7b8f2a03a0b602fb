"""time_compiled on a CPU: a small compiled model timed kernel by kernel, each kernel booked
to its module (CPU kernel ranges stand in for the GPU's kernel records)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from moduleprofiler.compiled import time_compiled
from tests.timing.helpers import Breaks, residual_model

# time_compiled is deprecated (test_time_compiled_is_deprecated_naming_its_removal) and works
pytestmark = pytest.mark.filterwarnings("ignore:moduleprofiler.compiled.time_compiled")


@pytest.fixture(scope="module")
def timed():
    model = residual_model()
    before = dict(vars(model[0]))
    compiled = torch.compile(model)
    result = time_compiled(compiled, torch.randn(8, 16), iterations=3, warmup=1)
    return model, before, result


def test_every_kernel_is_booked_to_its_module(timed):
    model, _, result = timed
    paths = {path for path, _ in model.named_modules()}
    assert result.graphs == 1
    assert result.coverage == pytest.approx(1.0, abs=0.01)
    assert set(result.own_ms) <= paths
    # the two matrix products are Inductor's extern kernels, each its Linear's alone
    products = [row for row in result.kernels if row.name == "extern_kernels.addmm"]
    assert [row.module for row in products] == ["0.fc", "2.fc"]
    assert all(row.fused_across == () and row.launches == 1 for row in products)
    # on a CPU a kernel's device kernels are its host ranges: each product ran one addmm
    assert all(row.device_kernels == ("aten::addmm",) for row in products)
    for row in result.kernels:
        assert row.time_ms > 0
        # a fused kernel is booked to the deepest module that holds all it fuses
        for module in row.fused_across:
            assert module == row.module or module.startswith(row.module)


def test_a_kernel_fusing_two_top_level_modules_is_the_roots(timed):
    _, _, result = timed
    # Inductor fuses the first block's ReLU and residual add with the LayerNorm after it:
    # their deepest common ancestor is the root
    crossing = [row for row in result.fused_across() if {"0.act", "1"} <= set(row.fused_across)]
    assert len(crossing) == 1 and crossing[0].module == ""
    assert result.own_ms[""] == pytest.approx(crossing[0].time_ms)
    rows = dict((path, (own, inclusive)) for path, own, inclusive in result.table())
    # the root's inclusive time is every module's own time
    assert rows["__root__"][1] == pytest.approx(sum(result.own_ms.values()))


def test_the_model_is_left_as_it_was(timed):
    model, before, _ = timed
    assert dict(vars(model[0])) == before
    assert model.training and not model[0]._forward_hooks


def test_a_model_compiled_in_place_is_timed_compiled():
    model = residual_model()
    model.compile()
    own_compiled_call = model._compiled_call_impl
    result = time_compiled(model, torch.randn(8, 16), iterations=2, warmup=1)
    assert result.coverage == pytest.approx(1.0, abs=0.01)
    assert {row.module for row in result.kernels if row.name == "extern_kernels.addmm"} == {
        "0.fc", "2.fc"}
    assert model._compiled_call_impl is own_compiled_call


def test_iterations_must_be_positive():
    with pytest.raises(ValueError, match="iterations must be at least 1"):
        time_compiled(residual_model(), torch.randn(8, 16), iterations=0)


def test_graph_breaks_are_reported_by_module():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16), Breaks())
    result = time_compiled(torch.compile(model), torch.randn(8, 16), iterations=2, warmup=1)
    # the graphs after the break are traced from Breaks' own frame: their paths still read
    # from the root (a parameter each graph reads names the submodule)
    assert [(first, last) for _, first, last in result.regions][-2:] == [
        ("1.a", "1.a"), ("1.b", "1")]
    assert any("print" in reason for reason in result.break_reasons)
    assert {"1.a", "1.b"} <= set(result.own_ms)
    assert result.coverage == pytest.approx(1.0, abs=0.01)


def test_time_compiled_is_deprecated_naming_its_removal():
    with pytest.warns(DeprecationWarning, match=r"removed in moduleprofiler 0\.3\.0.*"
                      r"time_modules\(torch\.compile"):
        time_compiled(torch.compile(residual_model()), torch.randn(8, 16), iterations=1, warmup=1)
