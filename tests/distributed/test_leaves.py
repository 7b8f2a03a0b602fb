"""A profiled DDP backward is a real ``loss.backward()`` (its gradient all-reduce runs only
then): it must leave every ``.grad`` as it found it, the input's included."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from moduleprofiler import ModuleProfiler


def test_a_ddp_backward_leaves_the_inputs_and_parameters_grads_alone() -> None:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = DistributedDataParallel(nn.Linear(3, 2))
        x = torch.randn(4, 3, requires_grad=True)
        x.grad = torch.ones(4, 3)
        model.module.bias.grad = torch.full((2,), 7.0)
        profile = ModuleProfiler().profile(model, x, backward=True)
        # the backward ran: the weight gradient 4 x 2 x 3 = 24 MACs plus the input's (it
        # requires grad) 4 x 3 x 2 = 24
        assert profile.calls("module")[0].self_backward_macs == 48
        assert torch.equal(x.grad, torch.ones(4, 3))
        assert torch.equal(model.module.bias.grad, torch.full((2,), 7.0))
        assert model.module.weight.grad is None
    finally:
        dist.destroy_process_group()
