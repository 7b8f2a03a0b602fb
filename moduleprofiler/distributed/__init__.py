"""Per-rank profiles of ``torch.distributed`` programs: communication per module call, the
cross-rank view, and what-if runs on a fake process group (``docs/distributed.md``)."""

from moduleprofiler.distributed.collectives import KINDS, Collective
from moduleprofiler.distributed.fake import fake_world
from moduleprofiler.distributed.gather import DistributedError, gather
from moduleprofiler.distributed.gathered import DistributedProfile
from moduleprofiler.distributed.listener import CommunicationListener

__all__ = [
    "KINDS",
    "Collective",
    "CommunicationListener",
    "DistributedError",
    "DistributedProfile",
    "fake_world",
    "gather",
]
