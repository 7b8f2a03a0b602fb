"""The kernels cuDNN runs for ``nn.LSTM``, ``nn.GRU`` and ``nn.RNN`` on a GPU.

On the meta device a recurrent layer's call decomposes into its per-step operators (a matrix
product, a bias addition, the gates' activations and products, about a dozen per step, layer
and direction), each a launch of its own. A GPU runs the layer as one ``_cudnn_rnn`` call:
per layer and direction one matrix product projects the whole sequence's inputs onto the
gates, then each step runs one product of the hidden state with the recurrent weights and one
fused kernel for the gates (plus the projection's product where ``proj_size`` is set). The
backward mirrors it: per step the hidden state's gradient and the gates' backward, then one
product each for the input's gradient and the two weights' gradients.

:func:`recurrent_shape` reads what those kernels need from the call; :func:`forward_kernels`
and :func:`backward_kernels` list them as the prediction prices operators (matrix products on
the ``gemm`` tables, the fused gate kernels as elementwise launches over the gates).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence

from moduleprofiler.prediction.backward_classes import step_work
from moduleprofiler.prediction.op_classes import OpWork

aten = torch.ops.aten

_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}
"""Gate blocks per hidden unit of each cuDNN mode (``nn.RNNBase.mode``)."""

PERSISTENT_HIDDEN = 128
"""Hidden sizes up to this run on cuDNN's persistent kernels: one launch per layer and
direction runs every step (seen on an H200 with cuDNN 9.19 for hidden sizes 64 and 128; 256
ran a product and a gate kernel per step)."""

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
    def persistent(self) -> bool:
        """Whether cuDNN runs each layer and direction as one persistent kernel
        (:data:`PERSISTENT_HIDDEN`)."""
        return self.hidden_size <= PERSISTENT_HIDDEN

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
            if shape.persistent:
                # one kernel keeps the weights on chip and runs every step: each step costs
                # about its recurrent product, the gates fused into it
                recurrent = [Kernel(per_step[1 if backward else 0], steps, 1)]
            else:
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
