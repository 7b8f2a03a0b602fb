"""``gather``: every rank's profile on one rank, as a
:class:`~moduleprofiler.distributed.gathered.DistributedProfile`."""

from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist

from moduleprofiler.devices import cuda_index, device_context, device_count
from moduleprofiler.distributed.gathered import DistributedProfile
from moduleprofiler.errors import ProfilingError
from moduleprofiler.export.json_io import json_text
from moduleprofiler.export.profile import Profile
from moduleprofiler.warn import warn


class DistributedError(ProfilingError):
    """A rank failed (its profile raised, or it did not reach :func:`gather` in time)."""


def gather(profile: Profile | BaseException, dst: int = 0,
           group: dist.ProcessGroup | None = None, *,
           timeout: float | None = None) -> DistributedProfile | None:
    """Gather every rank's ``profile`` on rank ``dst`` (a collective: every rank of ``group``
    calls it). Returns the :class:`DistributedProfile` on ``dst`` and ``None`` elsewhere.

    Args:
        profile: this rank's profile, or the exception its profiling raised: every rank then
            raises :class:`DistributedError` naming the failed ranks, instead of waiting for a
            profile that never comes.
        dst: the global rank that receives the profiles.
        group: the process group (default: the world).
        timeout: seconds to wait for every rank to arrive; a rank that does not (it crashed
            or hangs) makes the others raise :class:`DistributedError` naming it. Needs the
            gloo backend (``monitored_barrier``); with other backends the process group's own
            timeout (``init_process_group(timeout=...)``) bounds the wait.

    With NCCL the profiles travel through this rank's GPU: the group's bound device
    (``init_process_group(device_id=...)``), else the current device
    (``torch.cuda.set_device``). A rank that never chose one would send from ``cuda:0``, the
    device of local rank 0, and both ranks would wait there for ever; ``gather`` then uses
    ``cuda:LOCAL_RANK`` (set by ``torchrun``) and warns. Every rank leaves after a final
    barrier, so none tears its process group down while another is still receiving.

    Raises:
        TypeError: ``profile`` is neither a ``Profile`` nor an exception.
        DistributedError: a rank failed, or did not arrive within ``timeout``.
        RuntimeError: ``torch.distributed`` is not initialised.
    """
    if not isinstance(profile, (Profile, BaseException)):
        raise TypeError(f"gather: profile must be a Profile or the exception profiling "
                        f"raised, got {type(profile).__name__}")
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("gather: torch.distributed is not initialised "
                           "(call init_process_group first)")
    device, warning = collective_device(
        dist.get_backend(group), getattr(group or dist.group.WORLD, "bound_device_id", None),
        cuda_index(), local_rank(), device_count())
    if warning is not None:
        warn(warning, RuntimeWarning)
    with device_context(device):
        return _gather(profile, dst, group, timeout)


def _gather(profile: Profile | BaseException, dst: int, group: dist.ProcessGroup | None,
            timeout: float | None) -> DistributedProfile | None:
    if timeout is not None:
        try:
            dist.monitored_barrier(group, timeout=timedelta(seconds=timeout),
                                   wait_all_ranks=True)
        except RuntimeError as exc:
            raise DistributedError(f"gather: not every rank arrived within {timeout} s: "
                                   f"{exc}") from exc
    failure = None if isinstance(profile, Profile) else \
        f"{type(profile).__name__}: {profile}"
    failures: list[str | None] = [None] * dist.get_world_size(group)
    dist.all_gather_object(failures, failure, group=group)
    failed = {rank: message for rank, message in enumerate(failures) if message is not None}
    if failed:
        raise DistributedError("gather: profiling failed on " + "; ".join(
            f"rank {rank} ({message})" for rank, message in failed.items()))
    assert isinstance(profile, Profile)
    me = dist.get_rank()
    texts: list[str] | None = [""] * dist.get_world_size(group) if me == dst else None
    dist.gather_object(json_text(profile, indent=None), texts, dst=dst, group=group)
    # the other ranks wait until ``dst`` has every profile: one that left at once could destroy
    # its process group under a transfer still in flight (gloo then aborts the process)
    dist.barrier(group)
    if texts is None:
        return None
    return DistributedProfile(tuple(Profile.from_json(text) for text in texts))


def collective_device(backend: str, bound: torch.device | None, current: int | None,
                      local_rank: int | None, devices: int, caller: str = "gather"
                      ) -> tuple[torch.device | None, str | None]:
    """The CUDA device that this rank's object collectives must run on, and a warning when it
    is not the current one: ``(None, None)`` where the group moves objects on the CPU (gloo,
    or a ``cpu:gloo`` backend beside NCCL).

    Args:
        backend: ``dist.get_backend(group)``, e.g. ``"nccl"``, ``"gloo"``,
            ``"cuda:nccl,cpu:gloo"``.
        bound: the group's ``bound_device_id`` (``init_process_group(device_id=...)``).
        current: ``torch.cuda.current_device()`` (``None`` without CUDA).
        local_rank: ``LOCAL_RANK`` from the environment (``None`` when unset).
        devices: ``torch.cuda.device_count()``.
        caller: what runs the collectives, as the warning names it.
    """
    if "nccl" not in backend or "cpu:" in backend:
        return None, None
    if bound is not None:
        return bound, None
    if current is None:
        return None, None
    if local_rank is not None and local_rank != current and current == 0 \
            and local_rank < devices:
        # cuda:0 is the default, not a choice: this rank never called set_device
        return torch.device("cuda", local_rank), (
            f"{caller}: local rank {local_rank} has cuda:0 as its current device, which local "
            f"rank 0 uses too; its NCCL collectives would wait there for ever. {caller} runs "
            f"them on cuda:{local_rank}; call torch.cuda.set_device(local_rank) before "
            f"profiling so that every collective of your program runs there too")
    return torch.device("cuda", current), None


def local_rank() -> int | None:
    """``LOCAL_RANK`` from the environment (set by ``torchrun``), ``None`` when unset."""
    value = os.environ.get("LOCAL_RANK", "")
    return int(value) if value.isdigit() else None
