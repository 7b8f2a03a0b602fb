"""Module calls inside ``torch.vmap``: a formula prices the one example the module sees, and the
count is multiplied by the sizes vmap maps over, so totals are the work that ran (the aten
operators FlopCounterMode sees run once, on the whole batch)."""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.func import functional_call, grad, stack_module_state, vmap
from torch.utils.flop_counter import FlopCounterMode

from moduleprofiler import ModuleProfiler
from moduleprofiler.vmapped import vmap_factor


def mlp() -> nn.Sequential:
    return nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 2))


def fcm_flops(fn) -> int:  # type: ignore[no-untyped-def]
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        fn()
    return int(counter.get_total_flops())


def test_a_vmapped_model_counts_every_example() -> None:
    model, x = mlp(), torch.randn(5, 3, 4)
    profile = ModuleProfiler().profile(model, pred_fn=lambda: vmap(model)(x))
    # 5 mapped examples of 3 rows: 5 * 3 * (4 * 8) = 480 and 5 * 3 * (8 * 2) = 240 MACs
    assert [r.self_macs for r in profile.records] == [0, 480, 0, 240]
    assert profile.total_macs == 720 and profile.complete
    # the shapes stay those the module sees: one example
    assert profile.records[1].input_shapes == ((3, 4),)
    assert profile.total_flops == fcm_flops(lambda: vmap(model)(x)) == 1440


def test_nested_vmaps_multiply() -> None:
    model, x = mlp(), torch.randn(5, 3, 4)
    profile = ModuleProfiler().profile(model, pred_fn=lambda: vmap(vmap(model))(x))
    # 5 * 3 examples of one row: 15 * (32 + 16) = 720 MACs
    assert profile.total_macs == 720
    assert profile.total_flops == fcm_flops(lambda: vmap(vmap(model))(x))


def test_an_ensemble_with_stacked_weights_counts_every_member() -> None:
    model = mlp()
    params, buffers = stack_module_state([copy.deepcopy(model) for _ in range(3)])
    x = torch.randn(6, 4)

    def ensemble() -> torch.Tensor:
        return vmap(lambda p, b, x: functional_call(model, (p, b), (x,)),  # type: ignore[no-any-return]
                    in_dims=(0, 0, None))(params, buffers, x)

    profile = ModuleProfiler().profile(model, pred_fn=ensemble)
    # the input is shared, the weights are mapped: 3 members * 6 rows * 48 = 864 MACs
    assert profile.total_macs == 864
    assert profile.total_flops == fcm_flops(ensemble)


def test_per_sample_gradients_match_flop_counter_mode() -> None:
    model = mlp()
    params = {name: p.detach() for name, p in model.named_parameters()}

    def loss(p: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return ((functional_call(model, p, (x.unsqueeze(0),)) - y) ** 2).sum()

    def per_sample() -> object:
        return vmap(grad(loss), in_dims=(None, 0, 0))(params, torch.randn(7, 4), torch.randn(7, 2))

    profile = ModuleProfiler().profile(model, pred_fn=per_sample)
    # the forward inside grad is vmapped over 7 samples: 7 * 48 = 336 MACs in the modules
    assert sum(r.self_macs for r in profile.records) == 336
    assert profile.total_flops == fcm_flops(per_sample) == 1568


def test_vmap_factor_outside_and_inside() -> None:
    assert vmap_factor(torch.randn(3)) == 1
    seen: list[int] = []

    def record(x: torch.Tensor) -> torch.Tensor:
        seen.append(vmap_factor((None, x)))  # the first tensor in the output tree
        return x

    vmap(vmap(record))(torch.randn(5, 3, 2))
    vmap(grad(lambda x: record(x).sum()))(torch.randn(4, 2))  # grad levels batch nothing
    assert seen == [15, 4]


def test_a_vmapped_call_allocates_the_whole_batch() -> None:
    model = nn.Sequential(nn.Identity(), nn.Linear(4, 3))
    x = torch.randn(5, 2, 4)
    profile = ModuleProfiler().profile(model, pred_fn=lambda: vmap(model)(x))
    frame = profile.to_df().set_index("module")
    # the Linear's output under vmap over 5: 5 * 2 * 3 float32 values = 120 bytes, allocated
    # once for the batch (one example's 24 bytes before); the Identity returns its input's
    # storage: nothing new
    assert frame.loc["1", "output_bytes"] == 5 * 2 * 3 * 4
    assert frame.loc["0", "output_bytes"] == 0
