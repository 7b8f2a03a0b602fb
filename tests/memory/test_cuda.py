"""On CUDA the peak comes from the caching allocator (skipped without a GPU)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from moduleprofiler.memory import measure_memory
from tests.fixtures.state import assert_unchanged, snapshot

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_allocator_peak_and_operator_prediction_agree() -> None:
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256)).cuda()
    x = torch.randn(512, 256, device="cuda")
    model(x).sum().backward()  # the first matmul allocates cuBLAS's workspace: not in the pass
    model.zero_grad(set_to_none=True)
    before = snapshot(model)
    report = measure_memory(model, x, train=True)
    assert_unchanged(model, before)
    training = report.training
    assert training is not None and training.method == "allocator"
    assert training.peak_call is not None
    # The allocator rounds every block up to 512 bytes.
    assert training.operator_peak_bytes <= training.peak_bytes
    assert training.increase_bytes == pytest.approx(
        training.operator_peak_bytes - training.operator_baseline_bytes, rel=0.05)


def test_a_cpu_model_measured_on_cuda_is_left_on_the_cpu() -> None:
    model = nn.Linear(64, 64)
    before = snapshot(model)
    report = measure_memory(model, torch.randn(8, 64), train=True, device="cuda")
    assert report.device.startswith("cuda")
    assert model.weight.device.type == "cpu"
    assert_unchanged(model, before)


def _squares(output: torch.Tensor) -> torch.Tensor:
    return output.float().pow(2).mean()


def test_a_training_pass_under_autocast_measures_one_step_of_the_recipe() -> None:
    """Under bf16 autocast the training pass's increase is the allocator's for one step of
    PyTorch's mixed-precision recipe (forward and loss under autocast, the backward outside
    it): not less by the weight copies the inference pass left in autocast's cache, nor more
    by copies the cache would hold through the backward."""
    model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024)).cuda()
    # activations (4096 x 1024 in bf16: 8 MiB each) large enough for the step's peak to come
    # while the weight copies are alive (saved for the backward)
    x = torch.randn(4096, 1024, device="cuda")

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = _squares(model(x))
        loss.backward()

    step()  # cuBLAS's workspace is allocated once, outside what is compared
    model.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    truth = torch.cuda.max_memory_allocated() - base
    model.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        report = measure_memory(model, x, train=True, loss_fn=_squares, keep_output=False)
    training = report.training
    assert training is not None and training.method == "allocator"
    # the bf16 copies of the weights (1024 x 1024 x 2 bytes = 2 MiB each) are part of the
    # step: the inference pass's copies, still cached and counted as baseline, left the
    # increase 2 MiB short (100,664,320 against 102,761,472 bytes on an H200)
    assert training.increase_bytes == pytest.approx(truth, rel=0.01)


def test_requested_bytes_of_a_training_pass_are_those_of_a_bare_step() -> None:
    """The allocator's allocated bytes of one step depend on what its cache held before (a
    request served from a cached block too large to split counts the whole block); its
    requested bytes do not: the training pass's equal a bare step's, however the cache was
    left."""
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256)).cuda()
    x = torch.randn(512, 256, device="cuda")

    def bare_step() -> int:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        requested = torch.cuda.memory_stats()["requested_bytes.all.current"]
        output = model(x)
        _squares(output).backward()
        del output
        torch.cuda.synchronize()
        increase = torch.cuda.memory_stats()["requested_bytes.all.peak"] - requested
        model.zero_grad(set_to_none=True)
        return int(increase)

    bare_step()  # cuBLAS's workspace is allocated once, outside what is compared
    truth = bare_step()
    # blocks of odd sizes freed into the cache: the pass's requests may land in larger ones
    scraps = [torch.empty(size, dtype=torch.uint8, device="cuda")
              for size in (1_600_000, 2_700_000, 600_000)]
    del scraps
    training = measure_memory(model, x, train=True, loss_fn=_squares).training
    assert training is not None and training.requested_increase_bytes is not None
    assert training.requested_increase_bytes == truth
    # the allocator's blocks are at least what was asked for
    assert training.requested_peak_bytes is not None
    assert training.requested_increase_bytes <= training.increase_bytes


def test_operator_accounting_predicts_the_requested_bytes_of_a_step() -> None:
    """The operator accounting counts each storage's own bytes, as the allocator's requested
    bytes do: on a model whose every allocation is an aten operator's output (no library
    workspace inside the step) the two increases are equal to the byte."""
    model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256)).cuda()
    x = torch.randn(512, 256, device="cuda")
    model(x).sum().backward()  # cuBLAS's workspace is allocated once, outside the pass
    model.zero_grad(set_to_none=True)
    training = measure_memory(model, x, train=True, loss_fn=_squares).training
    assert training is not None and training.requested_increase_bytes is not None
    assert training.requested_increase_bytes == (
        training.operator_peak_bytes - training.operator_baseline_bytes)


class _SideStreamMatmul(nn.Module):
    """A matmul on a stream of its own, made with the module: cuBLAS allocates a workspace
    for it on its first matmul there, whatever ran before in the process."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(1024, 1024, device="cuda"))
        self.stream = torch.cuda.Stream()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            y = x @ self.weight
        torch.cuda.current_stream().wait_stream(self.stream)
        return y


def test_the_first_measurement_reads_the_steady_state_of_later_steps() -> None:
    """A library's one-time allocation (cuBLAS's workspace for a new stream) falls outside the
    measured passes: the first measurement reads the inference increase of a bare forward run
    after a warm-up, as the second measurement does."""
    model = _SideStreamMatmul()
    x = torch.randn(256, 1024, device="cuda")
    first = measure_memory(model, x).inference
    second = measure_memory(model, x).inference
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    with torch.no_grad():
        model(x)
    torch.cuda.synchronize()
    bare = torch.cuda.max_memory_allocated() - base
    # the one output, 256 x 1024 float32 = 1 MiB (the workspace, tens of MiB, is not in it)
    assert first.requested_increase_bytes == second.requested_increase_bytes == 256 * 1024 * 4
    assert first.increase_bytes == second.increase_bytes == bare
