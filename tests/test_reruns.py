"""Activation checkpoints' reruns inside the backward, matched to the forward calls they
repeat (:mod:`moduleprofiler.reruns`): each call's backward as without the checkpoint, plus
its own forward once more."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from moduleprofiler import ModuleProfiler, ProfilingError
from tests.fixtures.state import assert_unchanged, snapshot


class _Reused(nn.Module):
    """One block called twice, in two checkpoints, on inputs of 4 and 8 rows: the matching
    must tell the calls apart (their counts differ)."""

    def __init__(self, reentrant: bool | None) -> None:
        super().__init__()
        self.shared = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 8))
        self.head = nn.Linear(8, 2)
        self.reentrant = reentrant

    def _run(self, x: torch.Tensor) -> torch.Tensor:
        if self.reentrant is None:
            return self.shared(x)
        return checkpoint(self.shared, x, use_reentrant=self.reentrant)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        first = self._run(x)
        return self.head(self._run(torch.cat([first, first])))


def _backward_ops(reentrant: bool | None) -> dict[tuple[str, int], int | float | None]:
    torch.manual_seed(0)
    profile = ModuleProfiler().profile(_Reused(reentrant), torch.randn(4, 8, requires_grad=True),
                                       backward=True)
    assert profile.backward_outside_ops == 0
    return {(r.path, r.call_number): r.self_backward_ops for r in profile.records}


def test_a_block_reused_in_two_reentrant_checkpoints_has_each_rerun_booked_to_its_call() -> None:
    plain, checkpointed = _backward_ops(None), _backward_ops(True)
    # each call's modules run their forward once more: a linear rows x 8 x (8 multiplies +
    # 7 adds + 1 bias), the ReLU rows x 8; the first call has 4 rows, the second 8
    rerun = {("shared.0", 0): 4 * 128, ("shared.1", 0): 4 * 8, ("shared.2", 0): 4 * 128,
             ("shared.0", 1): 8 * 128, ("shared.1", 1): 8 * 8, ("shared.2", 1): 8 * 128}
    assert checkpointed == {key: ops + rerun.get(key, 0) for key, ops in plain.items()}


def test_a_block_reused_in_two_non_reentrant_checkpoints_has_each_rerun_booked_to_its_call(
        ) -> None:
    plain, checkpointed = _backward_ops(None), _backward_ops(False)
    added = {key: checkpointed[key] - ops for key, ops in plain.items()}
    # this kind reruns a block only as far as the backward needs; whatever it reruns, the
    # second call (8 rows) reruns the same modules as the first (4 rows): twice the work
    first = {path: ops for (path, number), ops in added.items() if number == 0}
    second = {path: ops for (path, number), ops in added.items() if number == 1}
    assert first["shared.0"] == 4 * 128 and second["shared.0"] == 8 * 128
    assert {path: 2 * ops for path, ops in first.items() if path in second} == second
    assert added[("head", 0)] == added[("", 0)] == 0


def _maybe_checkpointed(function: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor,
                        checkpointed: bool) -> torch.Tensor:
    """``function(x)``, under a reentrant checkpoint when ``checkpointed``."""
    if checkpointed:
        return checkpoint(function, x, use_reentrant=True)
    return function(x)


class _Layer(nn.Module):
    """A pre-norm residual block that checkpoints its own body (as transformer layers do):
    the body calls four modules, with residual adds between and after them."""

    def __init__(self, checkpointed: bool) -> None:
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(8), nn.Linear(8, 8)
        self.norm2, self.mlp = nn.LayerNorm(8), nn.Linear(8, 8)
        self.checkpointed = checkpointed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _maybe_checkpointed(self._body, x, self.checkpointed)

    def _body(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attn(self.norm1(x))
        return h + self.mlp(self.norm2(h))


def test_a_checkpointed_body_is_booked_to_each_module_it_calls_and_to_its_own_adds() -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 8, requires_grad=True)

    def layers(checkpointed: bool) -> nn.Module:
        torch.manual_seed(1)
        return nn.Sequential(_Layer(checkpointed), _Layer(checkpointed), nn.Linear(8, 2))

    plain = ModuleProfiler().profile(layers(False), x, backward=True)
    checkpointed = ModuleProfiler().profile(layers(True), x, backward=True)
    rerun = {r.path: r.self_ops for r in plain.records if r.path.startswith(("0", "1"))}
    # the oracle: the plain model's backward plus each call's own forward work once more
    # (the layers' own: two residual adds of 4 x 8, 64 ops each)
    assert rerun["0"] == rerun["1"] == 64
    expected = {r.path: r.self_backward_ops + rerun.get(r.path, 0) for r in plain.records}
    assert {r.path: r.self_backward_ops for r in checkpointed.records} == expected
    assert checkpointed.backward_outside_ops == 0


class _Inner(nn.Module):
    def __init__(self, checkpointed: bool) -> None:
        super().__init__()
        self.a, self.checkpointed = nn.Linear(8, 8), checkpointed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _maybe_checkpointed(self.a, x, self.checkpointed)


class _Outer(nn.Module):
    """A checkpointed body whose two inner blocks checkpoint again (nested checkpoints)."""

    def __init__(self, checkpointed: bool) -> None:
        super().__init__()
        self.i1, self.b, self.i2 = _Inner(checkpointed), nn.Linear(8, 8), _Inner(checkpointed)
        self.checkpointed = checkpointed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _maybe_checkpointed(self._body, x, self.checkpointed)

    def _body(self, x: torch.Tensor) -> torch.Tensor:
        return self.i2(self.b(self.i1(x)) + x)


def test_nested_reentrant_checkpoints_are_booked_to_their_modules() -> None:
    x = torch.randn(4, 8, requires_grad=True)

    def profile(checkpointed: bool) -> Any:
        torch.manual_seed(0)
        model = nn.Sequential(_Outer(checkpointed), nn.Linear(8, 2))
        with warnings.catch_warnings():  # the inner checkpoints' inputs need no grad in the
            warnings.simplefilter("ignore")  # outer one's first run: torch says so
            return ModuleProfiler().profile(model, x, backward=True)

    plain, nested = profile(False), profile(True)
    own = {r.path: r.self_backward_ops for r in nested.records}
    reference = {r.path: r.self_backward_ops for r in plain.records}
    # the outer rerun runs b once more (4 x 8 x 16 = 512 ops) and the body's add (32); the
    # inner blocks' linears run twice more (in the outer rerun and in their own): 2 x 512
    assert own["0.b"] == reference["0.b"] + 512
    assert sum(own.values()) == sum(reference.values()) + 512 + 32 + 2 * (2 * 512)
    assert nested.backward_outside_ops == plain.backward_outside_ops == 0


class _FailsInTheRerun(nn.Module):
    """Runs in the forward; raises when a checkpoint reruns it inside the backward."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():
            raise RuntimeError("rerun refused")
        return x * 2


def test_a_rerun_that_raises_in_the_backward_leaves_no_hook_behind() -> None:
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner, self.out = _FailsInTheRerun(), nn.Linear(4, 1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.out(checkpoint(self.inner, x,
                                                              use_reentrant=True))

    model = Model()
    before = snapshot(model)
    with pytest.raises(ProfilingError, match="rerun refused"):
        ModuleProfiler().profile(model, torch.randn(2, 4, requires_grad=True), backward=True)
    assert_unchanged(model, before)  # hooks, flags, parameters and grads as they were
