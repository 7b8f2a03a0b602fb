"""The measurement loop's decisions taken by every rank of a ``torch.distributed`` group
together, for a model whose every call communicates (DDP, FSDP2, tensor parallelism).

Each rank decides from its own clock how long to warm up, how many iterations a round runs
and when to stop; a rank that runs one iteration fewer leaves the others waiting for ever in
that iteration's all-reduce or all-gather. With a :class:`RankAgreement` the ranks go on while
any of them wants to and size each round by the smallest wish, so that they run the same
iterations and every collective finds its partners.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from moduleprofiler.devices import cuda_index, device_count
from moduleprofiler.distributed.gather import collective_device, local_rank
from moduleprofiler.shards import communicates_gradients, process_rank, sharded_by
from moduleprofiler.warn import warn


class RankAgreement:
    """Decisions every rank of the default process group takes together (each is a
    collective: every rank calls it at the same point of the loop)."""

    def __init__(self, device: torch.device | None) -> None:
        self.device = device

    def _reduced(self, value: int, op: dist.ReduceOp.RedOpType) -> int:
        tensor = torch.tensor([value], dtype=torch.int64, device=self.device)
        dist.all_reduce(tensor, op=op)
        return int(tensor.item())

    def go_on(self, wanted: bool) -> bool:
        """Whether to run another iteration (or round): while any rank wants one."""
        return bool(self._reduced(int(wanted), dist.ReduceOp.MAX))

    def fewest(self, count: int) -> int:
        """The smallest of the ranks' ``count``."""
        return self._reduced(count, dist.ReduceOp.MIN)


def rank_agreement(module: nn.Module) -> RankAgreement | None:
    """A :class:`RankAgreement` when ``module`` communicates in every call (it holds a
    ``DistributedDataParallel`` or FSDP2 module, or ``DTensor`` parameters) inside a group of
    several ranks; ``None`` otherwise (each rank's loop is its own: a plain model may be
    timed on one rank alone)."""
    if (process_rank()[1] or 1) < 2:
        return None
    if not (communicates_gradients(module) or sharded_by(module.modules()) is not None):
        return None
    device, warning = collective_device(
        dist.get_backend(), getattr(dist.group.WORLD, "bound_device_id", None), cuda_index(),
        local_rank(), device_count(), caller="the timing loop")
    if warning is not None:
        warn(warning, RuntimeWarning)
    return RankAgreement(device)
