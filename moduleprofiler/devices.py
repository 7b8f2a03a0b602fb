"""What differs per device, in one place: which device a pass runs on, waiting for it, its
timing events and streams, its allocator's peak, named ranges for its tools, its name.

Every pass (timing, memory, efficiency, prediction) asks here instead of calling
``torch.cuda`` itself, so a new accelerator is one set of answers in this file. A device is
always checked by ``device.type``, never by equality with ``torch.device("cuda")``:
``cuda:0 != cuda``, the bug that made nnprofiler time GPUs with a CPU clock.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from moduleprofiler.errors import DeviceUnavailableError, MixedDeviceError
from moduleprofiler.shapes import iter_tensors

CPU = torch.device("cpu")


def cuda_available() -> bool:
    """Whether this process can use a CUDA device."""
    return torch.cuda.is_available()


def default_device() -> torch.device:
    """The current CUDA device where there is one, else the CPU."""
    return torch.device("cuda", torch.cuda.current_device()) if cuda_available() else CPU


def _where(module: nn.Module, input: Any) -> list[tuple[str, torch.device]]:
    """Where the model's first parameter (or buffer) and the first input tensor are; a model
    whose parameters an offloading hook keeps elsewhere runs where the hook puts them."""
    places = [("the model", tensor.device) for tensor in itertools.islice(
        itertools.chain(module.parameters(), module.buffers()), 1)]
    if places and places[0][1].type == "meta":
        runs_on = offloaded_to(module)
        if runs_on is not None:
            places[0] = ("the model", runs_on)
    places += [("input", tensor.device) for tensor in itertools.islice(iter_tensors(input), 1)]
    return places


def spanned_devices(module: nn.Module, device: torch.device) -> tuple[torch.device, ...]:
    """The devices of ``device``'s type that hold the model's parameters and buffers, in the
    order they are first met, when there are several (a model split over GPUs by hand or by
    ``device_map="auto"``), else ``()``."""
    held = dict.fromkeys(
        tensor.device for tensor in itertools.chain(module.parameters(), module.buffers())
        if tensor.device.type == device.type)
    return tuple(held) if len(held) > 1 else ()


def offloaded_to(module: nn.Module) -> torch.device | None:
    """The device on which accelerate's offloading hooks (``cpu_offload``, ``disk_offload``,
    ``dispatch_model`` with offloaded layers) run ``module``: they keep the parameters on the
    meta device and put the weights on their ``execution_device`` for each call; ``None``
    without such a hook."""
    for submodule in module.modules():
        hook = submodule.__dict__.get("_hf_hook")
        for part in getattr(hook, "hooks", None) or (hook,):
            device = getattr(part, "execution_device", None)
            if device is not None and getattr(part, "offload", False):
                return torch.device("cuda", device) if isinstance(device, int) \
                    else torch.device(device)
    return None


def as_device(value: str | torch.device | int, name: str = "device") -> torch.device:
    """``torch.device(value)``, or a ``ValueError`` naming the argument ``name`` where torch
    does not know the device (its own message names no argument)."""
    try:
        return torch.device(value)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"{name}={value!r} is not a device torch knows: {exc}") from exc


def unavailable(device: torch.device) -> str | None:
    """Why ``device`` cannot be used in this process (its backend reports no device, or fewer
    than its index needs), or ``None``: usable, or a backend torch has no module for
    (``xla`` before its package loads), which only trying tells."""
    if device.type in ("cpu", "meta"):
        return None
    try:
        backend = torch.get_device_module(device.type)
    except (RuntimeError, AttributeError):
        return None
    is_available = getattr(backend, "is_available", None)
    if is_available is None:
        return None
    if not is_available():
        return (f"no {device.type} device is available in this process "
                f"(torch.{device.type}.is_available() is False)")
    count = getattr(backend, "device_count", None)
    if device.index is not None and count is not None and device.index >= count():
        return (f"there is no {device}: this process sees {count()} {device.type} "
                f"device(s), {device.type}:0 to {device.type}:{count() - 1}")
    return None


def usable_device(value: str | torch.device | int, name: str = "device") -> torch.device:
    """:func:`as_device`, refused with a :class:`~moduleprofiler.errors.DeviceUnavailableError`
    naming the argument ``name`` where this process cannot use the device (:func:`unavailable`:
    the one rule of every pass and of the command line)."""
    device = as_device(value, name)
    reason = unavailable(device)
    if reason is not None:
        raise DeviceUnavailableError(f"{name}={str(value)!r}: {reason}")
    return device


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

    A bare ``"cuda"`` becomes the current CUDA device; a ``device`` this process cannot use
    is a :class:`~moduleprofiler.errors.DeviceUnavailableError` (:func:`usable_device`)."""
    if device is not None:
        resolved = usable_device(device)
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
    return torch.device("cuda", device_index(resolved)) if resolved.type == "cuda" else resolved


def timed_device(module: nn.Module, input: Any = None,
                 device: str | torch.device | None = None) -> torch.device:
    """:func:`resolve_device` for a pass that measures time; a model resolved to the CPU with
    parameters or buffers on a GPU as well (an embedding table kept in host memory) takes
    that GPU, whose clock times its kernels and, on the host, the CPU's part too: the CPU's
    clock would read only their launches.

    Raises:
        ValueError: the device is the meta device, where no kernel runs and nothing takes
            time (counts and memory plans run there; time does not).
    """
    resolved = resolve_device(module, input, device)
    if device is None and resolved.type == "cpu":
        gpu = next((tensor.device for tensor in itertools.chain(module.parameters(),
                                                                module.buffers())
                    if tensor.device.type == "cuda"), None)
        if gpu is not None:
            resolved = torch.device("cuda", device_index(gpu))
    if resolved.type == "meta":
        raise ValueError("device: the model or its input is on the meta device, where no "
                         "kernel runs, so there is no time to measure; time it on the CPU or "
                         "a GPU (predict() estimates a GPU's time from the meta device)")
    return resolved


def device_index(device: torch.device) -> int:
    """The CUDA index of ``device`` (a bare ``cuda`` is the current device)."""
    return device.index if device.index is not None else torch.cuda.current_device()


def cuda_index() -> int | None:
    """The current CUDA device's index (``None`` without CUDA)."""
    return torch.cuda.current_device() if cuda_available() else None


def synchronize(device: torch.device | None = None) -> None:
    """Wait for the work queued on ``device`` (nothing to wait for off CUDA); ``None``: the
    current CUDA device, once CUDA is initialised."""
    if device is None and cuda_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    elif device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def new_event() -> Any:
    """A CUDA event that records timing."""
    return torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]


def current_stream(device: torch.device) -> Any:
    """The current CUDA stream of ``device``."""
    return torch.cuda.current_stream(device_index(device))


def spin() -> Any:
    """``torch.cuda._sleep`` (busy the current stream for some GPU cycles), or ``None``."""
    return getattr(torch.cuda, "_sleep", None)


def device_context(device: torch.device | None) -> contextlib.AbstractContextManager[Any]:
    """``device`` current inside the block (nothing to do off CUDA or for ``None``)."""
    if device is None or device.type != "cuda":
        return contextlib.nullcontext()
    return torch.cuda.device(device)


def properties(device: torch.device) -> Any:
    """The CUDA properties of ``device`` (``name``, ``multi_processor_count``...)."""
    return torch.cuda.get_device_properties(device_index(device))


def device_name(device: torch.device | None = None) -> str:
    """The name the device reports (``"cpu"`` off CUDA); ``None``: the current CUDA device."""
    device = default_device() if device is None else device
    return str(properties(device).name) if device.type == "cuda" else "cpu"


def device_count() -> int:
    """CUDA devices visible to this process."""
    return torch.cuda.device_count()


def device_names() -> list[str]:
    """The name of every CUDA device of this process (empty without CUDA)."""
    return [torch.cuda.get_device_name(i) for i in range(device_count())] \
        if cuda_available() else []


def clock_rate_mhz(device: torch.device) -> int:
    """The GPU's current clock in MHz (needs pynvml)."""
    return int(torch.cuda.clock_rate(device_index(device)))


RngStates = tuple[torch.Tensor, list[torch.Tensor], Any]
"""The CPU generator's state, every CUDA device's and those of another accelerator
(:func:`rng_states`)."""


@functools.cache
def _other_accelerator() -> Any:
    """The device module (``torch.xpu``, ``torch.mps``...) of the process's accelerator when it
    is one other than CUDA and has generators, else ``None`` (looked up once: the build's
    accelerator does not change)."""
    try:
        kind = torch.accelerator.current_accelerator()
    except RuntimeError:  # a build that names no accelerator
        return None
    if kind is None or kind.type in ("cpu", "cuda"):
        return None
    module = getattr(torch, kind.type, None)
    has = (hasattr(module, "get_rng_state_all") and hasattr(module, "set_rng_state_all")) or (
        hasattr(module, "get_rng_state") and hasattr(module, "set_rng_state"))
    return module if has else None


def _accelerator_rng() -> Any:
    """The other accelerator's generator states (every device's where it has several), once
    it is in use (``is_initialized()`` where the backend says; reading them must not start
    it); ``None`` otherwise."""
    module = _other_accelerator()
    if module is None:
        return None
    available = getattr(module, "is_available", None)
    if available is not None and not available():
        return None
    initialised = getattr(module, "is_initialized", None)
    if initialised is not None and not initialised():
        return None
    if hasattr(module, "get_rng_state_all"):
        return ("all", module.get_rng_state_all())
    return ("one", module.get_rng_state())


def rng_states() -> RngStates:
    """The states of the random number generators a pass could draw from (a Dropout in
    training mode, sampling): the CPU's, once CUDA is initialised every CUDA device's, and
    those of another accelerator in use (XPU, MPS...): host-side copies of a few kilobytes, no
    synchronisation."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else []
    return torch.get_rng_state(), cuda, _accelerator_rng()


def set_rng_states(states: RngStates) -> None:
    """Put back what :func:`rng_states` read."""
    cpu, cuda, other = states
    torch.set_rng_state(cpu)
    if cuda:
        torch.cuda.set_rng_state_all(cuda)
    if other is not None:
        module = _other_accelerator()
        how, state = other
        if how == "all":
            module.set_rng_state_all(state)
        else:
            module.set_rng_state(state)


def empty_cache() -> None:
    """Give the CUDA caching allocator's free blocks back."""
    if cuda_available():
        torch.cuda.empty_cache()


class AllocatorPeak:
    """The caching allocator's peak of allocated bytes on CUDA ``device`` from now on (a
    host-side counter: reading it needs no synchronisation).

    The allocator keeps two counts. Allocated bytes (``torch.cuda.max_memory_allocated``,
    :attr:`peak`) count each tensor's whole block, and a request served from a cached block
    too large to split (less than 1 MiB over it) gets the whole block: the same step reads up
    to about 2 % more or less with what the cache held before it. Requested bytes
    (:meth:`requested_peak_bytes`) count what the tensors asked for: the same for the same
    step, whatever came before."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        self.peak = self.baseline_bytes = int(torch.cuda.memory_allocated(device))
        self.requested_baseline_bytes = _requested_bytes(device, "current")
        """Requested bytes live when the peak was reset (``None``: the allocator does not
        count them)."""

    def sample(self) -> bool:
        """Read the allocator's peak; whether it rose since the last sample."""
        peak = int(torch.cuda.max_memory_allocated(self.device))
        rose, self.peak = peak > self.peak, max(peak, self.peak)
        return rose

    def requested_peak_bytes(self) -> int | None:
        """The peak of requested bytes since the reset (``None``: not counted)."""
        if self.requested_baseline_bytes is None:
            return None
        return _requested_bytes(self.device, "peak")


def _requested_bytes(device: torch.device, which: str) -> int | None:
    """The allocator's ``requested_bytes.all.<which>``; ``None`` where it keeps no such count
    (another allocator backend reports none, or 0 while tensors are allocated)."""
    stats = torch.cuda.memory_stats(device)
    value = stats.get(f"requested_bytes.all.{which}")
    if value is None or (not value and stats.get(f"allocated_bytes.all.{which}")):
        return None
    return int(value)


def range_push(name: str) -> None:
    """Open an NVTX range ``name`` on this thread (Nsight Systems)."""
    torch.cuda.nvtx.range_push(name)


def range_pop() -> None:
    """Close this thread's innermost NVTX range."""
    torch.cuda.nvtx.range_pop()


FP32_SETTINGS = ("cuda.matmul", "cudnn.conv")
"""The fp32 precision settings of the kernels whose TF32 tensor cores moduleprofiler prices and
measures: cuBLAS matmuls and cuDNN convolutions."""


def _fp32_setting(setting: str) -> Any:
    """The object of ``torch.backends`` that holds ``setting``'s ``fp32_precision``
    (``"cuda.matmul"``: ``torch.backends.cuda.matmul``)."""
    backend, op = setting.split(".")
    return getattr(getattr(torch.backends, backend), op)


def fp32_precision(setting: str) -> str:
    """torch's effective fp32 precision of ``setting`` (one of :data:`FP32_SETTINGS`):
    ``"tf32"`` or ``"ieee"``. An unset (``"none"``) setting inherits its backend's, then
    torch's; unset everywhere is IEEE. Read through the per-backend API (``fp32_precision``),
    which the kernels read: the legacy getters (``torch.backends.cuda.matmul.allow_tf32``,
    ``torch.get_float32_matmul_precision()``) raise once that API was used."""
    backend_name, _ = setting.split(".")
    levels = (_fp32_setting(setting), getattr(torch.backends, backend_name), torch.backends)
    for level in levels:
        value = getattr(level, "fp32_precision", "none")
        if value != "none":
            return "tf32" if value == "tf32" else "ieee"
    return "ieee"


@contextlib.contextmanager
def tf32_math(enabled: bool) -> Iterator[None]:
    """Run the block with fp32 matmuls and convolutions on TF32 tensor cores (``enabled``) or
    in IEEE fp32, every precision setting reading back as it was afterwards.

    Set through the per-backend API only: the legacy setters
    (``torch.backends.cuda.matmul.allow_tf32 = ...``) also rewrite the matmul precision
    ``torch.set_float32_matmul_precision`` set ("medium" came back as "high", and
    ``torch.get_float32_matmul_precision()`` then raised), and the legacy getters raise once
    the per-backend API was used."""
    settings = [_fp32_setting(setting) for setting in FP32_SETTINGS]
    before = [setting.fp32_precision for setting in settings]
    for setting in settings:
        setting.fp32_precision = "tf32" if enabled else "ieee"
    try:
        yield
    finally:
        for setting, value in zip(settings, before, strict=True):
            setting.fp32_precision = value
