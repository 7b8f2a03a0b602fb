"""On CUDA (skipped without a GPU): the same totals as on the CPU, forward and backward,
whichever kernels cuDNN picks (the fused recurrent cells' backward: what their kernels run).
benchmarks/gpu_counts.py runs the larger models."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.parametrize("name", ["conv", "lstm", "encoder"])
def test_cuda_totals_equal_cpu_totals(name: str) -> None:
    builders = {
        "conv": lambda: (nn.Sequential(nn.Conv2d(3, 8, 3, groups=1), nn.BatchNorm2d(8),
                                       nn.ReLU(), nn.Conv2d(8, 8, 3, groups=8)),
                         torch.randn(2, 3, 16, 16)),
        "lstm": lambda: (nn.LSTM(8, 16, num_layers=2), torch.randn(5, 2, 8)),
        "encoder": lambda: (nn.TransformerEncoder(
            nn.TransformerEncoderLayer(32, 4, 64, batch_first=True), 1,
            enable_nested_tensor=False), torch.randn(2, 6, 32)),
    }
    model, x = builders[name]()
    model.eval()
    profiler = ModuleProfiler()
    cpu = profiler.profile(model, x, backward=True)
    model = model.cuda()
    cuda = profiler.profile(model, x.cuda(), backward=True)
    assert (cuda.total_ops, cuda.total_macs, cuda.total_backward_macs) == (
        cpu.total_ops, cpu.total_macs, cpu.total_backward_macs)
    assert cuda.complete
    # eval mode restored on the cuDNN RNN that had to run in training mode for its backward
    assert not any(m.training for m in model.modules())


def test_a_reentrant_checkpoints_backward_is_booked_per_module_on_cuda_as_on_the_cpu() -> None:
    """The graph a reentrant checkpoint rebuilds runs on the device's autograd thread, whose
    sequence numbers are not the forward's: it is booked to the same modules as on the CPU."""
    from tests.test_reruns import _Layer

    def profile(device: str, checkpointed: bool) -> dict[str, object]:
        torch.manual_seed(1)
        model = nn.Sequential(_Layer(checkpointed), _Layer(checkpointed), nn.Linear(8, 2))
        x = torch.randn(4, 8, requires_grad=True)
        found = ModuleProfiler().profile(model.to(device), x.detach().to(device)
                                         .requires_grad_(), backward=True)
        return {"own": {r.path: r.self_backward_ops for r in found.records},
                "outside": found.backward_outside_ops}

    for _ in range(3):  # later steps: the device thread's counter has moved on
        cuda = profile("cuda", True)
    assert cuda == profile("cpu", True)
    assert cuda["outside"] == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_training_steps_backward_is_known_module_by_module_on_cuda(dtype: torch.dtype
                                                                    ) -> None:
    # in training mode: cuDNN's batch norm backward, the fused attention backward kernels
    # and the layer norm's, none of which the CPU runs
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(1, 2),
        nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, dropout=0.0),
        nn.Linear(16, 4)).train()
    x = torch.randn(2, 3, 6, 18)  # 8 channels x 4 rows = 32 tokens of width 16
    profiler = ModuleProfiler()
    cpu = profiler.profile(model, x, backward=True)
    cuda = profiler.profile(model.cuda().to(dtype), x.cuda().to(dtype), backward=True)
    assert cuda.backward_unsupported_ops == {} and cuda.backward_complete
    assert cuda.to_df("module")["backward_complete"].all()
    if dtype == torch.float32:  # the same matrix work as on the CPU
        assert cuda.total_backward_macs == cpu.total_backward_macs


@pytest.mark.parametrize("cell", [nn.LSTMCell, nn.GRUCell])
def test_a_recurrent_cells_fused_backward_is_counted_on_cuda(cell: type) -> None:
    # CUDA runs the cell's gates as one fused kernel forward and backward; the CPU decomposes
    torch.manual_seed(0)
    model = cell(8, 16)
    x = torch.randn(4, 8)
    profiler = ModuleProfiler()
    cpu = profiler.profile(model, x, backward=True)
    cuda = profiler.profile(model.cuda(), x.cuda(), backward=True)
    assert cuda.backward_unsupported_ops == {} and cuda.backward_complete
    assert cuda.total_backward_macs == cpu.total_backward_macs
    # the fused kernel always computes the initial state's gradient (4 rows x 16 = 64
    # multiplies) which the decomposed cell skips (the zero state needs none); the LSTM's
    # kernel sums the 4 x 16 = 64 gate gradients over the 4 rows once for both biases
    # ((4 - 1) x 64 = 192 adds), the decomposed cell once per bias
    extra = 64 - (192 if cell is nn.LSTMCell else 0)
    assert cuda.total_backward_ops == cpu.total_backward_ops + extra
