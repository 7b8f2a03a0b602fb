"""What-if runs without a cluster: one process plays one rank of a group of any size on
PyTorch's fake process group, whose collectives return at once without moving data."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch.distributed as dist


@contextmanager
def fake_world(world_size: int, rank: int = 0) -> Iterator[None]:
    """Run the block as rank ``rank`` of ``world_size`` ranks on the fake process group
    (``init_process_group("fake", store=FakeStore(), ...)``), destroyed afterwards.

    Build the parallel plan (``fully_shard``, ``parallelize_module``) inside the block, on the
    meta device for models that would not fit: the profile then counts what this rank would
    run and communicate (every rank of a symmetric plan runs the same). Collectives move no
    data, so values are meaningless: only shapes, counts and bytes are.

    Raises:
        ValueError: ``world_size`` or ``rank`` is out of range, or a process group is
            already initialised in this process.
    """
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise ValueError(f"fake_world: world_size must be a positive int, got {world_size!r}")
    if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < world_size:
        raise ValueError(f"fake_world: rank must be in [0, {world_size}), got {rank!r}")
    if dist.is_initialized():
        raise ValueError("fake_world: a process group is already initialised in this process")
    # importing it registers the fake backend
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()
