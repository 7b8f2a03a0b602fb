"""Zero-ops modules, and dropout in training mode (docs/formulas/zero.md)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tests.conftest import macs_of, ops_of, profile_of


def train_ops(module: nn.Module, x: torch.Tensor) -> int | float | None:
    """Own ops of the root call with the module left in training mode."""
    return profile_of(module, x, eval=False).records[0].self_ops


DROPOUTS = [
    (nn.Dropout(), (2, 3)),
    (nn.Dropout1d(), (2, 3, 4)),
    (nn.Dropout2d(), (2, 3, 4, 4)),
    (nn.Dropout3d(), (2, 3, 4, 4, 4)),
    (nn.AlphaDropout(), (2, 3)),
    (nn.FeatureAlphaDropout(), (2, 3, 4)),
]


@pytest.mark.parametrize(("module", "shape"), DROPOUTS, ids=[type(m).__name__ for m, _ in DROPOUTS])
def test_dropout_in_eval_is_zero(module: nn.Module, shape: tuple[int, ...]) -> None:
    x = torch.randn(shape)
    assert ops_of(module, x) == 0
    assert macs_of(module, x) == 0


def test_dropout_training() -> None:
    # mask of 6 entries: compare + scale each (12), multiply per element (6) -> 18
    assert train_ops(nn.Dropout(), torch.randn(2, 3)) == 18


def test_dropout_training_p_zero_is_identity() -> None:
    assert train_ops(nn.Dropout(p=0.0), torch.randn(2, 3)) == 0


def test_dropout2d_training_masks_channels() -> None:
    # (2, 3, 4, 4): mask N*C = 6 -> 12; 96 multiplies -> 108
    assert train_ops(nn.Dropout2d(), torch.randn(2, 3, 4, 4)) == 108


def test_dropout1d_training_unbatched() -> None:
    # (C=3, L=5): mask 3 -> 6; 15 multiplies -> 21
    assert train_ops(nn.Dropout1d(), torch.randn(3, 5)) == 21


def test_dropout3d_training_batched_and_unbatched() -> None:
    # (2, 3, 2, 2, 2): mask 6 -> 12, + 48 = 60; unbatched (3, 2, 2, 2): mask 3 -> 6, + 24 = 30
    assert train_ops(nn.Dropout3d(), torch.randn(2, 3, 2, 2, 2)) == 60
    assert train_ops(nn.Dropout3d(), torch.randn(3, 2, 2, 2)) == 30


def test_alpha_dropout_training() -> None:
    # mask 6 entries * 5 (draw, -1, *alpha'a, +alpha'ap, *a) = 30; 6 elements * 2 (*, +) = 12
    assert train_ops(nn.AlphaDropout(), torch.randn(2, 3)) == 42


def test_feature_alpha_dropout_training() -> None:
    # (2, 3, 4): mask N*C = 6 -> 30; 24 elements * 2 = 48 -> 78
    assert train_ops(nn.FeatureAlphaDropout(), torch.randn(2, 3, 4)) == 78


@pytest.mark.parametrize(
    ("module", "shape"),
    [
        (nn.Flatten(), (2, 3, 4)),
        (nn.Unflatten(1, (2, 2)), (3, 4)),
        (nn.ZeroPad1d(1), (1, 2, 3)),
        (nn.ZeroPad2d(1), (1, 2, 3, 3)),
        (nn.ZeroPad3d(1), (1, 1, 2, 2, 2)),
        (nn.ConstantPad1d(2, 3.5), (1, 2, 3)),
        (nn.ConstantPad2d(1, 0.5), (1, 2, 3, 3)),
        (nn.ConstantPad3d(1, 0.5), (1, 1, 2, 2, 2)),
        (nn.ReflectionPad1d(1), (1, 2, 3)),
        (nn.ReflectionPad2d(1), (1, 2, 3, 3)),
        (nn.ReflectionPad3d(1), (1, 1, 2, 2, 2)),
        (nn.ReplicationPad1d(1), (1, 2, 3)),
        (nn.ReplicationPad2d(1), (1, 2, 3, 3)),
        (nn.ReplicationPad3d(1), (1, 1, 2, 2, 2)),
        (nn.CircularPad1d(1), (1, 2, 3)),
        (nn.CircularPad2d(1), (1, 2, 3, 3)),
        (nn.CircularPad3d(1), (1, 1, 2, 2, 2)),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, nn.Module) else str(v),
)
def test_data_movement_is_zero(module: nn.Module, shape: tuple[int, ...]) -> None:
    x = torch.randn(shape)
    assert ops_of(module, x) == 0
    assert macs_of(module, x) == 0


def test_sequential_own_ops_are_zero_children_counted() -> None:
    # the Sequential itself: 0 own ops; its ReLU child: 6 comparisons; inclusive 6
    profile = profile_of(nn.Sequential(nn.ReLU()), torch.randn(2, 3))
    root = profile.records[0]
    assert root.self_ops == 0
    assert root.ops == 6
    assert root.complete


def test_containers_without_forward_resolve_to_zero() -> None:
    from moduleprofiler.registry import get_default_macs_map, get_default_ops_map, resolve

    for cls in (nn.ModuleList, nn.ModuleDict):
        ops_fn = resolve(get_default_ops_map(), cls)
        macs_fn = resolve(get_default_macs_map(), cls)
        assert ops_fn is not None and ops_fn(cls(), (), None) == 0
        assert macs_fn is not None and macs_fn(cls(), (), None) == 0
