"""What the hooks cost and what they change.

* :func:`calibrate_hooks` measures, once per process and device, the hooks' cost on a chain of
  empty modules: the *attribution* error (what a hooked empty module reads as its own time)
  and the whole-model cost of one hooked call; with gradients, the time a trivial backward
  node reads.
* :func:`interleave` runs hooked and hook-free blocks in alternating order, so that their
  whole-model times are compared under the same conditions (load, allocator, clocks).
* :func:`fast_path_changes` finds modules whose code path changes when hooks are attached
  (``TransformerEncoderLayer`` refuses its fused fast path if any submodule has forward hooks).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from moduleprofiler.timing.clock import make_stamps
from moduleprofiler.timing.environment import timing_context
from moduleprofiler.timing.recorder import CallRecorder, GradMode


class CodePathWarning(UserWarning):
    """Hooks make the model run different kernels than it runs without them."""


class _Empty(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x


class _Scale(nn.Module):
    def forward(self, x: Tensor) -> Tensor:
        return x * 1.0


@dataclass(frozen=True)
class HookCalibration:
    """Per-call costs of the instrumentation on one device, in nanoseconds."""

    device: str
    attribution_ns: float
    """Median time a hooked empty module reads as its own (the hooks' share inside the
    interval): the error in every call's inclusive time."""
    per_call_ns: float
    """Whole-model cost of one hooked call (hooked minus hook-free, per call). Child calls'
    hooks add this much to their parent's self time."""
    grad_per_call_ns: float = math.nan
    """Forward cost of one hooked call that creates one autograd node, with backward tracking
    on (hooked minus hook-free, per call); the error bound used for forward times measured
    during training steps."""
    backward_attribution_ns: float = math.nan
    """Median backward time read for a trivial node (``x * 1.0`` on one element): an upper
    bound of the backward instrumentation error per node."""


_CACHE: dict[tuple[str, str], HookCalibration] = {}


def interleave(rounds: int, hooked: int, plain: int, install: Callable[[],
               AbstractContextManager[object]], run_hooked: Callable[[], None],
               run_plain: Callable[[], None], after_round: Callable[[int], None] | None = None,
               ) -> None:
    """``rounds`` rounds of ``hooked`` instrumented and ``plain`` hook-free iterations; the
    order of the two blocks alternates from round to round. Hooks are installed for the
    instrumented block only, so the hook-free block runs the model's fast paths."""
    for round_number in range(rounds):
        blocks = ("hooked", "plain") if round_number % 2 == 0 else ("plain", "hooked")
        for block in blocks:
            if block == "hooked" and hooked:
                with install():
                    for _ in range(hooked):
                        run_hooked()
            elif block == "plain":
                for _ in range(plain):
                    run_plain()
        if after_round is not None:
            after_round(round_number)


def calibrate_hooks(device: torch.device, grad_mode: GradMode = "off",
                    refresh: bool = False) -> HookCalibration:
    """Measure the hooks' per-call cost on ``device`` (cached per process; ``refresh`` redoes
    it). Takes a few tens of milliseconds."""
    key = (str(device), grad_mode)
    if key in _CACHE and not refresh:
        return _CACHE[key]
    width = 32
    model = nn.Sequential(*[_Empty() for _ in range(width)]).to(device)
    stamps = make_stamps(device)
    recorder = CallRecorder(model, stamps)
    x = torch.zeros(1, device=device)
    hooked_ns: list[float] = []
    plain_ns: list[float] = []
    leaf_ns: list[float] = []

    def run_hooked() -> None:
        recorder.begin()
        recorder.mark("start")
        model(x)
        recorder.mark("end")
        times = recorder.end()
        hooked_ns.append(times.marks["end"] - times.marks["start"])
        leaf_ns.append(float(np.mean(times.fwd_inclusive[1:])))

    def run_plain() -> None:
        stamps.reset()
        first = stamps.stamp()
        model(x)
        last = stamps.stamp()
        a, b = stamps.resolve([first, last])
        plain_ns.append(float(b - a))

    with torch.no_grad(), timing_context():
        interleave(1, 5, 5, recorder.installed, run_hooked, run_plain)  # warm-up
        hooked_ns.clear()
        plain_ns.clear()
        leaf_ns.clear()
        interleave(6, 10, 10, recorder.installed, run_hooked, run_plain)
    attribution = float(np.median(leaf_ns))
    per_call = max(0.0, (float(np.median(hooked_ns)) - float(np.median(plain_ns))) / (width + 1))
    grad_per_call, backward = math.nan, math.nan
    if grad_mode != "off":
        grad_per_call, backward = _calibrate_grad(device, grad_mode)
    calibration = HookCalibration(str(device), attribution, max(per_call, attribution),
                                  grad_per_call, backward)
    _CACHE[key] = calibration
    return calibration


def _calibrate_grad(device: torch.device, grad_mode: GradMode) -> tuple[float, float]:
    """(forward cost per hooked call with grad tracking, backward time of a trivial node)."""
    width = 16
    model = nn.Sequential(*[_Scale() for _ in range(width)]).to(device)
    stamps = make_stamps(device)
    recorder = CallRecorder(model, stamps, grad_mode)
    x = torch.ones(1, device=device, requires_grad=True)
    hooked_fwd: list[float] = []
    plain_fwd: list[float] = []
    node_ns: list[float] = []

    def run_hooked() -> None:
        recorder.begin()
        recorder.mark("start")
        out = model(x)
        recorder.mark("forward")
        out.sum().backward()
        times = recorder.end()
        hooked_fwd.append(times.marks["forward"] - times.marks["start"])
        node_ns.append(float(np.nanmedian(times.bwd_exclusive[1:])))

    def run_plain() -> None:
        stamps.reset()
        first = stamps.stamp()
        out = model(x)
        last = stamps.stamp()
        out.sum().backward()
        a, b = stamps.resolve([first, last])
        plain_fwd.append(float(b - a))

    with torch.enable_grad(), timing_context():
        interleave(1, 3, 3, recorder.installed, run_hooked, run_plain)
        for samples in (hooked_fwd, plain_fwd, node_ns):
            samples.clear()
        interleave(4, 6, 6, recorder.installed, run_hooked, run_plain)
    x.grad = None
    per_call = max(0.0, (float(np.median(hooked_fwd)) - float(np.median(plain_fwd))) / (width + 1))
    return per_call, float(np.median(node_ns))


def fast_path_changes(root: nn.Module, eval: bool, grad_enabled: bool) -> list[str]:
    """Paths of ``TransformerEncoderLayer`` modules that would take their fused fast path
    without hooks and cannot with them (the layer checks for hooks on its submodules).

    The input-independent conditions of ``TransformerEncoderLayer.forward`` are checked; the
    input ones (3-D input, supported device) are assumed to hold.
    """
    if grad_enabled:
        return []
    fastpath = getattr(getattr(torch.backends, "mha", None), "get_fastpath_enabled", None)
    if fastpath is not None and not fastpath():
        return []
    if torch.is_autocast_enabled():
        return []
    found = []
    for path, module in root.named_modules():
        if not isinstance(module, nn.TransformerEncoderLayer):
            continue
        attn = module.self_attn
        training = False if eval else module.training
        if (not training and attn.batch_first and attn.in_proj_bias is not None
                and attn._qkv_same_embed_dim
                and getattr(module, "activation_relu_or_gelu", False)
                and module.norm1.eps == module.norm2.eps and attn.num_heads % 2 == 0):
            found.append(path or "__root__")
    return found
