"""``gather``: every rank's profile on one rank, as a
:class:`~moduleprofiler.distributed.gathered.DistributedProfile`."""

from __future__ import annotations

from datetime import timedelta

import torch.distributed as dist

from moduleprofiler.distributed.gathered import DistributedProfile
from moduleprofiler.errors import ProfilingError
from moduleprofiler.export.json_io import json_text
from moduleprofiler.export.profile import Profile


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
    if texts is None:
        return None
    return DistributedProfile(tuple(Profile.from_json(text) for text in texts))
