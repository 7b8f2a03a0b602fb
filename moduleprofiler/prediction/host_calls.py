"""What a module call costs the host by how deep it is nested, measured on synthetic modules.

A model's forward calls modules inside modules: a call at depth ``d`` (the root's call is depth
0) runs under ``d`` others. The tight loop of :func:`~moduleprofiler.prediction.measure_host`
measures a module call at depth 0 (``module_call``). Here leaf modules that launch nothing
(their ``forward`` returns its input) are called in turn from a container nested under
wrapper modules, so that the leaves sit at each depth of :data:`DEPTHS`. Each leaf call's cost
is the slope of the forward's time over the number of leaves (:data:`LEAVES`: the wrappers'
own calls fall out), at each depth; :func:`depth_cost` is the slope of that cost over the
depth, what every level of nesting adds to a call (``module_call_depth``). It is pure Python
work of the CPU that runs the model, whatever the device.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Mapping

import torch
from torch import nn

from moduleprofiler.prediction.host_loops import interleaved_call_us

DEPTHS: tuple[int, ...] = (1, 2, 4, 8)
"""The depths of the leaf calls measured."""
LEAVES: tuple[int, int] = (8, 64)
"""The two leaf counts whose forwards' difference is the leaves' own cost."""


class _Leaf(nn.Module):
    """A module call and nothing else."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class _Leaves(nn.Module):
    """Calls its leaves one after the other."""

    def __init__(self, count: int) -> None:
        super().__init__()
        self.leaves = nn.ModuleList(_Leaf() for _ in range(count))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for leaf in self.leaves:
            x = leaf(x)
        return x


class _Wrapper(nn.Module):
    """One level of nesting around ``inner``."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x)


def nested(depth: int, leaves: int) -> nn.Module:
    """A module whose forward calls ``leaves`` leaf modules at ``depth`` (``depth >= 1``: the
    container of the leaves is the root, or under ``depth - 1`` wrappers)."""
    if depth < 1:
        raise ValueError(f"depth must be at least 1, got {depth}")
    model: nn.Module = _Leaves(leaves)
    for _ in range(depth - 1):
        model = _Wrapper(model)
    return model


def leaf_call_us(calls: int = 100, rounds: int = 7) -> dict[int, float]:
    """By depth of :data:`DEPTHS`: host µs of one leaf call there, the median over
    ``rounds`` interleaved rounds of ``calls`` forwards of each model."""
    x = torch.zeros(1)
    models = {(depth, count): functools.partial(nested(depth, count), x)
              for depth in DEPTHS for count in LEAVES}
    samples = interleaved_call_us(models, calls, rounds, before=lambda forward: forward())
    few, many = LEAVES
    return {depth: (statistics.median(samples[(depth, many)])
                    - statistics.median(samples[(depth, few)])) / (many - few)
            for depth in DEPTHS}


def depth_cost(by_depth: Mapping[int, float]) -> float:
    """The least-squares slope of a call's µs over its depth (``by_depth``: depth -> µs), never
    below 0: what each level of nesting adds to a module call."""
    if len(by_depth) < 2:
        raise ValueError("depth_cost needs calls measured at two depths at least")
    slope = statistics.linear_regression(list(by_depth), list(by_depth.values())).slope
    return max(0.0, slope)
