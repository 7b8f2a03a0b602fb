"""Measured peaks: a short matmul, copy and launch benchmark on the device itself.

Where a device is not in the datasheet table, or to compare against what the device really
reaches (clocks, power limits, a shared host), :func:`measure_peaks` times ``torch.mm`` of two
square matrices per dtype, a device-to-device ``copy_`` and a one-element in-place add (the
launch cost), and returns a :class:`~moduleprofiler.efficiency.DevicePeaks` with
``source="measured"``. Each figure is the best of a few repetitions (the rate the device
demonstrably reaches).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Sequence

import torch

from moduleprofiler.devices import (
    default_device,
    device_name,
    synchronize,
    tf32_math,
    usable_device,
)
from moduleprofiler.efficiency.peaks import DTYPES, DevicePeaks

_TORCH = {"fp64": torch.float64, "fp32": torch.float32, "tf32": torch.float32,
          "bf16": torch.bfloat16, "fp16": torch.float16}


def _best_seconds(device: torch.device, work: Callable[[], object], reps: int) -> float:
    """Shortest wall time of ``work()`` over ``reps`` runs after one warm-up, the device
    synchronised around each."""
    work()
    synchronize(device)
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        work()
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best


def measure_peaks(device: str | torch.device | None = None, *,
                  dtypes: Sequence[str] = ("fp32", "tf32", "bf16", "fp16"),
                  matmul_size: int | None = None, copy_bytes: int | None = None,
                  reps: int = 5) -> DevicePeaks:
    """Measure matmul throughput per dtype, copy bandwidth and launch cost on ``device``
    (default: the current CUDA device, else the CPU).

    Args:
        dtypes: table names among ``fp64``, ``fp32``, ``tf32``, ``bf16``, ``fp16`` (``tf32`` on
            CUDA only); others stay ``None``.
        matmul_size: side of the square matrices (default 8192 on CUDA, 512 on the CPU).
        copy_bytes: bytes of the copied tensor (default 1 GiB on CUDA, 64 MiB on the CPU); a
            copy reads and writes them, so it moves twice as many.
        reps: repetitions of each benchmark (the best counts).

    Raises:
        ValueError: an unknown dtype name or a non-positive size.
        DeviceUnavailableError: this process has no ``device``.
    """
    resolved = usable_device(device) if device is not None else default_device()
    if isinstance(dtypes, str):  # one name (``dtypes="bf16"``), not its letters
        dtypes = (dtypes,)
    unknown = [name for name in dtypes if name not in _TORCH]
    if unknown:
        raise ValueError(f"measure_peaks: dtypes must be among {', '.join(_TORCH)}, got "
                         f"{unknown}")
    cuda = resolved.type == "cuda"
    n = matmul_size if matmul_size is not None else (8192 if cuda else 512)
    size = copy_bytes if copy_bytes is not None else (2**30 if cuda else 2**26)
    if n <= 0 or size <= 0 or reps <= 0:
        raise ValueError("measure_peaks: matmul_size, copy_bytes and reps must be positive")
    dense: dict[str, float | None] = dict.fromkeys(DTYPES)
    for name in dtypes:
        if name == "tf32" and not cuda:
            continue
        a = torch.randn(n, n, device=resolved, dtype=_TORCH[name])
        b = torch.randn(n, n, device=resolved, dtype=_TORCH[name])
        with tf32_math(name == "tf32") if cuda else contextlib.nullcontext():
            seconds = _best_seconds(resolved, functools.partial(torch.mm, a, b), reps)
        dense[name] = 2 * n**3 / seconds / 1e12  # one multiply-add = 2 FLOPs
    source = torch.empty(size // 4, device=resolved, dtype=torch.float32)
    target = torch.empty_like(source)
    seconds = _best_seconds(resolved, functools.partial(target.copy_, source), reps)
    bandwidth = 2 * source.numel() * 4 / seconds / 1e9
    one = torch.zeros(1, device=resolved)
    launches = 200

    def tiny() -> None:
        for _ in range(launches):
            one.add_(1)

    launch = _best_seconds(resolved, tiny, reps) / launches * 1e6
    name = device_name(resolved)
    return DevicePeaks(f"measured {name}", dense, bandwidth, launch_us=launch,
                       source="measured")
