"""A rank whose pass raises inside a model that communicates: its partners, left waiting in
the model's collectives, raise promptly and name the module that failed on the other rank."""

from __future__ import annotations

import time

import pytest
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from moduleprofiler import ModuleProfiler
from moduleprofiler.errors import ProfilingError
from tests.distributed.ranks import run_ranks

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="needs torch.distributed with gloo")


class _FailsOnThreeRows(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] == 3:
            raise ValueError("bad batch")
        return x


def _profile(rank: int, world_size: int) -> tuple[str, float]:
    torch.manual_seed(0)
    model = DistributedDataParallel(
        nn.Sequential(nn.Linear(4, 8), _FailsOnThreeRows(), nn.Linear(8, 6)))
    start = time.perf_counter()
    try:
        # rank 1's batch has 3 rows: its forward raises, and rank 0 waits in the backward's
        # gradient all-reduce for a partner that never comes
        ModuleProfiler().profile(model, torch.randn(2 + rank, 4), backward=True)
    except ProfilingError as error:
        # rank 1 leaves at once (its process exits, as under torchrun)
        return str(error), time.perf_counter() - start
    return "no error", 0.0


def test_the_partner_of_a_failed_rank_names_its_module_before_the_timeout() -> None:
    (waiting, waited), (failed, _) = run_ranks(_profile, timeout=60)
    assert failed.startswith("forward of module 'module.1' (_FailsOnThreeRows) raised "
                             "ValueError: bad batch")
    # the partner's own error (the connection closed) names the failed rank and its module
    assert waiting.endswith("; rank 1 failed first: forward of module 'module.1' "
                            "(_FailsOnThreeRows) raised ValueError: bad batch")
    assert waited < 30  # the group's timeout is 60 s
