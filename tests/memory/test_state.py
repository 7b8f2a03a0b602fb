"""The model is left exactly as it was: flags, hooks, attributes, parameters, buffers and every
parameter's ``.grad``, also when the forward, the loss or the backward raises."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import pytest
import torch
from torch import Tensor, nn

from moduleprofiler import ProfilingError
from moduleprofiler.memory import measure_memory
from tests.fixtures.state import assert_unchanged, snapshot


def _model() -> nn.Module:
    model = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.Dropout(0.5), nn.Linear(6, 3))
    model[0].requires_grad_(False)  # a frozen layer: stays frozen
    model[1].eval()  # a deliberately frozen BatchNorm inside a training model
    return model


def _with_grads(model: nn.Module, x: Tensor) -> dict[str, Tensor | None]:
    """Give the model existing gradients (one parameter keeps None)."""
    model(x).sum().backward()
    model[3].bias.grad = None
    return {name: p.grad for name, p in model.named_parameters()}


@pytest.mark.parametrize("device", [None, "meta"])
def test_training_pass_leaves_the_model_unchanged(device: str | None) -> None:
    model, x = _model(), torch.randn(5, 4)
    grads = _with_grads(model, x)
    before = snapshot(model)
    report = measure_memory(model, x, train=True, device=device)
    assert report.training is not None and report.training.grad_bytes
    assert_unchanged(model, before)
    for name, parameter in model.named_parameters():
        assert parameter.grad is grads[name]  # the very same tensors


def test_batchnorm_statistics_are_put_back() -> None:
    model, x = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6)), torch.randn(5, 4)
    before = snapshot(model)
    measure_memory(model, x, train=True)
    assert int(model[1].num_batches_tracked) == 0
    assert_unchanged(model, before)


class RaisesInTraining(nn.Linear):
    """A Linear whose forward raises in training mode."""

    def forward(self, x: Tensor) -> Tensor:
        if self.training:
            raise RuntimeError("bad forward")
        return super().forward(x)


class BackwardBoom(torch.autograd.Function):
    """Identity forward, raising backward."""

    @staticmethod
    def forward(ctx: Any, x: Tensor) -> Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tensor:
        raise RuntimeError("boom in backward")


def _boom_loss(output: Tensor) -> Tensor:
    return BackwardBoom.apply(output).sum()  # type: ignore[no-any-return]


def _bad_loss(output: Tensor) -> Tensor:
    raise ValueError("bad loss")


@pytest.mark.parametrize(("loss_fn", "message", "path"), [
    (None, "bad forward", "1"),
    (_bad_loss, "bad loss", None),
    (_boom_loss, "boom in backward", None),
])
def test_failures_name_the_place_and_leave_the_model_unchanged(
        loss_fn: Any, message: str, path: str | None) -> None:
    last = RaisesInTraining(3, 3) if loss_fn is None else nn.Linear(3, 3)
    model, x = nn.Sequential(nn.Linear(3, 3), last), torch.randn(2, 3)
    model.eval()
    model(x).sum().backward()  # existing grads
    model.train()
    before = snapshot(model)
    with pytest.raises(ProfilingError, match=message) as caught:
        measure_memory(model, x, train=True, loss_fn=loss_fn)
    assert caught.value.path == path
    assert caught.value.__cause__ is not None
    assert_unchanged(model, before)


def test_a_loss_that_needs_no_grad_is_refused() -> None:
    model = nn.Linear(3, 3).requires_grad_(False)
    before = snapshot(model)
    with pytest.raises(ProfilingError, match="requires grad"):
        measure_memory(model, torch.randn(2, 3), train=True)
    assert_unchanged(model, before)


def test_nothing_outlives_the_pass_without_the_garbage_collector() -> None:
    model, x = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)), torch.randn(3, 4)
    weight, data = weakref.ref(model[0].weight), weakref.ref(x)
    gc.disable()
    try:
        report = measure_memory(model, x, train=True, device="meta")
        report = measure_memory(model, x, train=True)
        del model, x
        assert weight() is None and data() is None
    finally:
        gc.enable()
    assert report.training is not None


def test_bad_arguments() -> None:
    with pytest.raises(TypeError, match=r"torch\.nn\.Module"):
        measure_memory(lambda x: x, torch.randn(2))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="emulate"):
        measure_memory(nn.Linear(2, 2), torch.randn(1, 2), emulate="tpu")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="device='meta'"):
        measure_memory(nn.Linear(2, 2), torch.randn(1, 2), emulate="cuda")


def test_the_callers_autocast_is_left_on_with_its_dtype() -> None:
    """The training pass runs its backward outside autocast (PyTorch's mixed-precision
    recipe): the caller's autocast block is on again, with its dtype, once the call returns,
    and its operators still run in that dtype."""
    model = _model()
    before = snapshot(model)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        report = measure_memory(model, torch.randn(8, 4), train=True)
        assert torch.is_autocast_enabled("cpu")
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16
        assert model[0](torch.randn(2, 4)).dtype == torch.bfloat16
    assert not torch.is_autocast_enabled("cpu")
    assert report.training is not None and report.training.peak_bytes > 0
    assert_unchanged(model, before)
