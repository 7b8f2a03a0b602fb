"""Timing warnings, and the batch size a throughput divides by."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from moduleprofiler.shapes import iter_tensors
from moduleprofiler.warn import warn


def first_batch_size(input: Any) -> int | None:
    """The leading dimension of the first tensor in ``input`` (``None`` if there is none or it
    is 0-dimensional): the default batch size for throughput."""
    for tensor in iter_tensors(input):
        return int(tensor.shape[0]) if tensor.dim() > 0 else None
    return None


class TimingWarning(UserWarning):
    """A timing result needs a caveat (a clock fell back, the run was noisy...): issued
    through :mod:`warnings` as well as kept in the result's ``warnings``."""


def issue_warnings(messages: Iterable[str]) -> None:
    """Issue each of ``messages`` once, in order, as a :class:`TimingWarning` (a result keeps
    them in its ``warnings`` as well), attributed to the line the user wrote
    (:func:`moduleprofiler.warn.warn`), however deep in the package this is called."""
    for message in dict.fromkeys(messages):
        warn(message, TimingWarning)
