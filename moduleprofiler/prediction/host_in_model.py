"""The host's cost of a launch inside a model's forward against the tight loops of one operator
that :func:`~moduleprofiler.prediction.measure_host` times: the in-model factor
(:attr:`~moduleprofiler.prediction.HostCosts.in_model`), measured on synthetic stacks.

Three stacks (an MLP of layer norms, linears, GELUs and residual additions; convolutions,
batch norms and ReLUs; attention blocks written in plain PyTorch) run on tiny tensors, where
the host cannot keep ahead of the device. Each stack's fastest hook-free forward over
:data:`ITERATIONS` is held against its host time priced from the loops' costs as the
prediction prices it (every operator and module call of one counted pass, by the
:class:`~moduleprofiler.prediction.host_model.HostModel` with ``in_model=1``); the factor is
the median over stacks and :data:`ROUNDS` interleaved rounds. A predicted latency is the
*fastest* a host-bound pass runs, so the fastest forward is the one held against it.

Real models' launches cost the host more than the stacks': on one H200's host, pinned to one
core in one process that never profiled, the zoo's 14 models of the prediction proof at batch 1
ran at 1.05 to 2.01 times their host time priced from the loops (median 1.368), the stacks at
0.99 (:data:`MODELS_OVER_STACKS`). Their forwards run Python that no operator shows and
operators the loops price low. The factor :func:`in_model_factor` returns is the stacks' times
that ratio, so that a calibration measured on another host prices a model's launches as the
shipped H200's does.

It needs the pass runner and the host model only, never ``predict``: ``calibrate()`` and
``host="this"`` measure it.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from moduleprofiler.call import Call
from moduleprofiler.devices import synchronize
from moduleprofiler.prediction.backward_classes import step_work
from moduleprofiler.prediction.calibration import HostCosts
from moduleprofiler.prediction.host_model import HostModel
from moduleprofiler.runner import Listener, PassRunner
from moduleprofiler.timing.environment import timing_context

MODELS_OVER_STACKS = 1.376
"""Real models' in-model factor over the synthetic stacks', measured in one process on an
H200's host pinned to one core: the median over the prediction proof's 14 models at batch 1,
fp32 and bf16 (1.368: each model's fastest of 60 forwards in three interleaved rounds against
its host priced from the loops measured beside them), over the stacks' median in the same
rounds (0.994; ``benchmarks/prediction/host_in_model_real.py``,
``host_in_model_real_pinned_h200_2026-11-30.txt``). Fitted on the proof's models: the
evaluation reports them as such, with each model family held out in turn."""

ROUNDS = 3
"""Interleaved rounds over the stacks (each stack's factor per round; the median is kept)."""
ITERATIONS = 60
"""Timed forwards of a stack per round (after :data:`WARMUP`); the fastest is kept."""
WARMUP = 10


class _Mlp(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.act = nn.GELU()
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(self.act(self.up(self.norm(x))))


class _ConvBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.relu(self.bn1(self.conv1(x)))
        return self.relu(x + self.bn2(self.conv2(y)))


class _Attention(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)
        self.mlp = _Mlp(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, w = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, s, 3, self.heads, w // self.heads).unbind(2)
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                           v.transpose(1, 2))
        x = x + self.out(y.transpose(1, 2).reshape(b, s, w))
        return self.mlp(x)


def stacks(device: torch.device) -> dict[str, tuple[nn.Module, torch.Tensor]]:
    """The synthetic stacks on ``device`` in inference mode, each with its tiny input."""
    with torch.device(device):
        built: dict[str, tuple[nn.Module, torch.Tensor]] = {
            "mlp": (nn.Sequential(*(_Mlp(256) for _ in range(12))), torch.randn(1, 16, 256)),
            "conv": (nn.Sequential(*(_ConvBlock(32) for _ in range(8))),
                     torch.randn(1, 32, 16, 16)),
            "attention": (nn.Sequential(*(_Attention(256, 4) for _ in range(6))),
                          torch.randn(1, 16, 256)),
        }
    return {name: (model.eval(), x) for name, (model, x) in built.items()}


class _HostTime(Listener):
    """The host µs of one pass as the prediction prices it: each module call at its depth and
    each operator launch by its class."""

    observes_all = True

    def __init__(self, host: HostModel) -> None:
        self.host = host
        self.us = 0.0

    def enter(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self.us += self.host.call_us(call.depth)

    def operator(self, call: Call | None, func: Any, args: tuple[Any, ...],
                 kwargs: dict[str, Any], out: Any) -> None:
        self.us += self.host.op_us(step_work(func, args, kwargs, out, False))


def priced_host_us(model: nn.Module, x: torch.Tensor, host: HostModel) -> float:
    """Host µs of ``model(x)`` priced by ``host``, from one counted pass (no gradients)."""
    listener = _HostTime(host)
    with torch.no_grad():
        PassRunner(model, [listener]).forward(lambda: model(x))
    return listener.us


def fastest_forward_us(step: Callable[[], Any], device: torch.device,
                       iterations: int = ITERATIONS) -> float:
    """The fastest of ``iterations`` hook-free runs of ``step`` (a forward), µs, the device
    synchronised after each (after :data:`WARMUP` untimed ones)."""
    fastest = float("inf")
    with torch.no_grad():
        for _ in range(WARMUP):
            step()
        synchronize(device)
        with timing_context():
            for _ in range(iterations):
                start = time.perf_counter()
                step()
                synchronize(device)
                fastest = min(fastest, (time.perf_counter() - start) * 1e6)
    return fastest


def in_model_samples(device: torch.device, costs: HostCosts,
                     rounds: int = ROUNDS) -> dict[str, list[float]]:
    """By stack, one factor per round: its fastest forward over its host time priced from
    ``costs`` as the loops measured them."""
    loops = HostModel(costs, in_model=1.0)
    built = stacks(device)
    priced = {name: priced_host_us(model, x, loops) for name, (model, x) in built.items()}
    found: dict[str, list[float]] = {name: [] for name in built}
    for _ in range(rounds):  # interleaved: the stacks drift together
        for name, (model, x) in built.items():
            forward = functools.partial(model, x)
            found[name].append(fastest_forward_us(forward, device) / priced[name])
    return found


def in_model_factor(device: torch.device, costs: HostCosts, rounds: int = ROUNDS) -> float:
    """The in-model factor of ``costs`` on ``device``: the median of
    :func:`in_model_samples` (the stacks') times :data:`MODELS_OVER_STACKS`."""
    return factor_of(in_model_samples(device, costs, rounds))


def factor_of(samples: dict[str, list[float]]) -> float:
    """The in-model factor of :func:`in_model_samples`' ``samples``: their median over stacks
    and rounds times :data:`MODELS_OVER_STACKS`."""
    stacks_factor = statistics.median(f for values in samples.values() for f in values)
    return round(stacks_factor * MODELS_OVER_STACKS, 4)


def with_in_model_factor(device: torch.device, costs: HostCosts) -> HostCosts:
    """``costs`` with the in-model factor measured on ``device`` beside them."""
    return dataclasses.replace(costs, in_model=in_model_factor(device, costs))
