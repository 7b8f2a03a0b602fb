"""One rule for the device a pass runs on, for every pass; the devices module's answers on the
CPU. (The CUDA answers run where there is a GPU, in the last tests.)"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from moduleprofiler import Profiler, TimingOptions, devices
from moduleprofiler.devices import resolve_device
from moduleprofiler.errors import DeviceUnavailableError, MixedDeviceError
from moduleprofiler.state import preserved_state

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


class _Free(nn.Module):
    """No parameter or buffer: only the input says where it runs."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def test_the_model_and_its_input_agreeing_give_their_device() -> None:
    assert resolve_device(nn.Linear(2, 2), torch.zeros(1, 2)) == torch.device("cpu")
    assert resolve_device(nn.Linear(2, 2)) == torch.device("cpu")  # no input: the model's
    assert resolve_device(_Free(), torch.zeros(1)) == torch.device("cpu")  # no tensor of its own
    assert resolve_device(_Free()) == torch.device("cpu")  # nothing at all


def test_a_buffer_says_where_a_model_without_parameters_is() -> None:
    model = nn.BatchNorm1d(2, affine=False).to("meta")  # buffers only, on meta
    assert resolve_device(model, None) == torch.device("meta")


def test_meta_anywhere_is_a_plan() -> None:
    # a meta input plans a CPU model; a meta model plans with CPU inputs (the pass moves
    # the rest there)
    assert resolve_device(nn.Linear(2, 2), torch.zeros(1, 2, device="meta")).type == "meta"
    assert resolve_device(nn.Linear(2, 2).to("meta"), torch.zeros(1, 2)).type == "meta"


def test_devices_of_two_types_are_a_typed_error_naming_both(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the CPU cannot hold a CUDA tensor: the walk that finds where the model and the input
    # are is replaced, the rule is the real one (the GPU test below calls it on real tensors)
    places = [("the model", torch.device("cpu")), ("input", torch.device("cuda", 0))]
    monkeypatch.setattr(devices, "_where", lambda module, input: places)
    with pytest.raises(MixedDeviceError, match=r"the model is on cpu but input is on cuda:0"):
        resolve_device(nn.Linear(2, 2), torch.zeros(1, 2))
    assert issubclass(MixedDeviceError, ValueError)


def test_an_explicit_device_wins_and_cuda_without_cuda_says_so() -> None:
    assert resolve_device(nn.Linear(2, 2), torch.zeros(1, 2), "meta") == torch.device("meta")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="is_available"):
            resolve_device(nn.Linear(2, 2), None, "cuda")


def test_synchronize_and_the_cache_are_no_ops_off_cuda() -> None:
    devices.synchronize(torch.device("cpu"))
    devices.synchronize(torch.device("meta"))
    with devices.device_context(torch.device("cpu")), devices.device_context(None):
        pass
    assert devices.device_name(torch.device("cpu")) == "cpu"


@needs_cuda
def test_model_and_input_on_cuda_resolve_to_the_current_index() -> None:
    model = nn.Linear(2, 2).cuda()
    assert resolve_device(model, torch.zeros(1, 2, device="cuda")) == torch.device(
        "cuda", torch.cuda.current_device())
    assert resolve_device(_Free(), torch.zeros(1, device="cuda")).type == "cuda"


@needs_cuda
def test_a_cuda_model_with_a_cpu_input_is_mixed() -> None:
    with pytest.raises(MixedDeviceError, match="the model is on cuda"):
        resolve_device(nn.Linear(2, 2).cuda(), torch.zeros(1, 2))


@needs_cuda
def test_the_allocator_peak_counts_a_new_tensor() -> None:
    device = torch.device("cuda", torch.cuda.current_device())
    peak = devices.AllocatorPeak(device)
    block = torch.empty(1 << 20, dtype=torch.uint8, device=device)  # 1 MiB
    assert peak.sample() and peak.peak - peak.baseline_bytes >= 1 << 20
    del block


class _CpuTableGpuHead(nn.Module):
    """An embedding table kept in host memory, a head on the GPU (as recommenders do)."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Embedding(100, 16)
        self.head = nn.Linear(16, 4).cuda()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.table(ids).cuda())


@needs_cuda
def test_a_model_partly_on_a_gpu_is_timed_with_the_gpus_clock() -> None:
    """The CPU clock would read only the head's launch, not its kernels."""
    model = _CpuTableGpuHead()
    ids = torch.randint(0, 100, (8, 3))
    assert resolve_device(model, ids).type == "cpu"  # counting and memory run as placed
    assert devices.timed_device(model, ids) == torch.device("cuda", torch.cuda.current_device())
    assert devices.timed_device(model, ids, "cpu").type == "cpu"  # asked for: as asked
    timing = Profiler().time_modules(model, ids, TimingOptions(num_iters=4, drop_first=1))
    assert timing.clock == "cuda-kernels"
    head = timing.module_columns()["head"]
    assert head["device_ms"] > 0 and head["self_device_ms"] > 0  # the Linear's GEMM ran


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_allocator_peak_reads_requested_and_allocated_bytes_apart() -> None:
    device = torch.device("cuda")
    peak = devices.AllocatorPeak(device)
    small = torch.empty(1001, dtype=torch.uint8, device=device)
    assert peak.sample()
    # asked for 1,001 bytes; the allocator hands out blocks of whole 512-byte units:
    # 2 x 512 = 1,024
    assert peak.peak - peak.baseline_bytes == 1024
    requested = peak.requested_peak_bytes()
    assert peak.requested_baseline_bytes is not None and requested is not None
    assert requested - peak.requested_baseline_bytes == 1001
    del small


@pytest.mark.parametrize(("stats", "expected"), [
    ({"requested_bytes.all.peak": 1001, "allocated_bytes.all.peak": 1536}, 1001),
    # another allocator backend: no such count, or a zero count while tensors are allocated
    ({"allocated_bytes.all.peak": 1536}, None),
    ({"requested_bytes.all.peak": 0, "allocated_bytes.all.peak": 1536}, None),
    # nothing allocated at all: a true zero
    ({"requested_bytes.all.peak": 0, "allocated_bytes.all.peak": 0}, 0),
])
def test_requested_bytes_are_unknown_where_the_allocator_does_not_count_them(
        monkeypatch: pytest.MonkeyPatch, stats: dict[str, int], expected: int | None) -> None:
    monkeypatch.setattr(torch.cuda, "memory_stats", lambda device=None: stats)
    assert devices._requested_bytes(torch.device("cuda"), "peak") == expected


@pytest.mark.parametrize("run", ["time_modules", "train_step_times", "benchmark"])
def test_a_pass_that_measures_time_refuses_the_meta_device(run: str) -> None:
    from moduleprofiler import Profiler

    model = nn.Linear(4, 4, device="meta")
    with pytest.raises(ValueError, match="meta device, where no kernel runs"):
        getattr(Profiler(), run)(model, torch.randn(2, 4, device="meta"))
    assert not model._forward_hooks and not model._forward_pre_hooks
    # counting still runs there: 2 x 4 outputs x 4 = 32 MACs
    assert Profiler().profile(model, torch.randn(2, 4, device="meta")).total_macs == 32


def test_a_model_offloaded_by_accelerate_runs_where_its_hooks_put_the_weights() -> None:
    accelerate = pytest.importorskip("accelerate")
    from moduleprofiler import Profiler, TimingOptions

    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    accelerate.cpu_offload(model, execution_device=torch.device("cpu"))
    x = torch.randn(2, 8)
    # the parameters wait on the meta device; the hooks put the weights on the CPU per call
    assert next(model.parameters()).device.type == "meta"
    assert resolve_device(model, x) == torch.device("cpu")
    profiler = Profiler()
    timing = profiler.time_modules(model, x, TimingOptions(max_seconds=0.2))
    assert timing.device == "cpu" and timing.samples("0").size > 0
    memory = profiler.measure_memory(model, x)
    assert memory.device == "cpu"
    # the user's offloaded model as it was: weights still waiting on meta, and it still runs
    assert next(model.parameters()).device.type == "meta"
    assert model(x).shape == (2, 4)


class _Backend:
    """An accelerator backend as torch's device modules expose its generators (``torch.xpu``:
    one state per device, ``get_rng_state_all``), its generator a CPU one here: the draws of a
    pass on such a device."""

    def __init__(self, initialised: bool = True) -> None:
        self.generator = torch.Generator().manual_seed(7)
        self.initialised = initialised

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return self.initialised

    def get_rng_state_all(self) -> list[torch.Tensor]:
        return [self.generator.get_state()]

    def set_rng_state_all(self, states: list[torch.Tensor]) -> None:
        self.generator.set_state(states[0])


def test_another_accelerators_generators_are_put_back(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = _Backend()
    monkeypatch.setattr(devices, "_other_accelerator", lambda: backend)
    expected = torch.rand(3, generator=torch.Generator().manual_seed(7))
    model = nn.Sequential(nn.Linear(2, 2))
    with preserved_state(model):
        torch.rand(5, generator=backend.generator)  # the pass draws on the device
    # put back: the next draws are the first ones after the seed
    assert torch.equal(torch.rand(3, generator=backend.generator), expected)


def test_an_accelerator_not_started_is_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = _Backend(initialised=False)
    monkeypatch.setattr(devices, "_other_accelerator", lambda: backend)
    assert devices.rng_states()[2] is None  # reading it would start the device


def test_this_build_names_no_other_accelerator() -> None:
    # a CPU build, or one with CUDA: CUDA's generators are read separately
    assert devices._other_accelerator() is None


def test_a_device_this_process_lacks_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    assert devices.unavailable(torch.device("cpu")) is None
    assert devices.unavailable(torch.device("meta")) is None
    monkeypatch.setattr(torch.mps, "is_available", lambda: False)
    assert devices.unavailable(torch.device("mps")) == (
        "no mps device is available in this process (torch.mps.is_available() is False)")
    # two CUDA devices: cuda:1 is the last one, cuda:2 none
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert devices.unavailable(torch.device("cuda:1")) is None
    assert devices.unavailable(torch.device("cuda")) is None
    assert devices.unavailable(torch.device("cuda:2")) == (
        "there is no cuda:2: this process sees 2 cuda device(s), cuda:0 to cuda:1")
    # no module registered for the type (xla before torch_xla loads): only trying tells
    assert devices.unavailable(torch.device("xla")) is None


@pytest.mark.parametrize(("device", "gpus", "said"), [
    ("cuda", 0, "device='cuda': no cuda device is available in this process "
                "(torch.cuda.is_available() is False)"),
    ("cuda:7", 1, "device='cuda:7': there is no cuda:7: this process sees 1 cuda device(s), "
                  "cuda:0 to cuda:0"),
    ("mps", 0, "device='mps': no mps device is available in this process "
               "(torch.mps.is_available() is False)"),
])
def test_a_device_this_process_lacks_is_refused_naming_the_argument(
        monkeypatch: pytest.MonkeyPatch, device: str, gpus: int, said: str) -> None:
    # the one rule (devices.unavailable) for every pass: resolve_device checked CUDA alone,
    # so cuda:7 on a one-GPU machine went to the GPU and "mps" timed on the CPU's clock
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(torch.mps, "is_available", lambda: False)
    for measure in (Profiler().benchmark, Profiler().time_modules, Profiler().measure_memory):
        with pytest.raises(DeviceUnavailableError) as raised:
            measure(nn.Linear(2, 2), torch.zeros(1, 2), device=device)
        assert str(raised.value) == said
    assert issubclass(DeviceUnavailableError, RuntimeError)  # what it raised before
