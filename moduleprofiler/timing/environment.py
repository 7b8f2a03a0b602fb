"""What the machine was doing while we timed: hardware columns (0.0.4's), thread counts, load,
allocator settings, page faults; plus the contexts that pin threads and pause the GC."""

from __future__ import annotations

import contextlib
import gc
import math
import os
import platform
import socket
from collections.abc import Iterator
from typing import Any

import torch

from moduleprofiler.devices import (
    clock_rate_mhz,
    cuda_available,
    device_names,
    fp32_precision,
    properties,
)
from moduleprofiler.garbage import collector_paused

_ALLOCATOR_VARS = ("LD_PRELOAD", "MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_",
                   "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES",
                   "PYTORCH_CUDA_ALLOC_CONF")


def _total_memory_mb() -> int | None:
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20)
    except (AttributeError, ValueError, OSError):
        pass
    try:
        import psutil

        return int(psutil.virtual_memory().total // 2**20)
    except Exception:
        return None


def get_hardware_specs() -> dict[str, Any]:
    """moduleprofiler 0.0.4's hardware columns, in its order.

    ``host_name``, ``os`` (``platform.system()``), ``os_release``, ``cpu_count``,
    ``total_memory`` (``"<n> MB"``, MiB rounded down) and ``gpu``: ``"unavailable"``, or the
    list of ``torch.cuda.get_device_name(i)`` when CUDA is available.
    """
    memory = _total_memory_mb()
    gpu: str | list[str] = "unavailable"
    if cuda_available():
        gpu = device_names()
    return {
        "host_name": socket.gethostname(),
        "os": platform.system(),
        "os_release": platform.release(),
        "cpu_count": os.cpu_count(),
        "total_memory": f"{memory} MB" if memory is not None else "unknown",
        "gpu": gpu,
    }


def hardware_facts() -> dict[str, Any]:
    """:func:`get_hardware_specs` as a pass's facts keep it: the GPUs' names a tuple, as a
    JSON document reads them back (a list there made every result of a machine with a GPU
    unequal to itself read back from its JSON)."""
    specs = get_hardware_specs()
    if isinstance(specs["gpu"], list):
        specs["gpu"] = tuple(specs["gpu"])
    return specs


def loadavg() -> float | None:
    """The 1-minute load average (``None`` where the OS has none)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def minor_faults() -> int | None:
    """Minor page faults of this process so far (``None`` without ``resource``)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - Windows
        return None
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)


def capture_environment(device: torch.device) -> dict[str, Any]:
    """Everything that moves timings and that we can read cheaply, as a flat dict."""
    env: dict[str, Any] = {
        "torch_version": torch.__version__,
        "device": str(device),
        "intraop_threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "cpu_count": os.cpu_count(),
        "loadavg": loadavg(),
        "omp_mkl_env": {k: v for k, v in os.environ.items()
                        if k.startswith(("OMP_", "MKL_", "KMP_"))},
        "allocator_env": {k: os.environ[k] for k in _ALLOCATOR_VARS if k in os.environ},
        "mkldnn_enabled": bool(torch.backends.mkldnn.enabled),
    }
    if device.type == "cuda":
        props = properties(device)
        env.update(
            device_name=props.name,
            cuda_version=torch.version.cuda,
            cudnn_benchmark=bool(torch.backends.cudnn.benchmark),
            # through the per-backend API: the legacy getters raise once it was used
            cudnn_allow_tf32=fp32_precision("cudnn.conv") == "tf32",
            matmul_allow_tf32=fp32_precision("cuda.matmul") == "tf32",
            multi_processor_count=props.multi_processor_count,
        )
        with contextlib.suppress(Exception):  # needs pynvml
            env["gpu_clock_mhz"] = clock_rate_mhz(device)
    else:
        env["device_name"] = platform.processor() or platform.machine()
    return env


@contextlib.contextmanager
def timing_context(num_threads: int | None = None) -> Iterator[None]:
    """Pin the intra-op thread count (when given) and pause the garbage collector; both are
    restored on exit, even if the body raises. The youngest generation is collected first
    (a full collection costs ~0.3 s with torch's heap; with the collector paused, older
    garbage just waits until the end)."""
    previous_threads = torch.get_num_threads()
    if num_threads is not None:
        if num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {num_threads}")
        torch.set_num_threads(num_threads)
    gc.collect(0)
    try:
        with collector_paused():
            yield
    finally:
        if torch.get_num_threads() != previous_threads:
            torch.set_num_threads(previous_threads)


MINOR_FAULT_US = 3.0
"""Estimated cost of one minor page fault, in microseconds: the trap, the kernel's page
allocation and the zeroing of a 4 KiB page that the allocator had returned to the system.
First touches of fresh ``mmap`` pages cost 2.7 us each on our CPU VM (a loop over 8-64 MiB,
the same loop over touched pages subtracted); bare-metal hosts take 0.5-2 us, so this errs
towards warning."""

FAULT_SHARE_LIMIT = 0.01
"""Page faults are worth a warning when their estimated cost exceeds this share of the median
iteration (1 %)."""


def fault_share(faults_per_iter: float, iteration_ms: float) -> float:
    """Estimated share of an iteration spent in minor page faults:
    ``faults x MINOR_FAULT_US / iteration`` (2 faults in a 13 ms iteration: 6 us, 0.05 %)."""
    if iteration_ms <= 0:
        return math.inf
    return faults_per_iter * MINOR_FAULT_US / 1e3 / iteration_ms


def environment_warnings(env_before: dict[str, Any], faults_per_iter: float | None,
                         device: torch.device, iteration_ms: float | None = None,
                         spread: tuple[str, float] | None = None) -> list[str]:
    """Plain-language warnings about the conditions of a run, one per cause, each one line
    and a short hint (docs/timing.md explains them).

    A loaded machine and noisy samples (``spread``: the noisiest series' name and its
    IQR / median, when above the limit) are one cause, one note. Minor page faults (CPU only)
    are mentioned only when they cost a measurable share of the ``iteration_ms`` median:
    :func:`fault_share` above :data:`FAULT_SHARE_LIMIT`. Without an iteration time their
    share is unknown and nothing is said (the count stays in the environment's
    ``minor_faults_per_iter``)."""
    warnings: list[str] = []
    load = env_before.get("loadavg")
    cores = env_before.get("cpu_count") or 1
    noisy = f" (IQR/median {spread[1]:.2f} in {spread[0]})" if spread is not None else ""
    if load is not None and load > cores:
        threads = env_before.get("intraop_threads") or 1
        advice = ("; num_threads=1 helps" if device.type == "cpu" and threads > 1
                  else "; use medians, not means")
        warnings.append(f"load average {load:.2f} exceeds the {cores} CPU cores: times are "
                        f"inflated and noisy{noisy}{advice}")
    elif spread is not None:
        warnings.append(f"the machine is noisy{noisy}: use medians, not means")
    if (device.type == "cpu" and faults_per_iter is not None and iteration_ms is not None
            and not math.isnan(iteration_ms)):
        share = fault_share(faults_per_iter, iteration_ms)
        if share > FAULT_SHARE_LIMIT:
            warnings.append(
                f"{faults_per_iter:.3g} minor page faults per timed iteration, about "
                f"{100 * share:.1f} % of the {iteration_ms:.3g} ms median iteration (at "
                f"~{MINOR_FAULT_US:g} us a fault); see docs/timing.md, allocators")
    return warnings
