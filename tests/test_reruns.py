"""Activation checkpoints' reruns inside the backward, matched to the forward calls they
repeat (:mod:`moduleprofiler.reruns`): each call's backward as without the checkpoint, plus
its own forward once more."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from moduleprofiler import ModuleProfiler


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
    added = {key: checkpointed[key] - ops for key, ops in plain.items()}  # type: ignore[operator]
    # this kind reruns a block only as far as the backward needs; whatever it reruns, the
    # second call (8 rows) reruns the same modules as the first (4 rows): twice the work
    first = {path: ops for (path, number), ops in added.items() if number == 0}
    second = {path: ops for (path, number), ops in added.items() if number == 1}
    assert first["shared.0"] == 4 * 128 and second["shared.0"] == 8 * 128
    assert {path: 2 * ops for path, ops in first.items() if path in second} == second
    assert added[("head", 0)] == added[("", 0)] == 0
