"""moduleprofiler 0.0.4's helpers, same names and arguments (``moduleprofiler.utils`` re-exports
them, as 0.0.4's import path).

Audio models run frame by frame: a frame of ``frame_size`` samples every ``hop_size`` samples
(``hop_size`` defaults to ``frame_size``). Both audio helpers count the frames in one second
of audio as 0.0.4 did, the frames that fit whole in ``sample_rate`` samples:
``(sample_rate - frame_size) / hop_size + 1`` (:func:`frames_per_second`).
"""

from __future__ import annotations

from typing import Any

from moduleprofiler.export.tables import with_suffix
from moduleprofiler.timing.environment import get_hardware_specs

__all__ = [
    "add_extension", "dict_keys_common", "dict_keys_diff", "dict_merge", "frames_per_second",
    "get_hardware_specs", "make_list", "ops_to_flops", "realtime_factor",
]


def make_list(x: Any) -> list[Any] | None:
    """``x`` as a list, as 0.0.4: a list is returned as it is, ``None`` stays ``None``,
    anything else (a tuple included) becomes the one item of a new list."""
    if x is None or isinstance(x, list):
        return x
    return [x]


def frames_per_second(sample_rate: int, frame_size: int, hop_size: int | None = None) -> float:
    """Frames of ``frame_size`` samples, one every ``hop_size`` (default ``frame_size``), that
    fit in one second of audio: ``(sample_rate - frame_size) / hop_size + 1``, 0.0.4's count.

    Raises:
        ValueError: ``hop_size`` is not positive, or ``frame_size`` exceeds ``sample_rate``
            (not one whole frame per second).
    """
    hop = frame_size if hop_size is None else hop_size
    if hop <= 0:
        raise ValueError(f"hop_size must be positive, got {hop}")
    if frame_size > sample_rate:
        raise ValueError(f"frame_size must not exceed sample_rate, got frame_size={frame_size} "
                         f"and sample_rate={sample_rate}")
    return (sample_rate - frame_size) / hop + 1


def ops_to_flops(ops_per_frame: float, sample_rate: int, frame_size: int,
                 hop_size: int | None = None) -> float:
    """Operations per second of audio: ops of one frame times the frames per second.

    Frames per second as in :func:`frames_per_second`. ``ops_to_flops(1000, 16000, 160) ==
    100000.0``.
    """
    return frames_per_second(sample_rate, frame_size, hop_size) * ops_per_frame


def realtime_factor(inference_time: float, sample_rate: int, frame_size: int,
                    hop_size: int | None = None, inverse: bool = False) -> float:
    """How many times faster than real time a frame-by-frame model runs.

    ``inference_time`` is the time of one frame in ms. Returns ``1000 / (fps * t)``, or its
    inverse ``fps * t / 1000`` with ``inverse=True``, ``fps`` as in :func:`frames_per_second`.
    ``realtime_factor(2.0, 16000, 160) == 5.0``.
    """
    if inference_time <= 0:
        raise ValueError(f"inference_time must be positive (ms per frame), got {inference_time}")
    busy = frames_per_second(sample_rate, frame_size, hop_size) * inference_time
    return busy / 1000.0 if inverse else 1000.0 / busy


def dict_keys_common(input: dict[Any, Any], query: dict[Any, Any]) -> list[Any]:
    """The keys of ``query`` that ``input`` has too, in ``query``'s order."""
    return [key for key in query if key in input]


def dict_keys_diff(input: dict[Any, Any], query: dict[Any, Any]) -> list[Any]:
    """The keys of ``query`` that ``input`` lacks, in ``query``'s order."""
    return [key for key in query if key not in input]


def dict_merge(input: dict[Any, Any], other: dict[Any, Any]) -> dict[Any, Any]:
    """``input`` with the keys of ``other`` it lacks added, in place, and returned (0.0.4's
    merge of two result entries: a key both hold must hold equal values).

    Raises:
        ValueError: a key of both dicts has different values (nothing is added then).
    """
    for key in dict_keys_common(input, other):
        if input[key] != other[key]:
            raise ValueError(f"dict_merge: key {key!r} has different values, "
                             f"input[{key!r}]={input[key]!r} and other[{key!r}]={other[key]!r}")
    for key in dict_keys_diff(input, other):
        input[key] = other[key]
    return input


def add_extension(file: str, extension: str) -> str:
    """``file`` ending in ``extension`` (given with or without the dot), never ``name..ext``."""
    suffix = extension if extension.startswith(".") else "." + extension
    return with_suffix(file, suffix)
