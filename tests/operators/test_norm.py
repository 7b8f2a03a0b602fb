"""Normalisation kernels against hand arithmetic and the module formulas."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from moduleprofiler import ModuleProfiler
from tests.conftest import ops_of
from tests.operators.helpers import count, formula_count, on_meta

aten = torch.ops.aten


def train_ops(module: nn.Module, x: torch.Tensor) -> int | float | None:
    """Module-formula ops in training mode."""
    return ModuleProfiler().profile(module, x, eval=False).total_ops


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        (nn.LayerNorm(8), 360),  # rows 2*3 = 6: 6*(7*8 + 4) weight and bias
        (nn.LayerNorm(8, bias=False), 312),  # 6*(6*8 + 4) weight only
        (nn.LayerNorm(8, elementwise_affine=False), 264),  # 6*(5*8 + 4)
        (nn.LayerNorm((3, 8), elementwise_affine=False), 248),  # rows 2, E 24: 2*(5*24 + 4)
    ],
    ids=repr,
)
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_layer_norm(module: nn.Module, expected: int, mode: str) -> None:
    x = torch.randn(2, 3, 8)
    assert count(module, x, mode=mode) == (expected, 0)
    assert ops_of(module, x) == expected


X_BN = torch.randn(2, 3, 4, 4)  # C = 3 channels of M = 32 values


@pytest.mark.parametrize(
    ("module", "training", "expected"),
    [
        (nn.BatchNorm2d(3), True, 684),  # C*(7M + 4) = 3*228
        (nn.BatchNorm2d(3, affine=False), True, 492),  # C*(5M + 4) = 3*164
        (nn.BatchNorm2d(3), False, 390),  # running stats: C*2 + 2*96 + affine 2*96
        (nn.BatchNorm2d(3, affine=False), False, 198),  # 6 + 192
        (nn.BatchNorm2d(3, track_running_stats=False), False, 684),  # no buffers: batch stats
    ],
    ids=repr,
)
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_batch_norm(module: nn.Module, training: bool, expected: int, mode: str) -> None:
    module.train(training)
    # in training the module also counts the batch: num_batches_tracked += 1, one add the
    # operators see and the module formula leaves out
    bookkeeping = int(training and isinstance(module, nn.BatchNorm2d)
                      and module.track_running_stats)
    assert count(module, X_BN, mode=mode) == (expected + bookkeeping, 0)
    assert (train_ops(module, X_BN) if training else ops_of(module, X_BN)) == expected


def test_batch_norm_entry_points() -> None:
    # the lowered forms of batch_norm, priced from their arguments (see test_batch_norm)
    w, b, mean, var = torch.ones(3), torch.zeros(3), torch.zeros(3), torch.ones(3)
    out = torch.empty_like(X_BN)
    assert formula_count(aten._native_batch_norm_legit_no_training.default, X_BN, w, b, mean,
                         var, 0.1, 1e-5, out=out) == (390, 0)
    assert formula_count(aten._batch_norm_with_update.default, X_BN, w, b, mean, var, 0.1,
                         1e-5, out=out) == (684, 0)
    assert formula_count(aten._batch_norm_no_update.default, X_BN, w, b, mean, var, 0.1, 1e-5,
                         out=out) == (390, 0)
    assert formula_count(aten._batch_norm_no_update.default, X_BN, w, b, None, None, 0.1, 1e-5,
                         out=out) == (684, 0)
    assert formula_count(aten._native_batch_norm_legit.no_stats, X_BN, w, b, True, 0.1, 1e-5,
                         out=out) == (684, 0)
    assert formula_count(aten.cudnn_batch_norm.default, X_BN, w, b, mean, var, False, 0.1,
                         1e-5, out=out) == (390, 0)


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_group_norm(mode: str) -> None:
    # N*G = 2*2 groups of M = 2*3*3 = 18: 4*(5*18 + 4) = 376, + affine 2*72 = 520
    norm, x = nn.GroupNorm(2, 4), torch.randn(2, 4, 3, 3)
    assert count(norm, x, mode=mode) == (520, 0)
    assert ops_of(norm, x) == 520


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        (nn.RMSNorm(8), 204),  # rows 6: 6*(3*8 + 2) = 156, + 48 for the weight
        (nn.RMSNorm(8, elementwise_affine=False), 156),
    ],
    ids=repr,
)
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_rms_norm(module: nn.Module, expected: int, mode: str) -> None:
    # no_grad: pow, mean, add, rsqrt, mul (, mul); inference_mode: aten.rms_norm whole
    x = torch.randn(2, 3, 8)
    assert count(module, x, mode=mode) == (expected, 0)
    assert ops_of(module, x) == expected


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_instance_norm_lowers_to_batch_norm(mode: str) -> None:
    # input statistics: N*C = 6 instances of L = 16: 6*(5*16 + 4) = 504, + affine 2*96 = 696
    norm, x = nn.InstanceNorm2d(3, affine=True), torch.randn(2, 3, 4, 4)
    assert count(norm, x, mode=mode) == (696, 0)
    assert ops_of(norm, x) == 696


def test_instance_norm_running_stats_lowering_differs() -> None:
    # NB: with running statistics torch normalises a (1, N*C, ...) view: sqrt(var + eps) for
    # each of the N*C = 6 instances (12) + 2*96 = 204, where nn.InstanceNorm's formula takes
    # one per channel: 6 + 192 = 198.
    norm = nn.InstanceNorm2d(3, track_running_stats=True).eval()
    x = torch.randn(2, 3, 4, 4)
    assert count(norm, x) == (204, 0)
    assert ops_of(norm, x) == 198


META_CASES: list[tuple[Callable[..., Any], tuple[Any, ...]]] = [
    (lambda x: F.layer_norm(x, (8,), torch.ones(8), torch.zeros(8)), (torch.randn(2, 3, 8),)),
    (lambda x: F.batch_norm(x, None, None, training=True), (X_BN,)),
    (lambda x: F.batch_norm(x, torch.zeros(3), torch.ones(3)), (X_BN,)),
    (lambda x: F.group_norm(x, 3), (X_BN,)),
    (lambda x: F.rms_norm(x, (4, 4)), (X_BN,)),
]


@pytest.mark.parametrize(("fn", "args"), META_CASES)
def test_meta_device_counts_the_same(fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    # the statistics buffers stay on CPU for the CPU run; on meta everything is meta
    expected = count(fn, *args)
    with torch.device("meta"):
        assert count(fn, *on_meta(args)) == expected


@pytest.mark.parametrize(("output_mask", "weighted", "expected"), [
    # grad_out 2 x 3 x 8 = 48 elements: grad_input 7 each (g * w, x * rstd, the row's
    # multiply-accumulate 2, xhat times it, the subtraction, times rstd), grad_weight 3 each
    ((True, True), True, 48 * (7 + 3)),
    ((True, False), True, 48 * 7),  # a frozen weight
    ((False, True), True, 48 * 3),  # an input that needs no gradient
    ((True, True), False, 48 * 7),  # no weight: no weight gradient
])
def test_fused_rms_norm_backward(output_mask: tuple[bool, bool], weighted: bool,
                                 expected: int) -> None:
    # nn.RMSNorm's fused kernel runs on CUDA only (on the CPU it decomposes): its formula is
    # called directly, with the arguments the kernel gets
    x, grad = torch.randn(2, 3, 8), torch.randn(2, 3, 8)
    rstd, weight = torch.ones(2, 3, 1), (torch.ones(8) if weighted else None)
    assert formula_count(aten._fused_rms_norm_backward.default, grad, x, [8], rstd, weight,
                         list(output_mask)) == (expected, 0)


@pytest.mark.parametrize("update", [True, False])
def test_batch_norm_with_update_backward(update: bool) -> None:
    # exported and compiled graphs batch-normalise with _batch_norm_with_update (batch
    # statistics) or _batch_norm_no_update (running ones); their backward is batch_norm_backward
    x = torch.randn(2, 3, 4, 4, requires_grad=True)
    w, b = torch.ones(3, requires_grad=True), torch.zeros(3, requires_grad=True)
    forward = aten._batch_norm_with_update if update else aten._batch_norm_no_update
    rest = (0.1, 1e-5)

    def step() -> Any:
        out = forward(x, w, b, torch.zeros(3), torch.ones(3), *rest)[0]
        return torch.autograd.grad(out.sum(), [x, w, b])

    with torch.no_grad():
        forward_ops = count(forward, x, w, b, torch.zeros(3), torch.ones(3), *rest)[0]
    # 96 elements: the sum 95; grad_input 7 (batch statistics) or 2 (running ones), grad_weight
    # 3, grad_bias 1 per element
    backward = 96 * ((7 if update else 2) + 3 + 1)
    assert count(step, mode="grad") == (forward_ops + 95 + backward, 0)


def test_cudnn_batch_norm_backward_counts_as_the_native_one_in_training() -> None:
    # cuDNN's kernel runs on CUDA only: its formula is called directly; torch decomposes it
    # into native_batch_norm_backward in training with every gradient, which is the reference
    x, grad, c = torch.randn(2, 3, 4, 4), torch.randn(2, 3, 4, 4), torch.ones(3)
    native = formula_count(aten.native_batch_norm_backward.default, grad, x, c, c, c, c, c,
                           True, 1e-5, [True, True, True])
    assert native == (96 * (7 + 3 + 1), 0)
    assert formula_count(aten.cudnn_batch_norm_backward.default, x, grad, c, c, c, c, c, 1e-5,
                         torch.empty(0)) == native
    assert formula_count(aten.miopen_batch_norm_backward.default, x, grad, c, c, c, c, c,
                         1e-5) == native


def test_sync_batch_norm_backward_kernels_add_up_to_the_native_one() -> None:
    # nn.SyncBatchNorm's backward on CUDA (called directly: CUDA-only kernels): the reduction
    # before the all-reduce, 96 elements x (2 + 3 + 1), and the element-wise rest, 96 x 5;
    # together native_batch_norm_backward's 96 x (7 + 3 + 1) in training
    x, grad, c = torch.randn(2, 3, 4, 4), torch.randn(2, 3, 4, 4), torch.ones(3)
    reduce = formula_count(aten.batch_norm_backward_reduce.default, grad, x, c, c, c,
                           True, True, True)
    elemt = formula_count(aten.batch_norm_backward_elemt.default, grad, x, c, c, c, c, c,
                          torch.tensor([32, 32], dtype=torch.int32))
    assert (reduce, elemt) == ((96 * 6, 0), (96 * 5, 0))
    native = formula_count(aten.native_batch_norm_backward.default, grad, x, c, c, c, c, c,
                           True, 1e-5, [True, True, True])
    assert reduce[0] + elemt[0] == native[0]
    # a frozen affine: only the input gradient's sums are reduced
    assert formula_count(aten.batch_norm_backward_reduce.default, grad, x, c, c, c,
                         True, False, False) == (96 * 2, 0)
