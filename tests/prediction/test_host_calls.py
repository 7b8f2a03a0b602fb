"""A module call's host cost by depth: the fit and the synthetic modules it is measured on."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

from moduleprofiler.call import Call
from moduleprofiler.prediction.host_calls import DEPTHS, depth_cost, leaf_call_us, nested
from moduleprofiler.runner import Listener, PassRunner


def test_depth_cost_is_the_least_squares_slope() -> None:
    # 2 + 0.5 * depth exactly: slope 0.5
    assert depth_cost({1: 2.5, 2: 3.0, 4: 4.0, 8: 6.0}) == pytest.approx(0.5)
    # depths 1, 3 (mean 2), costs 1, 2 (mean 1.5): (-1 * -0.5 + 1 * 0.5) / (1 + 1) = 0.5
    assert depth_cost({1: 1.0, 3: 2.0}) == pytest.approx(0.5)


def test_depth_cost_is_never_below_zero() -> None:
    assert depth_cost({1: 3.0, 2: 2.0}) == 0.0


def test_depth_cost_needs_two_depths() -> None:
    with pytest.raises(ValueError, match="two depths"):
        depth_cost({1: 3.0})


class _Depths(Listener):
    def __init__(self) -> None:
        self.depths: list[int] = []

    def enter(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.depths.append(call.depth)


def test_nested_calls_its_leaves_at_the_depth_asked() -> None:
    model = nested(3, 2)
    listener = _Depths()
    PassRunner(model, [listener]).forward(lambda: model(torch.zeros(1)))
    # two wrappers (depths 0, 1), the leaves' container (2), two leaves (3, 3)
    assert listener.depths == [0, 1, 2, 3, 3]
    with pytest.raises(ValueError, match="depth"):
        nested(0, 2)


def test_leaf_call_us_measures_every_depth() -> None:
    found = leaf_call_us(calls=3, rounds=1)
    assert list(found) == list(DEPTHS)
    assert all(math.isfinite(us) for us in found.values())
