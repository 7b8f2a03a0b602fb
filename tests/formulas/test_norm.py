"""Normalisation formulas against hand arithmetic (docs/formulas/norm.md)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.conftest import macs_of, ops_of, profile_of


def train_ops(module: nn.Module, *inputs: torch.Tensor) -> int | float | None:
    """Own ops of the root call with the module left in training mode."""
    return profile_of(module, *inputs, eval=False).records[0].self_ops


# -- BatchNorm ---------------------------------------------------------------------------------
def test_batchnorm2d_training_keeps_legacy_value() -> None:
    # C=3, M = 2*4*4 = 32 per channel; 0.0.4's C*(7M+4) = 3*228 = 684
    assert train_ops(nn.BatchNorm2d(3), torch.randn(2, 3, 4, 4)) == 684


def test_batchnorm1d_training_no_affine() -> None:
    # (N=4, C=5): M = 4; C*(5M+4) = 5*24 = 120
    assert train_ops(nn.BatchNorm1d(5, affine=False), torch.randn(4, 5)) == 120


def test_batchnorm1d_3d_input_training() -> None:
    # (N=2, C=3, L=4): M = 8; 3*(7*8+4) = 180
    assert train_ops(nn.BatchNorm1d(3), torch.randn(2, 3, 4)) == 180


def test_batchnorm2d_eval_uses_running_stats() -> None:
    # B10: running stats -> per channel sqrt(var+eps) 2, per element (x-mean)/std 2 + affine 2:
    # C*(4M+2) = 3*(4*32+2) = 390
    assert ops_of(nn.BatchNorm2d(3), torch.randn(2, 3, 4, 4)) == 390


def test_batchnorm3d_eval_no_affine() -> None:
    # C=2, M = 1*2*2*2 = 8; C*(2M+2) = 2*18 = 36
    assert ops_of(nn.BatchNorm3d(2, affine=False), torch.randn(1, 2, 2, 2, 2)) == 36


def test_batchnorm_eval_without_running_stats_uses_batch_stats() -> None:
    # track_running_stats=False: torch normalises with batch statistics even in eval:
    # C=3, M=8: 3*(7*8+4) = 180
    bn = nn.BatchNorm1d(3, track_running_stats=False)
    assert ops_of(bn, torch.randn(2, 3, 4)) == 180


def test_sync_batchnorm_eval() -> None:
    # SyncBatchNorm subclasses _BatchNorm; eval on CPU falls back to batch_norm: as BatchNorm2d
    assert ops_of(nn.SyncBatchNorm(3), torch.randn(2, 3, 4, 4)) == 390


def test_lazy_batchnorm_resolves_through_mro() -> None:
    # LazyBatchNorm1d materialises C=5 on a first call (made before profiling, because the
    # profiler counts parameters before the pass); training (N=4): 5*(7*4+4) = 160
    bn = nn.LazyBatchNorm1d()
    bn(torch.randn(4, 5))
    assert train_ops(bn, torch.randn(4, 5)) == 160


# -- InstanceNorm ------------------------------------------------------------------------------
def test_instancenorm1d_unbatched() -> None:
    # (C=3, L=5): 3 instances of 5, no affine: 3*(5*5+4) = 87
    assert ops_of(nn.InstanceNorm1d(3), torch.randn(3, 5)) == 87


def test_instancenorm2d_affine() -> None:
    # (N=2, C=3, 4x4): 6 instances of 16: 6*(7*16+4) = 696
    assert ops_of(nn.InstanceNorm2d(3, affine=True), torch.randn(2, 3, 4, 4)) == 696


def test_instancenorm3d_running_stats_in_eval() -> None:
    # track_running_stats in eval: per channel 2 (C=2) + per element 2 (numel 2*2*8 = 32): 68
    norm = nn.InstanceNorm3d(2, track_running_stats=True)
    assert ops_of(norm, torch.randn(2, 2, 2, 2, 2)) == 68


def test_instancenorm3d_running_stats_in_training_uses_input_stats() -> None:
    # training: 4 instances of 8: 4*(5*8+4) = 176
    norm = nn.InstanceNorm3d(2, track_running_stats=True)
    assert train_ops(norm, torch.randn(2, 2, 2, 2, 2)) == 176


# -- LayerNorm, GroupNorm, RMSNorm -------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({}, 2 * 3 * (7 * 5 + 4)),  # rows = 6, E = 5: 6*39 = 234
        ({"bias": False}, 2 * 3 * (6 * 5 + 4)),  # 6*34 = 204
        ({"elementwise_affine": False}, 2 * 3 * (5 * 5 + 4)),  # 6*29 = 174
    ],
)
def test_layernorm_keeps_legacy_values(kwargs: dict[str, bool], expected: int) -> None:
    assert ops_of(nn.LayerNorm(5, **kwargs), torch.randn(2, 3, 5)) == expected


def test_layernorm_multi_dim_normalized_shape() -> None:
    # normalized (3, 4): E = 12, rows = 2: 2*(7*12+4) = 176
    assert ops_of(nn.LayerNorm([3, 4]), torch.randn(2, 3, 4)) == 176


def test_groupnorm() -> None:
    # N=2, G=2, C=4, L=3: 4 groups of M = 2*3 = 6: 4*(5*6+4) = 136, affine 2*24 = 48 -> 184
    assert ops_of(nn.GroupNorm(2, 4), torch.randn(2, 4, 3)) == 184


def test_groupnorm_no_affine_4d() -> None:
    # N=1, G=3, C=6, 2x2: 3 groups of 2*4 = 8: 3*(5*8+4) = 132
    assert ops_of(nn.GroupNorm(3, 6, affine=False), torch.randn(1, 6, 2, 2)) == 132


@pytest.mark.skipif(not hasattr(nn, "RMSNorm"), reason="RMSNorm needs torch >= 2.4")
def test_rmsnorm() -> None:
    # rows 3, E = 4: mean of squares 2*4, +eps & sqrt 2, divide 4 -> 14; weight 4 -> 18; 3*18 = 54
    assert ops_of(nn.RMSNorm(4), torch.randn(3, 4)) == 54
    # no weight: 3*14 = 42
    assert ops_of(nn.RMSNorm(4, elementwise_affine=False), torch.randn(3, 4)) == 42


# -- local response normalisation -------------------------------------------------------------
def test_local_response_norm_clips_channel_windows() -> None:
    # C=4, size 3: windows [0,1] [0,2] [1,3] [2,3] hold 2,3,3,2 channels; per element w + 5
    # (square, w-1 adds, *alpha/n, +k, pow, divide): 7+8+8+7 = 30 per position; 2*2 = 4 -> 120
    assert ops_of(nn.LocalResponseNorm(3), torch.randn(1, 4, 2, 2)) == 120


def test_local_response_norm_3d_input() -> None:
    # (N=2, C=3, L=2), size 2: windows [c-1, c]: 1,2,2 -> 6+7+7 = 20 per position; 4 -> 80
    assert ops_of(nn.LocalResponseNorm(2), torch.randn(2, 3, 2)) == 80


def test_cross_map_lrn2d_running_window() -> None:
    # C=4, size 3 -> pre_pad 2: first window 2 maps (1 add); c=1,2 add a map, c=3 subtracts one:
    # 4 window ops per position * 4 positions = 16; 5 per element * 16 = 80; total 96
    assert ops_of(nn.CrossMapLRN2d(3), torch.randn(1, 4, 2, 2)) == 96


@pytest.mark.parametrize(
    "module", [nn.BatchNorm2d(2), nn.GroupNorm(1, 2), nn.InstanceNorm2d(2), nn.LocalResponseNorm(2)]
)
def test_norm_macs_are_zero(module: nn.Module) -> None:
    assert macs_of(module, torch.randn(1, 2, 3, 3)) == 0
