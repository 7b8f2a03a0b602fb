"""Backward operator counts attributed to the module call whose forward created the work."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from moduleprofiler import LossError, ModuleProfiler, ProfilingError
from tests.fixtures.state import assert_unchanged, snapshot


def fcm_backward_flops(model: nn.Module, x: torch.Tensor) -> int:
    loss = model(x).sum()
    with FlopCounterMode(display=False) as counter:
        torch.autograd.grad(loss, [p for p in model.parameters() if p.requires_grad])
    return int(counter.get_total_flops())


def test_linear_chain_backward_macs_per_module() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(inplace=True), nn.Linear(16, 4))
    profile = ModuleProfiler().profile(model, torch.randn(2, 8), backward=True)
    macs = {r.path: r.self_backward_macs for r in profile.records}
    # first layer: its input needs no grad, so only grad_weight: 2 * 8 * 16 = 256
    # last layer: grad_input 2 * 4 * 16 = 128 plus grad_weight 128 = 256
    assert macs == {"": 0, "0": 256, "1": 0, "2": 256}
    assert 2 * profile.total_backward_macs == fcm_backward_flops(model, torch.randn(2, 8))


def test_a_linear_layer_on_nested_rows_counts_its_backward_as_on_dense_rows() -> None:
    # a nested (jagged) input's F.linear differentiates in one aten.linear_backward
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 4))
    nested = torch.nested.nested_tensor([torch.randn(3, 8), torch.randn(5, 8)],
                                        layout=torch.jagged)
    profile = ModuleProfiler().profile(model, nested, backward=True)
    # 3 + 5 = 8 rows, the input needs no grad: grad_weight 4 x 8 dot products of length 8,
    # 32 x (2 * 8 - 1) = 480 ops and 8 x 8 x 4 = 256 macs; grad_bias 4 sums of 8 rows, 28
    assert (profile.records[1].self_backward_ops, profile.records[1].self_backward_macs) == (
        480 + 28, 256)
    assert profile.backward_complete
    dense = ModuleProfiler().profile(model, torch.randn(8, 8), backward=True)
    assert (dense.records[1].self_backward_ops, dense.records[1].self_backward_macs) == (
        480 + 28, 256)


def test_reused_module_gets_backward_of_every_call() -> None:
    lin = nn.Linear(4, 4, bias=False)
    model = nn.Sequential(lin, nn.Tanh(), lin)
    profile = ModuleProfiler().profile(model, torch.randn(3, 4), backward=True)
    first, second = profile.calls("0")
    # 3 rows x 4 x 4 = 48 macs per matmul; the first call needs grad_weight only (48), the
    # second grad_input and grad_weight (96)
    assert (first.self_backward_macs, second.self_backward_macs) == (48, 96)


def test_backward_leaves_grads_and_flags_untouched() -> None:
    model = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 1)).train()
    for parameter in model.parameters():
        parameter.grad = torch.full_like(parameter, 2.0)
    before = snapshot(model)
    ModuleProfiler().profile(model, torch.randn(5, 3), backward=True)
    assert_unchanged(model, before)


def test_no_backward_means_none() -> None:
    profile = ModuleProfiler().profile(nn.Linear(2, 2), torch.randn(1, 2))
    assert profile.total_backward_macs is None
    assert profile.records[0].self_backward_ops is None


def test_dense_conv_backward_matches_flopcountermode() -> None:
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 4, 3, bias=False))
    x = torch.randn(2, 3, 10, 10)
    profile = ModuleProfiler().profile(model, x, backward=True)
    # conv0: 2*8*8*8 outputs x 27 = 27648 macs, weight grad only (input needs no grad)
    # conv2: 2*4*6*6 outputs x 72 = 20736 macs, input and weight grads: 41472
    assert [r.self_backward_macs for r in profile.records
            if r.type_name == "Conv2d"] == [27648, 41472]
    assert 2 * profile.total_backward_macs == fcm_backward_flops(model, x)


def test_depthwise_conv_backward_is_twice_its_forward() -> None:
    # FlopCounterMode counts the weight gradient of a depthwise conv `groups` times too much
    depthwise = nn.Conv2d(16, 16, 3, groups=16, bias=False)
    model = nn.Sequential(nn.Conv2d(3, 16, 1, bias=False), depthwise)
    profile = ModuleProfiler().profile(model, torch.randn(1, 3, 8, 8), backward=True)
    record = profile.calls("1")[0]
    # forward: 16 channels * 6 * 6 outputs * 9 taps = 5184 macs; backward input + weight
    assert record.self_macs == 5184
    assert record.self_backward_macs == 2 * 5184
    assert fcm_backward_flops(model, torch.randn(1, 3, 8, 8)) > 2 * profile.total_backward_macs


def test_inplace_activation_backward_is_attributed_to_it() -> None:
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(inplace=True), nn.Linear(6, 1))
    profile = ModuleProfiler().profile(model, torch.randn(5, 4), backward=True)
    relu = profile.calls("1")[0]
    # threshold_backward: one op per element of the 5 x 6 gradient
    assert (relu.self_backward_ops, relu.self_backward_macs) == (30, 0)
    assert profile.complete


def test_bilinear_upsampling_backward_is_counted() -> None:
    model = nn.Sequential(nn.Conv2d(2, 2, 1), nn.Upsample(scale_factor=2, mode="bilinear"))
    profile = ModuleProfiler().profile(model, torch.randn(1, 2, 4, 4), backward=True)
    up = profile.calls("1")[0]
    # each of the 2 * 8 * 8 = 128 output gradients is spread over 4 taps: 8 ops -> 1024
    assert up.self_backward_ops == 1024
    assert profile.complete


class Normal(nn.Module):
    """Returns a ``torch.distributions`` object: no tensor the default loss can reach."""

    def __init__(self) -> None:
        super().__init__()
        self.loc = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> torch.distributions.Normal:
        return torch.distributions.Normal(self.loc(x), 1.0)


class Boxed(nn.Module):
    """Returns its tensor inside a plain object."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> object:
        box = type("Box", (), {})()
        box.value = self.lin(x)
        return box


class ReturnsNone(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor) -> None:
        self.lin(x)


@pytest.mark.parametrize("factory", [Normal, Boxed, ReturnsNone])
def test_an_output_the_default_loss_cannot_reach_asks_for_loss_fn(factory: type) -> None:
    model = factory().train()
    for parameter in model.parameters():
        parameter.grad = torch.ones_like(parameter)
    before = snapshot(model)
    # before: 0 backward MACs and complete=True; now a clear error, nothing reported
    with pytest.raises(LossError, match=r"cannot derive a loss from the model's output .*"
                                        r"pass loss_fn=") as info:
        ModuleProfiler().profile(model, torch.randn(4, 3), backward=True)
    assert isinstance(info.value, TypeError)  # LossError is a ProfilingError and a TypeError
    assert_unchanged(model, before)


def test_loss_fn_reaches_what_the_default_loss_cannot() -> None:
    profile = ModuleProfiler().profile(Normal(), torch.randn(4, 3), backward=True,
                                       loss_fn=lambda normal: normal.mean.sum())
    # grad_weight of loc: (2 x 4) @ (4 x 3): 2 * 3 * 4 = 24 MACs, 2 * 3 * (2 * 4 - 1) = 42 ops;
    # grad_bias: 2 sums of 4 rows, 2 * 3 = 6 adds: 48 ops
    assert (profile.total_backward_macs, profile.total_backward_ops) == (24, 48)
    assert profile.backward_complete is True and profile.complete


def test_a_backward_operator_without_formula_makes_only_backward_a_lower_bound() -> None:
    profiler = ModuleProfiler()
    for key in [k for k in profiler.operator_fn_map
                if getattr(k, "overloadpacket", k) is torch.ops.aten.sum]:
        del profiler.operator_fn_map[key]
    profile = profiler.profile(nn.Linear(3, 2), torch.randn(4, 3), backward=True)
    # the bias gradient's sum is unknown: 42 ops of grad_weight are counted, the 6 adds not
    assert profile.total_backward_ops == 42
    assert profile.backward_complete is False and profile.ops_complete
    assert profile.lower_bounds == ("backward",) and not profile.complete
    assert ("note: backward operators without a formula: aten.sum x1; backward totals are "
            "lower bounds") in profile.tree().to_text(width=0)


def test_a_loss_fn_that_returns_no_tensor_is_a_loss_error() -> None:
    with pytest.raises(LossError, match="loss_fn returned float"):
        ModuleProfiler().profile(nn.Linear(2, 1), torch.randn(3, 2), backward=True,
                                 loss_fn=lambda output: 1.0)


class _Windows(nn.Module):
    """``(x * w).unfold(1, size, step).sum()`` over 10 columns."""

    def __init__(self, size: int, step: int) -> None:
        super().__init__()
        self.size, self.step = size, step
        self.w = nn.Parameter(torch.ones(10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x * self.w).unfold(1, self.size, self.step).sum()


@pytest.mark.parametrize(("size", "step", "overlap_adds"), [
    (4, 2, 2 * (4 * 4 - 10)),  # 4 windows of 4 cover the 10 columns: 6 adds per row
    (3, 1, 2 * (8 * 3 - 10)),  # 8 windows of 3: 14 adds per row
    (4, 4, 0),  # 2 windows side by side (columns 8, 9 uncovered): nothing overlaps
    (2, 3, 0),  # gaps between windows
])
def test_unfold_backward_counts_the_overlap_adds(size: int, step: int, overlap_adds: int) -> None:
    profile = ModuleProfiler().profile(_Windows(size, step), torch.randn(2, 10), backward=True)
    # besides the overlap-add: w's gradient, 2 x 10 products and 10 adds over the batch
    assert profile.total_backward_ops == 2 * 10 + 10 + overlap_adds
    assert profile.backward_complete


class _PaddedConv(nn.Module):
    """A reflection- or replication-padded 1 x 1 convolution (TResNet's anti-aliasing blocks
    pad by reflection before a depthwise blur)."""

    def __init__(self, pad: nn.Module) -> None:
        super().__init__()
        self.conv, self.pad = nn.Conv2d(3, 3, 1, bias=False), pad

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pad(self.conv(x)).sum()


@pytest.mark.parametrize("pad", [nn.ReflectionPad2d((1, 2, 2, 1)),
                                 nn.ReplicationPad2d((1, 2, 2, 1)),
                                 nn.ReflectionPad2d((1, -1, 0, 2))])
def test_a_pad_by_reflection_or_replication_counts_its_gradients_fold(pad: nn.Module) -> None:
    # the fold adds each padded position's gradient to the position it copied: per plane, the
    # padded positions minus the input positions the pad keeps, one add each; the pad's own
    # backward of a tensor of ones gives how many gradients land on each input position, so
    # the adds are sum(c - 1 over positions reached), counted independently of the formula
    x = torch.randn(2, 3, 4, 5)
    ones = torch.ones(2, 3, 4, 5, requires_grad=True)
    landed = torch.autograd.grad(pad(ones).sum(), [ones])[0]
    fold = int(landed.sum() - (landed > 0).sum())
    # (1, 2, 2, 1): 6 planes x ((4 + 3) x (5 + 3) - 4 x 5) = 6 x 36 = 216
    # (1, -1, 0, 2): the last column cropped, 6 planes x (6 x 5 - 4 x 4) = 6 x 14 = 84
    assert fold == {(1, 2, 2, 1): 216, (1, -1, 0, 2): 84}[tuple(pad.padding)]
    profile = ModuleProfiler().profile(_PaddedConv(pad), x, backward=True)
    # besides the fold: the 1 x 1 convolution's weight gradient, 2 * 4 * 5 rows x 3 x 3 macs
    # (40 x 9 = 360, 720 ops); the input needs no gradient
    assert profile.backward_complete
    assert (profile.total_backward_ops, profile.total_backward_macs) == (720 + fold, 360)


class _Gated(nn.Module):
    """A linear layer into an activation (GLU: conformer convolution modules; RReLU; shrinks)."""

    def __init__(self, act: nn.Module) -> None:
        super().__init__()
        self.linear, self.act = nn.Linear(3, 6, bias=False), act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.linear(x))


@pytest.mark.parametrize(("act", "per_element", "elements"), [
    # glu halves 6 features: 4 x 3 gradient elements, each 8 ops (sigmoid 3, g * s,
    # g * a * s * (1 - s) 4)
    (nn.GLU(), 8, 4 * 3),
    # rrelu in training: the gradient times the slope drawn per element, 1 op per element
    (nn.RReLU(), 1, 4 * 6),
    # lower == upper: no slope is drawn, the kernel runs leaky_relu's backward, 2 per element
    (nn.RReLU(0.2, 0.2), 2, 4 * 6),
    # shrinks: two comparisons (x > lambd, x < -lambd) select the gradient, 2 per element
    (nn.Hardshrink(), 2, 4 * 6),
    (nn.Softshrink(), 2, 4 * 6),
])
def test_these_activations_count_their_backward(act: nn.Module, per_element: int,
                                                elements: int) -> None:
    model = _Gated(act).train()
    profile = ModuleProfiler().profile(model, torch.randn(4, 3), eval=False, backward=True)
    assert profile.backward_complete
    # the linear layer's weight gradient, 6 x 3 dot products of the 4 rows: 18 x 7 = 126 ops,
    # 4 x 3 x 6 = 72 macs; its input needs none
    assert profile.records[1].self_backward_ops == 126
    assert profile.records[2].self_backward_ops == per_element * elements


class _Bags(nn.Module):
    """An embedding bag over fixed indices, with per-sample weights when given."""

    def __init__(self, mode: str, weights: nn.Parameter | None = None) -> None:
        super().__init__()
        self.bag, self.weights = nn.EmbeddingBag(10, 4, mode=mode, padding_idx=0), weights

    def forward(self, indices: torch.Tensor) -> torch.Tensor:
        return self.bag(indices, per_sample_weights=self.weights)


@pytest.mark.parametrize(("mode", "weighted", "backward_ops"), [
    # 2 bags of 3 entries, one of each a padding entry: 4 entries reach the weight gradient,
    # 4 adds each (its bag's gradient row into its own row): 16
    ("sum", False, 16),
    # mean: each entry's row is scaled by 1 / its bag's size first, 4 multiplies more: 32
    ("mean", False, 32),
    # max: each bag's gradient element is added into its maximum's row: 2 x 4 = 8
    ("max", False, 8),
    # per-sample weights: the weight gradient 32 as for mean, and each real entry's weight
    # gradient, a dot product of length 4 (7 ops): 4 x 7 = 28
    ("sum", True, 32 + 28),
])
def test_an_embedding_bag_counts_its_backward(mode: str, weighted: bool,
                                              backward_ops: int) -> None:
    weights = nn.Parameter(torch.rand(2, 3)) if weighted else None
    indices = torch.tensor([[1, 0, 3], [0, 4, 5]])
    profile = ModuleProfiler().profile(_Bags(mode, weights), indices, backward=True)
    assert profile.backward_complete
    assert profile.total_backward_ops == backward_ops


def test_a_sparse_embeddings_gradient_is_assembled_for_free() -> None:
    # nn.Embedding(sparse=True) hands back the incoming gradient rows as a sparse tensor,
    # assembled from the indices and those rows: no arithmetic. The rest is the Linear(4, 2)
    # on 3 rows: weight gradient 2 x 4 dot products of length 3 (5 ops) = 40, input gradient
    # 3 x 4 dot products of length 2 (3 ops) = 36, bias gradient 2 sums of 3 (2 ops) = 4
    model = nn.Sequential(nn.Embedding(10, 4, sparse=True), nn.Linear(4, 2))
    profile = ModuleProfiler().profile(model, torch.tensor([[1, 2, 1]]), backward=True)
    assert profile.backward_complete and profile.complete
    assert profile.records[1].self_backward_ops == 0
    assert profile.total_backward_ops == 40 + 36 + 4
    # macs: 2 x 4 x 3 + 3 x 4 x 2 = 48, as FlopCounterMode's 2 * 48 for the two mm
    assert profile.total_backward_macs == 48


class _MergedImages(nn.Module):
    """A vision-language merge: image features scattered into the token embeddings where the
    image tokens are (``masked_scatter``, as LLaVA-type models do)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed, self.project = nn.Embedding(10, 4), nn.Linear(5, 4, bias=False)

    def forward(self, ids: torch.Tensor, image: torch.Tensor) -> torch.Tensor:
        tokens = self.embed(ids)
        mask = (ids == 9).unsqueeze(-1).expand_as(tokens)
        return tokens.masked_scatter(mask, self.project(image))


def test_a_masked_scatter_moves_its_sources_gradient_for_free() -> None:
    ids, image = torch.tensor([[1, 9, 9, 2]]), torch.randn(2, 5)
    profile = ModuleProfiler().profile(_MergedImages(), (ids, image), backward=True)
    assert profile.backward_complete
    # the projection's weight gradient, 4 x 5 dot products of its 2 rows: 20 x 3 = 60 ops;
    # the embedding's: one add per incoming gradient element, 4 x 4 = 16; masked_scatter's own
    # gradients are the gradient, moved (masked_fill, masked_scatter_backward)
    assert profile.total_backward_ops == 60 + 16


def test_weight_norm_backward_is_counted() -> None:
    # torch.nn.utils.weight_norm recomputes w = g * v / ||v|| in a pre-hook (the fused
    # _weight_norm_interface); its backward is one kernel: v is 4 x 4 (M = 16) in 4 groups
    # (dim 0): 5 * 16 + 2 * 4 = 88. The weight's gradient, grad^T (4 x 3) @ x (3 x 4):
    # 16 outputs of 3 products and 2 adds, 80. x needs no gradient.
    model = nn.Sequential(nn.utils.weight_norm(nn.Linear(4, 4, bias=False)))
    profile = ModuleProfiler().profile(model, torch.randn(3, 4), backward=True)
    assert profile.total_backward_ops == 80 + 88
    assert profile.backward_complete


# -- inputs that require grad --------------------------------------------------------------

class Einsum(nn.Module):
    """A parameter-free block: a batched matmul of its two inputs."""

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.einsum("bij,bjk->bik", a, b)


class Regression(nn.Module):
    """``MSELoss(Linear(x), y)``: the loss's prediction comes from a parameter."""

    def __init__(self) -> None:
        super().__init__()
        self.linear, self.loss = nn.Linear(3, 5), nn.MSELoss()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.loss(self.linear(x), y)


def test_a_parameter_free_loss_with_a_prediction_that_requires_grad_is_counted() -> None:
    pred = torch.randn(4, 5).requires_grad_()
    target = torch.randn(4, 5)
    profile = ModuleProfiler().profile(nn.MSELoss(), (pred, target), backward=True)
    # forward, mse_loss: 20 elements * 2 (subtract, square) + mean's 20 (19 adds, 1 divide) = 60
    # backward, mse_loss_backward: 20 * 3 (subtract, scale by 2 / n, times the gradient) = 60
    loss = profile.records[0]
    assert (loss.self_ops, loss.self_backward_ops, loss.self_backward_macs) == (60, 60, 0)
    assert profile.backward_complete and profile.complete
    assert pred.grad is None and pred.requires_grad  # autograd.grad: no .grad written
    # cross-check: the same loss fed by a layer with parameters (the path that always ran)
    # books the same 60 backward ops to the loss call
    fed = ModuleProfiler().profile(Regression(), (torch.randn(4, 3), target), backward=True)
    assert fed.calls("loss")[0].self_backward_ops == 60


def test_a_parameter_free_block_differentiates_its_input_as_flop_counter_does() -> None:
    a, b = torch.randn(2, 3, 4).requires_grad_(), torch.randn(2, 4, 5)
    profile = ModuleProfiler().profile(Einsum(), (a, b), backward=True)
    # grad of a only: (2 x 3 x 5) @ (2 x 5 x 4) = 2 * 3 * 4 * 5 = 120 MACs (b needs none)
    assert profile.total_backward_macs == 120
    loss = Einsum()(a.detach().requires_grad_(), b).sum()
    with FlopCounterMode(display=False) as counter:
        loss.backward()  # type: ignore[no-untyped-call]
    assert 2 * profile.total_backward_macs == counter.get_total_flops() == 240


def test_an_input_that_requires_grad_is_differentiated_beside_the_parameters() -> None:
    model, x = nn.Linear(3, 2), torch.randn(4, 3).requires_grad_()
    profile = ModuleProfiler().profile(model, x, backward=True)
    # grad_weight (2 x 4) @ (4 x 3) = 24 MACs, and now grad_input (4 x 2) @ (2 x 3) = 24 MACs,
    # as loss.backward() computes them
    assert profile.total_backward_macs == 48
    loss = model(x.detach().requires_grad_()).sum()
    with FlopCounterMode(display=False) as counter:
        loss.backward()  # type: ignore[no-untyped-call]
    assert 2 * profile.total_backward_macs == counter.get_total_flops()


@pytest.mark.parametrize(("model", "what"), [
    (nn.MSELoss(), "has no parameters"),
    (nn.Bilinear(5, 5, 1).requires_grad_(False), "has 2 parameter tensor"),
])
def test_nothing_requiring_grad_is_named_as_the_cause(model: nn.Module, what: str) -> None:
    with pytest.raises(LossError, match=f"nothing in the pass requires grad: the model {what}.*"
                                        r"call requires_grad_\(\) on an input") as info:
        ModuleProfiler().profile(model, (torch.randn(4, 5), torch.randn(4, 5)), backward=True)
    assert "loss_fn" not in str(info.value)  # a loss function cannot help


@pytest.mark.parametrize("loss_fn", [None, lambda output: output.sum()])
def test_inference_mode_is_named_as_the_cause(loss_fn: object) -> None:
    model = nn.Linear(3, 2)
    before = snapshot(model)
    with torch.inference_mode(), pytest.raises(
            LossError, match=r"cannot run under torch.inference_mode\(\)") as info:
        ModuleProfiler().profile(model, torch.randn(4, 3), backward=True,
                                 loss_fn=loss_fn)  # type: ignore[arg-type]
    assert "loss_fn" not in str(info.value)
    assert_unchanged(model, before)


class _Checkpointed(nn.Module):
    """``b(checkpoint(a, x))``: torch's reentrant checkpoint reruns ``a`` in the backward."""

    def __init__(self, reentrant: bool | None) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 2)
        self.reentrant = reentrant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.reentrant is None:
            return self.b(self.a(x))
        return self.b(torch.utils.checkpoint.checkpoint(self.a, x,
                                                        use_reentrant=self.reentrant))


def test_a_reentrant_checkpoint_backward_is_counted_and_leaves_grads_untouched() -> None:
    torch.manual_seed(0)
    plain, model = _Checkpointed(None), _Checkpointed(True)
    model.load_state_dict(plain.state_dict())
    for parameter in model.parameters():
        parameter.grad = torch.full_like(parameter, 2.0)
    grads = [parameter.grad for parameter in model.parameters()]
    before = snapshot(model)
    # the reentrant checkpoint's inputs must require grad for its parameters to get any
    x = torch.randn(4, 8, requires_grad=True)
    profile = ModuleProfiler().profile(model, x, backward=True)
    assert_unchanged(model, before)
    assert [parameter.grad for parameter in model.parameters()] == grads  # the same objects
    assert x.grad is None
    reference = ModuleProfiler().profile(plain, x, backward=True).total_backward_ops
    # the same gradients as without the checkpoint, plus a's forward run again:
    # 4 rows * 8 outputs * (8 multiplies + 7 adds + 1 bias) = 512 ops
    assert profile.total_backward_ops == reference + 512
    assert profile.total_ops == ModuleProfiler().profile(plain, x).total_ops


def test_a_reentrant_checkpoints_rebuilt_graph_is_booked_to_the_calls_it_repeats() -> None:
    torch.manual_seed(0)
    x = torch.randn(4, 8, requires_grad=True)
    plain = ModuleProfiler().profile(_Checkpointed(None), x, backward=True)
    checkpointed = ModuleProfiler().profile(_Checkpointed(True), x, backward=True)
    own = {record.path: record.self_backward_ops for record in checkpointed.records}
    reference = {record.path: record.self_backward_ops for record in plain.records}
    # a's gradients come from the graph the checkpoint rebuilt in the backward, booked to a as
    # the plain model's are, plus a's forward run again: 4 rows * 8 outputs * (8 multiplies
    # + 7 adds + 1 bias) = 512 ops; nothing is left outside every module
    assert own == {**reference, "a": reference["a"] + 512}
    assert checkpointed.backward_outside_ops == plain.backward_outside_ops == 0


def test_a_selective_activation_checkpoint_recomputes_only_what_it_did_not_save() -> None:
    """Selective activation checkpointing records the forward's operators in a dispatch mode
    of its own and replays them in the recompute: the observer must never pop that mode."""
    import functools

    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    def save_products(ctx: object, op: object, *args: object, **kwargs: object
                      ) -> CheckpointPolicy:
        return CheckpointPolicy.MUST_SAVE if op is torch.ops.aten.addmm.default \
            else CheckpointPolicy.PREFER_RECOMPUTE

    class Selective(_Checkpointed):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            context = functools.partial(create_selective_checkpoint_contexts, save_products)
            return self.b(torch.utils.checkpoint.checkpoint(
                self.a, x, use_reentrant=False, context_fn=context))

    x = torch.randn(4, 8)
    plain = ModuleProfiler().profile(_Checkpointed(None), x, backward=True)
    selective = ModuleProfiler().profile(Selective(None), x, backward=True)
    # a's product is saved, not run again: the plain model's backward, a's weight gradient
    # 8 * 8 * 4 = 256 MACs and b's two gradients 2 * 8 * 4 * 2 = 128
    assert selective.total_backward_macs == plain.total_backward_macs == 256 + 128
    assert selective.total_backward_ops == plain.total_backward_ops


def test_a_reentrant_checkpoint_never_runs_a_stepping_hook() -> None:
    model = _Checkpointed(True)
    stepped: list[torch.Tensor] = []
    handle = model.a.weight.register_post_accumulate_grad_hook(stepped.append)
    try:
        with pytest.raises(ProfilingError, match="use_reentrant=False"):
            ModuleProfiler().profile(model, torch.randn(4, 8, requires_grad=True),
                                     backward=True)
    finally:
        handle.remove()
    assert stepped == [] and model.a.weight.grad is None


def test_a_training_pass_through_a_reentrant_checkpoint_accumulates_every_gradient() -> None:
    from moduleprofiler.memory import measure_memory

    model, x = _Checkpointed(True), torch.randn(4, 8, requires_grad=True)
    report = measure_memory(model, x, train=True)
    assert report.training is not None
    # every parameter's gradient, a's through the checkpoint's own backward:
    # (8 * 8 + 8 + 2 * 8 + 2) fp32 values * 4 bytes = 360
    assert report.training.grad_bytes == 360
    assert x.grad is None and all(p.grad is None for p in model.parameters())


class _BrokenGradient(torch.autograd.Function):
    """Doubles its input; its backward raises."""

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, grad: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("backward broke")


class _BrokenBlock(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _BrokenGradient.apply(x)


def test_a_failing_backward_names_the_module_whose_forward_made_it() -> None:
    # it said "the backward pass raised RuntimeError: backward broke" and nothing of where;
    # the node's forward call is read from the pass's node map, nothing runs again
    model = nn.Sequential(nn.Linear(3, 3), nn.Sequential(nn.ReLU(), _BrokenBlock()))
    with pytest.raises(ProfilingError, match=r"^the backward pass raised RuntimeError: backward "
                                             r"broke; in the backward of module '1\.1' "
                                             r"\(_BrokenBlock\)$"):
        ModuleProfiler().profile(model, torch.randn(2, 3), backward=True)


class _PolynomialGradient(torch.autograd.Function):
    """``2 x`` whose backward runs ``special_chebyshev_polynomial_t``, an operator without a
    formula (and a multiplication, which has one), or only the polynomial with ``alone``."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, alone: bool) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.alone = alone
        return x * 2

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        (x,) = ctx.saved_tensors
        polynomial = torch.special.chebyshev_polynomial_t(x, 3)
        return (polynomial if ctx.alone else grad * polynomial), None


class _PolynomialLayer(nn.Module):
    def __init__(self, alone: bool) -> None:
        super().__init__()
        self.alone = alone

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _PolynomialGradient.apply(x, self.alone)


def test_a_call_whose_backward_has_an_operator_without_formula_is_marked_incomplete() -> None:
    model = nn.Sequential(nn.Linear(4, 4), _PolynomialLayer(alone=False), nn.Linear(4, 2))
    profile = ModuleProfiler().profile(model, torch.randn(3, 4), backward=True)
    frame = profile.to_df("module").set_index("module")
    # "1" ran the unknown polynomial and a known 3 x 4 mul: 12 ops known, a lower bound
    assert frame.loc["1", "self_backward_ops"] == 12
    # "0": only grad_weight (its input needs none): 4 x 4 dot products of length 3,
    # 16 x (2 * 3 - 1) = 80, plus grad_bias, 4 sums of 3 rows, 8: 88
    # "2": grad_input 3 x 4 of length 2, 12 x 3 = 36; grad_weight 2 x 4 of length 3,
    # 8 x 5 = 40; grad_bias 2 x 2 = 4: 80
    assert frame.loc["0", "self_backward_ops"] == 88 and frame.loc["2", "self_backward_ops"] == 80
    # the call and the root it ran in are lower bounds; the linear layers are exact
    assert frame["backward_complete"].tolist() == [False, True, False, True]
    assert frame.loc["__root__", "backward_ops"] == 88 + 12 + 80
    assert profile.backward_complete is False and profile.lower_bounds == ("backward",)
    assert profile.backward_unsupported_ops == {"aten.special_chebyshev_polynomial_t": 1}
    types = profile.to_df("type").set_index("type")
    assert not types.loc["_PolynomialLayer", "backward_complete"]
    assert types.loc["Linear", "backward_complete"]


def test_a_call_whose_backward_ran_only_operators_without_formula_is_unknown_not_zero() -> None:
    model = nn.Sequential(nn.Linear(4, 4), _PolynomialLayer(alone=True))
    profile = ModuleProfiler().profile(model, torch.randn(3, 4), backward=True)
    frame = profile.to_df("module").set_index("module")
    assert pd.isna(frame.loc["1", "self_backward_ops"])
    assert pd.isna(frame.loc["1", "self_backward_macs"])
    assert frame["backward_complete"].tolist() == [False, True, False]
