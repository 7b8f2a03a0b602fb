"""Warnings that point at the user's line.

A warning issued deep inside a pass (the measurement loop, a listener, a hook that torch calls
back from the user's own forward) names, by default, the package line that issued it, which
tells the user nothing. :func:`caller_stacklevel` walks the stack instead of counting it by
hand: the line named is the one that called into the package from outside, the outermost
entry into ``moduleprofiler`` (so a wrapper such as ``Profiler.time_modules`` or
``compat.timing``, or torch's module call between the package and a hook, changes nothing).
``warnings.warn(..., skip_file_prefixes=...)`` does the same from Python 3.12; we support
3.10.
"""

from __future__ import annotations

import os
import sys
import warnings
from types import FrameType

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
"""Frames whose file lies under this folder are the package's own."""


def _inside(filename: str) -> bool:
    return os.path.abspath(filename).startswith(PACKAGE_DIR)


_FRAMEWORKS = frozenset({"lightning", "pytorch_lightning", "lightning_fabric", "transformers",
                         "accelerate", "torch", "contextlib"})
"""Top-level packages that call the package back (a trainer calling a callback, torch calling
a hook): a warning skips their frames above the package too, to the user's own line."""


def _framework(frame: FrameType) -> bool:
    return str(frame.f_globals.get("__name__", "")).split(".")[0] in _FRAMEWORKS


def caller_stacklevel() -> int:
    """The ``stacklevel`` that makes a ``warnings.warn`` in the function calling this one
    name the line that called into the package: the first frame outside the outermost
    package frame of the stack and outside the frameworks that called it (``trainer.fit``
    calling a callback), or the frame just outside the package when every frame above it is
    a framework's (1, the function itself, when no package frame is on it)."""
    frames: list[FrameType] = []
    frame: FrameType | None = sys._getframe(1)  # the function that will warn: stacklevel 1
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    package = [level for level, seen in enumerate(frames) if _inside(seen.f_code.co_filename)]
    if not package:
        return 1
    outside = package[-1] + 1
    user = next((level for level in range(outside, len(frames))
                 if not _framework(frames[level])), outside)
    return user + 1


def warn(message: str | Warning, category: type[Warning] | None = None) -> None:
    """``warnings.warn(message, category)`` attributed to the user's line
    (:func:`caller_stacklevel`)."""
    warnings.warn(message, category, stacklevel=caller_stacklevel())


class LowerBoundWarning(UserWarning):
    """Numbers written where they cannot say they are lower bounds (a TensorBoard scalar, a
    0.0.4 dict or frame): some work had no formula, and the message names the totals and
    what had none. A caller that has already said so may silence this category."""
