"""The kernels cuDNN runs for ``nn.LSTM``, ``nn.GRU`` and ``nn.RNN`` on a GPU.

On the meta device a recurrent layer's call decomposes into its per-step operators (a matrix
product, a bias addition, the gates' activations and products, about a dozen per step, layer
and direction), each a launch of its own. A GPU runs the layer as one ``_cudnn_rnn`` call:
per layer and direction one matrix product projects the whole sequence's inputs onto the
gates, then each step runs one product of the hidden state with the recurrent weights and one
fused kernel for the gates (plus the projection's product where ``proj_size`` is set). The
backward mirrors it: per step the hidden state's gradient, the gates' backward and a memset,
then one product each for the input's gradient and the two weights' gradients.

Small float32 layers run on persistent kernels instead: one launch per layer and direction
keeps the recurrent weights on the chip and runs every step, at a time per step measured on an
H200 (:data:`PERSISTENT_STEP_US`, :data:`PERSISTENT_BACKWARD_STEP_US`).

:func:`recurrent_shape` reads what those kernels need from the call; :func:`forward_kernels`
and :func:`backward_kernels` list them as the prediction prices operators (matrix products on
the ``gemm`` tables, the fused gate kernels as elementwise launches over the gates).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence

from moduleprofiler.prediction.backward_classes import step_work
from moduleprofiler.prediction.op_classes import OpWork

aten = torch.ops.aten

_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}
"""Gate blocks per hidden unit of each cuDNN mode (``nn.RNNBase.mode``)."""

PERSISTENT_WEIGHTS = 4 * 192 * 192
"""cuDNN runs a float32 layer on persistent kernels (one launch per layer and direction runs
every step, the recurrent weights kept on the chip) when its recurrent weights, gates x
hidden size squared, are at most this many: on an H200 with cuDNN 9.19 every float32 LSTM,
GRU and RNN of hidden size 32 to 192 did (the RNN's 256 too, 65,536 weights), LSTM and GRU at
256 (196,608 and more) did not, and no bfloat16 layer did
(``benchmarks/results/gpu_rnn_persistent_h200_2026-11-30.txt``)."""

PERSISTENT_STEP_US = ((1024, 0.25), (4096, 0.36), (16384, 0.57), (36864, 0.96), (49152, 1.07),
                      (65536, 2.2), (110592, 5.6), (147456, 6.8))
"""A persistent kernel's microseconds per step at batches up to 64 (where they barely change)
by recurrent weights, measured on an H200 (the same file: the median of the modes at each
size). Between two rows the time is interpolated on log scales; at batch 256 it was 1.0 to 4.3
times as long (larger layers more), taken as linear in the batch beyond 64
(:data:`PERSISTENT_BATCH_256`). The largest, an LSTM of hidden size 192, already took 1.7
times as long at batch 64 as at batch 8."""

PERSISTENT_BATCH_256 = ((1024, 1.1), (16384, 1.3), (65536, 2.1), (147456, 3.5))
"""How much longer a persistent step is at batch 256 than at batch 64, by recurrent weights."""

PERSISTENT_BACKWARD_WEIGHTS = 4 * 128 * 128
"""The backward runs on a persistent kernel up to fewer recurrent weights than the forward:
on the same H200, LSTM 128 (65,536), GRU 128 and RNN 192 did, LSTM and GRU 192 (110,592 and
more) ran a kernel per step (``gpu_rnn_persistent_backward_h200_2026-11-30.txt``)."""

PERSISTENT_BACKWARD_STEP_US = ((1024, 0.39), (3072, 0.48), (4096, 0.45), (12288, 0.60),
                               (16384, 0.65), (36864, 0.85), (49152, 0.81), (65536, 1.9))
"""The backward's persistent kernel's microseconds per step at batch 8 by recurrent weights
(the same file; 2 to 9 % longer at batch 64, 1 to 9 % shorter at batch 1); beyond batch 64,
longer by :data:`PERSISTENT_BATCH_256` as the forward (not measured for the backward)."""

CALL_SHARE = 9.0
LAYER_SHARE = 4.4
LAUNCH_SHARE = {"LSTM": 1.25, "GRU": 0.7, "RNN_TANH": 0.7, "RNN_RELU": 0.7}
"""The host's cost of a cuDNN recurrent call, in elementwise operator issue costs (the
calibration's ``unary`` host cost, so that they follow the host's speed): besides issuing
the call like one matrix product, ``CALL_SHARE`` per call and ``LAYER_SHARE`` per layer and
direction (cuDNN's set-up), and ``LAUNCH_SHARE`` of the mode per further kernel. Fitted to
eight recurrent layers on an H200's host (``benchmarks/gpu_rnn_probe.py``; the host time of
a layer alone, 0.18 to 11.3 ms; no held-out set); ``RNN_TANH`` / ``RNN_RELU`` take the GRU's
share (their per-step kernels were not observed in the fit: both runs were persistent; an
``RNN_RELU`` layer measured after it read 0.49 of its host time)."""

_CUDNN_FORWARDS = frozenset({nn.LSTM.forward, nn.GRU.forward, nn.RNN.forward})


@dataclass(frozen=True)
class RecurrentShape:
    """What one call of a recurrent layer asks of cuDNN."""

    steps: int
    """Time steps (a packed sequence's longest)."""
    batch: float
    """Sequences per step (a packed sequence's mean over its steps)."""
    input_size: int
    hidden_size: int
    proj_size: int
    """The projected hidden state's width (0: none)."""
    layers: int
    directions: int
    gates: int
    dtype: torch.dtype
    mode: str
    """``LSTM``, ``GRU``, ``RNN_TANH`` or ``RNN_RELU``."""

    @property
    def recurrent_weights(self) -> int:
        """Elements of one layer and direction's recurrent weights (gates x hidden x state)."""
        return self.gates * self.hidden_size * (self.proj_size or self.hidden_size)

    @property
    def persistent(self) -> bool:
        """Whether cuDNN runs each layer and direction as one persistent kernel
        (:data:`PERSISTENT_WEIGHTS`)."""
        return (self.dtype == torch.float32 and not self.proj_size
                and self.recurrent_weights <= PERSISTENT_WEIGHTS)

    @property
    def persistent_backward(self) -> bool:
        """Whether its backward runs on one persistent kernel per layer and direction
        (:data:`PERSISTENT_BACKWARD_WEIGHTS`)."""
        return self.persistent and self.recurrent_weights <= PERSISTENT_BACKWARD_WEIGHTS

    @property
    def setup_share(self) -> float:
        """The call's set-up cost on the host, in elementwise issue costs."""
        return CALL_SHARE + LAYER_SHARE * self.layers * self.directions


@dataclass(frozen=True)
class Kernel:
    """Device work cuDNN issues: ``work`` runs ``times`` times in ``launches`` launches (a
    persistent kernel runs every step's work in one)."""

    work: OpWork
    times: int
    launches: int
    step_us: float | None = None
    """A persistent kernel's measured microseconds per step (``None``: ``work`` is priced
    by the device's tables)."""


def _interpolated(table: tuple[tuple[int, float], ...], x: float) -> float:
    """``table``'s value at ``x``, interpolated on log scales (the end rows beyond it)."""
    xs, ys = zip(*table, strict=True)
    return math.exp(float(np.interp(math.log(x), np.log(xs), np.log(ys))))


def persistent_step_us(shape: RecurrentShape, backward: bool = False) -> float:
    """Microseconds per step of one persistent kernel of ``shape``, its forward's
    (:data:`PERSISTENT_STEP_US`) or its ``backward``'s (:data:`PERSISTENT_BACKWARD_STEP_US`),
    longer beyond batch 64 by :data:`PERSISTENT_BATCH_256`."""
    weights = shape.recurrent_weights
    step = _interpolated(PERSISTENT_BACKWARD_STEP_US if backward else PERSISTENT_STEP_US,
                         weights)
    if shape.batch > 64:
        at_256 = _interpolated(PERSISTENT_BATCH_256, weights)
        step *= 1.0 + (at_256 - 1.0) * (shape.batch - 64) / (256 - 64)
    return step


def recurrent_shape(module: nn.Module, args: tuple[Any, ...]) -> RecurrentShape | None:
    """The cuDNN work of ``module(*args)``; ``None`` where cuDNN does not run it as one call:
    not one of torch's recurrent layers (or a subclass with its own ``forward``), an input
    that is not a floating tensor or packed sequence, or an empty one."""
    if not isinstance(module, nn.RNNBase) or type(module).forward not in _CUDNN_FORWARDS:
        return None
    gates = _GATES.get(module.mode)
    if gates is None or not args:
        return None
    first = args[0]
    if isinstance(first, PackedSequence):
        tokens, steps = first.data.shape[0], len(first.batch_sizes)
        if steps == 0 or not first.data.is_floating_point():
            return None
        batch, dtype = tokens / steps, first.data.dtype
    elif isinstance(first, torch.Tensor) and first.is_floating_point() and first.dim() in (2, 3):
        if first.dim() == 2:  # one unbatched sequence, (steps, features)
            steps, batch = first.shape[0], 1.0
        else:
            steps, batch = first.shape[1 if module.batch_first else 0], \
                float(first.shape[0 if module.batch_first else 1])
        dtype = first.dtype
    else:
        return None
    if steps == 0 or batch == 0:
        return None
    return RecurrentShape(int(steps), batch, module.input_size, module.hidden_size,
                          module.proj_size, module.num_layers,
                          2 if module.bidirectional else 1, gates, dtype, module.mode)


def _mm(m: float, k: int, n: int, dtype: torch.dtype, backward: bool) -> OpWork:
    """The work of an ``(m x k) @ (k x n)`` product (rounded to whole rows)."""
    rows = max(1, round(m))
    a = torch.empty((rows, k), dtype=dtype, device="meta")
    b = torch.empty((k, n), dtype=dtype, device="meta")
    out = torch.empty((rows, n), dtype=dtype, device="meta")
    return step_work(aten.mm.default, (a, b), {}, out, backward)


def _gates_kernel(batch: float, width: int, dtype: torch.dtype, backward: bool) -> OpWork:
    """A step's fused gate kernel, priced as an elementwise launch over the gates: it reads
    the step's gate pre-activations and writes as many values (the new states, or the
    gates' gradients)."""
    rows = max(1, round(batch))
    gates = torch.empty((rows, width), dtype=dtype, device="meta")
    return step_work(aten.mul.Tensor, (gates, gates), {}, torch.empty_like(gates), backward)


def _zero_fill(batch: float, width: int, dtype: torch.dtype) -> OpWork:
    """A step's memset of a ``batch x width`` buffer, priced as a fill of it."""
    rows = max(1, round(batch))
    buffer = torch.empty((rows, width), dtype=dtype, device="meta")
    return step_work(aten.zero_.default, (buffer,), {}, buffer, True)


def forward_kernels(shape: RecurrentShape) -> list[Kernel]:
    """The forward's kernels."""
    return _kernels(shape, backward=False)


def backward_kernels(shape: RecurrentShape) -> list[Kernel]:
    """The backward's kernels (the inputs' and the weights' gradients)."""
    return _kernels(shape, backward=True)


def _kernels(shape: RecurrentShape, backward: bool) -> list[Kernel]:
    steps, batch, dtype = shape.steps, shape.batch, shape.dtype
    width = shape.gates * shape.hidden_size
    state = shape.proj_size or shape.hidden_size  # what the recurrent product reads
    tokens = round(steps * batch)
    kernels: list[Kernel] = []
    for layer in range(shape.layers):
        features = shape.input_size if layer == 0 else state * shape.directions
        for _ in range(shape.directions):
            per_step = [_mm(batch, state, width, dtype, False), _gates_kernel(batch, width,
                                                                              dtype, False)]
            if backward:
                per_step = [_gates_kernel(batch, width, dtype, True),
                            _mm(batch, width, state, dtype, True)]
            if shape.proj_size:
                per_step.append(_mm(batch, shape.proj_size, shape.hidden_size, dtype, True)
                                if backward else
                                _mm(batch, shape.hidden_size, shape.proj_size, dtype, False))
            if shape.persistent_backward if backward else shape.persistent:
                # one kernel keeps the weights on the chip and runs every step, the gates
                # fused in: its time per step was measured
                recurrent = [Kernel(per_step[1 if backward else 0], steps, 1,
                                    persistent_step_us(shape, backward))]
            else:
                if backward:
                    # and a memset per step: the step lists of eight non-persistent layers on
                    # an H200 held one "Memset (Device)" per step, layer and direction
                    # (gpu_rnn_probe_h200_2026-11-30.txt: 66 for 64 steps, 805 for 3 x 256)
                    per_step.append(_zero_fill(batch, state, dtype))
                recurrent = [Kernel(work, steps, steps) for work in per_step]
            if not backward:
                kernels.append(Kernel(_mm(tokens, features, width, dtype, False), 1, 1))
                kernels.extend(recurrent)
                continue
            kernels.extend(recurrent)
            kernels.append(Kernel(_mm(tokens, width, features, dtype, True), 1, 1))
            # the weights' gradients: (features x tokens) @ (tokens x gates), and the same
            # for the recurrent weights
            kernels.append(Kernel(_mm(features, tokens, width, dtype, True), 1, 1))
            kernels.append(Kernel(_mm(state, tokens, width, dtype, True), 1, 1))
    return kernels
