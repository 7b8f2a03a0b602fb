"""Per-rank profiles of ``torch.distributed`` programs: communication per module call, the
cross-rank view, and what-if runs on a fake process group (``docs/distributed.md``)."""

from moduleprofiler.distributed.collectives import KINDS, Collective
from moduleprofiler.distributed.listener import CommunicationListener

__all__ = ["KINDS", "Collective", "CommunicationListener"]
