"""The counting listener: what a formula's ``None`` ("unknown") means for a call.

A formula covers its module's calls (their operators are not counted), so a ``None`` it returns
is unknown, never 0; a formula whose ``covers(module)`` test says False has the module's
operators observed, and they count instead of its ``None``.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler
from moduleprofiler.errors import FormulaError
from tests.fixtures.models import Triple


class Odd(nn.Module):
    """``x * 2 + 1``: one multiply and one add per element."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 + 1


def declines(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> None:
    return None


def test_unregistered_module_is_counted_by_its_operators() -> None:
    # the independent count: 3 * 4 = 12 elements, a mul and an add each: 24
    profile = ModuleProfiler().profile(Odd(), torch.randn(3, 4))
    assert (profile.total_ops, profile.records[0].ops_source) == (24, "operator")


def test_a_formula_returning_none_is_unknown_not_zero() -> None:
    profiler = ModuleProfiler()
    profiler.ops_fn_map[Odd] = declines
    profile = profiler.profile(nn.Sequential(nn.Linear(4, 4), Odd()), torch.randn(3, 4))
    odd = profile.calls("1")[0]
    # its operators were not counted (a formula covers the module): unknown, never 0
    assert (odd.self_ops, odd.self_macs, odd.ops_source) == (None, None, "unknown")
    assert profile.unsupported == ("1",)
    assert not profile.ops_complete and not profile.complete
    # the Linear alone, a lower bound: 3 rows * 4 outputs * (2 * 4 - 1 + 1) = 96
    assert profile.total_ops == 96
    assert any("'declines' returned None" in note for note in profile.formula_fallbacks)


def test_a_formula_that_does_not_cover_an_instance_has_its_operators_counted() -> None:
    def odd_ops(module: Odd, inputs: tuple[Any, ...], output: Any) -> int | None:
        return None if module.training else 2 * inputs[0].numel()

    odd_ops.covers = lambda module: not module.training  # type: ignore[attr-defined]
    profiler = ModuleProfiler()
    profiler.ops_fn_map[Odd] = odd_ops
    x = torch.randn(3, 4)
    # eval: the formula prices it, 2 * 12 = 24
    in_eval = profiler.profile(Odd(), x).records[0]
    assert (in_eval.self_ops, in_eval.ops_source) == (24, "formula")
    # training: the test says no, so its operators are observed and count: 12 muls + 12 adds
    in_training = profiler.profile(Odd(), x, eval=False)
    assert (in_training.records[0].self_ops, in_training.records[0].ops_source) == (24, "operator")
    assert in_training.complete
    # without operator counting the same call is unknown
    alone = profiler.profile(Odd(), x, eval=False, operators=False)
    assert alone.records[0].self_ops is None and not alone.complete


def test_a_covers_test_that_raises_names_the_module() -> None:
    def odd_ops(module: Odd, inputs: tuple[Any, ...], output: Any) -> int:
        return 2 * inputs[0].numel()

    odd_ops.covers = lambda module: module.missing  # type: ignore[attr-defined]
    profiler = ModuleProfiler()
    profiler.ops_fn_map[Odd] = odd_ops
    with pytest.raises(FormulaError, match=r"covers test of formula 'odd_ops' for module "
                                           r"'1' \(Odd\) raised AttributeError"):
        profiler.profile(nn.Sequential(nn.Identity(), Odd()), torch.randn(3, 4))


def test_a_call_with_nothing_known_has_unknown_inclusive_ops_not_zero() -> None:
    # operators off: Odd has no formula, so its own ops are unknown and so is everything
    # inside it (it has no children); its parent's total is a lower bound, the Linear alone:
    # 3 rows * 4 outputs * (2 * 4 - 1 + 1) = 96 ops, 3 * 4 * 4 = 48 MACs
    profile = ModuleProfiler().profile(nn.Sequential(nn.Linear(4, 4), Odd()), torch.randn(3, 4),
                                       operators=False)
    root, linear, odd = profile.records
    assert (odd.self_ops, odd.ops, odd.macs, odd.complete) == (None, None, None, False)
    assert (linear.ops, linear.macs, linear.complete) == (96, 48, True)
    assert (root.ops, root.macs, root.complete) == (96, 48, False)
    frame = profile.to_df()
    assert frame.loc[frame["module"] == "1", "ops"].isna().all()


def test_a_profile_whose_every_call_is_unknown_still_says_it_counted() -> None:
    # a counting pass that knows nothing is a lower bound of 0, not a timing pass
    profile = ModuleProfiler().profile(Odd(), torch.randn(3, 4), operators=False)
    assert profile.counted and profile.records[0].ops is None
    notes = str(profile.tree())
    assert "ops unknown or partial in 1 module(s)" in notes
    assert "counts no ops" not in notes


def doubles_input(module: nn.Module, args: tuple[Any, ...]) -> tuple[torch.Tensor]:
    return (args[0] * 2,)


def triples_output(module: nn.Module, args: tuple[Any, ...], output: Any) -> torch.Tensor:
    return output * 3


class Wrapper(nn.Module):
    """A model of its own around a Linear (its forward is not a formula container's)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)


@pytest.mark.parametrize("root", ["sequential", "wrapper"])
def test_work_in_a_module_s_own_forward_hooks_is_its_call_s(root: str) -> None:
    # a weight_norm or pruning pre-hook recomputes the weight before each call: the work of a
    # module's own hooks is part of its call (they run inside nn.Module.__call__), never lost.
    # Linear(4, 4) on 2 rows: 2 * 4 * (2 * 4 - 1) + 2 * 4 (bias) = 64; the pre-hook's multiply
    # of the 2 x 4 input, 8; the post-hook's of the 2 x 4 output, 8: 80
    model = nn.Sequential(nn.Linear(4, 4)) if root == "sequential" else Wrapper()
    lin = model[0] if root == "sequential" else model.lin
    pre = lin.register_forward_pre_hook(doubles_input)
    post = lin.register_forward_hook(triples_output)
    profile = ModuleProfiler().profile(model, torch.randn(2, 4))
    assert profile.total_ops == 80
    assert (profile.records[1].self_ops, profile.records[0].self_ops) == (80, 0)
    # MACs: the Linear's 2 * 4 * 4 = 32; the hooks' multiplies accumulate nothing
    assert profile.total_macs == 32
    # the hooks are the user's again, in their order
    assert list(lin._forward_pre_hooks) == [pre.id] and list(lin._forward_hooks) == [post.id]


def test_work_in_torch_s_global_forward_hooks_is_counted_never_lost() -> None:
    # Linear(4, 3) on 2 rows: 2 * 3 * (2 * 4 - 1) + 2 * 3 (bias) = 48; ReLU 2 * 3 = 6
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    x = torch.randn(2, 4)
    post = nn.modules.module.register_module_forward_hook(triples_output)
    try:
        profile = ModuleProfiler().profile(model, x)
    finally:
        post.remove()
    # the global hook runs inside each call, a multiply per output element: 2 x 3 = 6 in the
    # Linear's, 6 in the ReLU's and 6 in the Sequential's (its output is the ReLU's)
    assert [record.self_ops for record in profile.records] == [6, 48 + 6, 6 + 6]
    assert profile.total_ops == 48 + 6 + 18 and profile.complete
    pre = nn.modules.module.register_module_forward_pre_hook(doubles_input)
    try:
        profile = ModuleProfiler().profile(model, x)
    finally:
        pre.remove()
    # a global pre-hook runs before the call opens, in its caller's: the Sequential's input,
    # 2 x 4 = 8, outside every call; the Linear's (8) and the ReLU's (6) in the Sequential's
    assert [record.self_ops for record in profile.records] == [8 + 6, 48, 6]
    assert profile.total_ops == 8 + 8 + 6 + 48 + 6 and profile.complete


def test_a_hooked_module_whose_operators_are_unknown_keeps_its_formula() -> None:
    # the formula was registered for an opaque kernel: with a forward hook on the module (a
    # logger that computes nothing) the formula still counts, 1 op per element: 2 * 3 = 6
    profiler = ModuleProfiler()
    profiler.ops_fn_map[Triple] = lambda module, inputs, output: output.numel()
    model = Triple()
    model.register_forward_hook(lambda module, args, output: None)
    profile = profiler.profile(model, torch.randn(2, 3))
    assert (profile.total_ops, profile.records[0].ops_source) == (6, "formula")


def test_a_pass_run_while_another_runner_watches_counts_as_without_it() -> None:
    from moduleprofiler.timing import TrainingProfiler

    class Recurrent(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gru = nn.GRU(4, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.gru(x)[0]

    torch.manual_seed(0)
    model, x = Recurrent(), torch.randn(5, 1, 4)
    alone = ModuleProfiler().profile(model, x)
    with TrainingProfiler(model) as watching:
        assert watching.active  # its hooks are on every module
        inside = ModuleProfiler().profile(model, x)
    # the watching runner's hooks are no work of the GRU: it keeps its formula (a GRU's
    # operators count a few ops more than its formula), the same totals
    assert inside.module("gru") == alone.module("gru")
    assert (inside.total_ops, inside.total_macs) == (alone.total_ops, alone.total_macs)
    assert [r.ops_source for r in inside.records] == [r.ops_source for r in alone.records]
