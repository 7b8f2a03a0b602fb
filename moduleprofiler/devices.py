"""What differs per device, in one place: which device a pass runs on, waiting for it, its
timing events and streams, its allocator's peak, named ranges for its tools, its name.

Every pass (timing, memory, efficiency, prediction) asks here instead of calling
``torch.cuda`` itself, so a new accelerator is one set of answers in this file. A device is
always checked by ``device.type``, never by equality with ``torch.device("cuda")``:
``cuda:0 != cuda``, the bug that made nnprofiler time GPUs with a CPU clock.
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Any

import torch
from torch import nn

from moduleprofiler.errors import MixedDeviceError
from moduleprofiler.shapes import iter_tensors

CPU = torch.device("cpu")


def cuda_available() -> bool:
    """Whether this process can use a CUDA device."""
    return torch.cuda.is_available()


def default_device() -> torch.device:
    """The current CUDA device where there is one, else the CPU."""
    return torch.device("cuda", torch.cuda.current_device()) if cuda_available() else CPU


def _where(module: nn.Module, input: Any) -> list[tuple[str, torch.device]]:
    """The first parameter or buffer's device (``"the model"``) and the first input tensor's
    (``"input"``): the two places a pass's device can come from."""
    places = [("the model", tensor.device) for tensor in itertools.islice(
        itertools.chain(module.parameters(), module.buffers()), 1)]
    places += [("input", tensor.device) for tensor in itertools.islice(iter_tensors(input), 1)]
    return places


def resolve_device(module: nn.Module, input: Any = None,
                   device: str | torch.device | None = None) -> torch.device:
    """The device a pass over ``module(input)`` runs on, by one rule for every pass:

    1. ``device`` when given (nothing is checked against it: the pass may move things there);
    2. the meta device when an input or the model is on it (a plan: the rest is moved
       there);
    3. else the device of the model's first parameter (or buffer) and of the first input
       tensor, which must be of one type: a model on ``cuda`` called with a CPU input is a
       :class:`~moduleprofiler.errors.MixedDeviceError` naming both (pass ``device=``);
       devices of one type with other indices (a model split over GPUs) take the model's;
    4. the CPU when there is no tensor at all.

    A bare ``"cuda"`` becomes the current CUDA device; a CUDA device without CUDA is a
    ``RuntimeError``."""
    if device is not None:
        resolved = torch.device(device)
    else:
        places = _where(module, input)
        types = {place.type for _, place in places}
        if "meta" in types or any(t.device.type == "meta" for t in iter_tensors(input)):
            resolved = torch.device("meta")
        elif len(types) > 1:
            raise MixedDeviceError(
                "device: " + " but ".join(f"{name} is on {place}" for name, place in places)
                + "; move them to one device or pass device= to say which to use")
        else:
            resolved = places[0][1] if places else CPU
    if resolved.type == "cuda":
        if not cuda_available():
            raise RuntimeError(f"device {resolved} asked for, but torch.cuda.is_available() "
                               "is False")
        if resolved.index is None:
            resolved = torch.device("cuda", torch.cuda.current_device())
    return resolved


def device_index(device: torch.device) -> int:
    """The CUDA index of ``device`` (a bare ``cuda`` is the current device)."""
    return device.index if device.index is not None else torch.cuda.current_device()


def synchronize(device: torch.device | None = None) -> None:
    """Wait for the work queued on ``device`` (a no-op on the CPU and meta). ``None``: the
    current CUDA device, where CUDA has been initialised in this process."""
    if device is None:
        if cuda_available() and torch.cuda.is_initialized():
            torch.cuda.synchronize()
    elif device.type == "cuda":
        torch.cuda.synchronize(device)


def new_event() -> Any:
    """A CUDA event that records timing (``torch.cuda.Event(enable_timing=True)``)."""
    return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]


def current_stream(device: torch.device) -> Any:
    """The current CUDA stream of ``device``."""
    return torch.cuda.current_stream(device_index(device))


def spin() -> Any:
    """``torch.cuda._sleep`` (keeps the current stream busy for a number of GPU cycles) where
    this build has it, else ``None``."""
    return getattr(torch.cuda, "_sleep", None)


def device_context(device: torch.device | None) -> contextlib.AbstractContextManager[Any]:
    """Make ``device`` the current one inside the block (nothing to do off CUDA or for
    ``None``)."""
    if device is None or device.type != "cuda":
        return contextlib.nullcontext()
    return torch.cuda.device(device)


def properties(device: torch.device) -> Any:
    """The CUDA device properties of ``device`` (``name``, ``multi_processor_count``,
    ``clock_rate``...)."""
    return torch.cuda.get_device_properties(device_index(device))


def device_name(device: torch.device | None = None) -> str:
    """The name the device reports (``"NVIDIA H100 80GB HBM3"``); the processor's on the CPU.
    ``None``: the current CUDA device (``RuntimeError`` without CUDA)."""
    if device is None:
        if not cuda_available():
            raise RuntimeError("no device named and CUDA is not available")
        device = default_device()
    if device.type == "cuda":
        return str(properties(device).name)
    return "cpu"


def cuda_index() -> int | None:
    """The current CUDA device's index (``None`` without CUDA)."""
    return torch.cuda.current_device() if cuda_available() else None


def device_count() -> int:
    """CUDA devices visible to this process."""
    return torch.cuda.device_count()


def device_names() -> list[str]:
    """The name of every CUDA device of this process (empty without CUDA)."""
    if not cuda_available():
        return []
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


def clock_rate_mhz(device: torch.device) -> int:
    """The GPU's current clock (MHz; needs pynvml)."""
    return int(torch.cuda.clock_rate(device_index(device)))


def empty_cache() -> None:
    """Give the CUDA caching allocator's free blocks back (nothing off CUDA)."""
    if cuda_available():
        torch.cuda.empty_cache()


class AllocatorPeak:
    """The caching allocator's peak of allocated bytes on a CUDA ``device`` from now on.

    ``torch.cuda.max_memory_allocated`` is a host-side counter: reading it needs no
    synchronisation."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        self.baseline_bytes = int(torch.cuda.memory_allocated(device))
        self.peak = self.baseline_bytes

    def sample(self) -> bool:
        """Read the allocator's peak; whether it rose since the last sample."""
        peak = int(torch.cuda.max_memory_allocated(self.device))
        if peak > self.peak:
            self.peak = peak
            return True
        return False


def range_push(name: str) -> None:
    """Open an NVTX range ``name`` on this thread (Nsight Systems)."""
    torch.cuda.nvtx.range_push(name)


def range_pop() -> None:
    """Close the innermost NVTX range of this thread."""
    torch.cuda.nvtx.range_pop()

