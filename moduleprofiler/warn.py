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

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep
"""Frames whose file lies under this folder are the package's own."""


def _inside(filename: str) -> bool:
    return os.path.abspath(filename).startswith(PACKAGE_DIR)


def caller_stacklevel() -> int:
    """The ``stacklevel`` that makes a ``warnings.warn`` in the function calling this one
    name the line that called into the package: the frame just outside the outermost package
    frame of the stack (1, the function itself, when no package frame is on it)."""
    frame = sys._getframe(1)  # the function that will warn: stacklevel 1
    level, outermost = 1, 0
    while frame is not None:
        if _inside(frame.f_code.co_filename):
            outermost = level
        frame = frame.f_back  # type: ignore[assignment]
        level += 1
    return outermost + 1


def warn(message: str, category: type[Warning]) -> None:
    """``warnings.warn(message, category)`` attributed to the user's line
    (:func:`caller_stacklevel`)."""
    warnings.warn(message, category, stacklevel=caller_stacklevel())
