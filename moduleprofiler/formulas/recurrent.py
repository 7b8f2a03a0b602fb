"""Recurrent layers: ``nn.RNN``, ``nn.GRU``, ``nn.LSTM`` and their single-step cells.

Every recurrent layer repeats one *step* per timestep, per layer and per direction. A step for a
hidden size ``H`` with ``g`` gates (RNN 1, GRU 3, LSTM 4), input size ``in`` and recurrent
state size ``s`` (``H``, or ``proj_size`` for a projected LSTM) costs

* ``g*H*(2*in - 1)``: the input matmul ``W_i x`` (a dot product of length ``in`` per gate unit),
* ``g*H*(2*s - 1)``: the recurrent matmul ``W_h h``,
* ``2*g*H`` with bias: the two bias vectors ``b_i`` and ``b_h``,
* ``H * pointwise``: the gate arithmetic after the matmuls (see ``POINTWISE_OPS``),
* ``proj*(2*H - 1)``: an LSTM projection ``h = W_hr h``, when ``proj_size`` is set.

Element-wise functions cost what their module formulas in ``activation.py`` cost: sigmoid 3
(exp, add, divide), tanh 7, ReLU 1 (one comparison).

``macs`` are the matmul multiply-accumulates only: ``g*H*(in + s) + proj*H`` per step.

Summed up, a step with bias costs ``2*g*H*(in + s + c)`` with ``c = pointwise / (2*g)``, and
``c = (pointwise - 2*g) / (2*g)`` without bias: GRU ``21/6 = 3.5`` and ``15/6 = 2.5``, LSTM
``31/8 = 3.875`` and ``23/8 = 2.875``. These are moduleprofiler 0.0.4's fractional constants,
so GRU and LSTM give 0.0.4's numbers exactly (with or without bias, uni- or bidirectional, any
number of layers), as integers. See ``docs/formulas/recurrent.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence

from moduleprofiler.formulas.activation import PER_ELEMENT, SIGMOID, TANH
from moduleprofiler.formulas.distance import dot_ops
from moduleprofiler.formulas.linear import leading_rows, linear_layer_ops
from moduleprofiler.formulas.parts import (
    BUILT_IN_MACS,
    BUILT_IN_OPS,
    Parts,
    float_dtype,
    total,
    with_parts,
)
from moduleprofiler.formulas.zero import DROPOUT_ELEMENT_OPS, DROPOUT_MASK_OPS
from moduleprofiler.registry import Count, register_macs, register_ops

GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "GRU": 3, "LSTM": 4}
"""Gates per hidden unit of each recurrent mode (torch's ``mode`` names)."""

POINTWISE_OPS = {
    # h' = tanh(a_i + a_h): 1 add + tanh
    "RNN_TANH": 1 + TANH,
    # h' = relu(a_i + a_h): 1 add + relu
    "RNN_RELU": 1 + PER_ELEMENT[nn.ReLU],
    # r = sig(a_ir + a_hr), z = sig(a_iz + a_hz)       2 adds + 2 sigmoids
    # n = tanh(a_in + r * a_hn)                          1 multiply + 1 add + tanh
    # h' = (1 - z) * n + z * h                           1 sub + 2 multiplies + 1 add
    "GRU": 2 + 2 * SIGMOID + 2 + TANH + 4,
    # i, f, o = sig(a_i* + a_h*), g = tanh(a_ig + a_hg)  4 adds + 3 sigmoids + tanh
    # c' = f * c + i * g                                 2 multiplies + 1 add
    # h' = o * tanh(c')                                  tanh + 1 multiply
    "LSTM": 4 + 3 * SIGMOID + TANH + 3 + TANH + 1,
}
"""Ops per hidden unit per step after the matmuls and bias adds (``a_*`` are matmul outputs).

RNN tanh 8, RNN relu 2, GRU 21, LSTM 31.
"""


GATE_FUNCTIONS: dict[str, tuple[tuple[type[nn.Module], int], ...]] = {
    "RNN_TANH": ((nn.Tanh, 1),),
    "RNN_RELU": ((nn.ReLU, 1),),
    "GRU": ((nn.Sigmoid, 2), (nn.Tanh, 1)),  # r, z; n
    "LSTM": ((nn.Sigmoid, 3), (nn.Tanh, 2)),  # i, f, o; g, tanh(c')
}
"""The gate functions of a step (each on ``H`` values per row), part of ``POINTWISE_OPS``:
priced as the profiler prices ``nn.Sigmoid`` / ``nn.Tanh`` / ``nn.ReLU``."""


def step_ops(mode: str, in_size: int, hidden: int, state: int, proj: int, bias: bool) -> int:
    """Ops of one step for one batch row: matmuls, bias adds, gate arithmetic, projection."""
    gates = GATES[mode]
    ops = gates * hidden * (dot_ops(in_size) + dot_ops(state))
    if bias:
        ops += 2 * gates * hidden
    ops += hidden * POINTWISE_OPS[mode]
    return ops + proj * dot_ops(hidden)


def step_macs(mode: str, in_size: int, hidden: int, state: int, proj: int) -> int:
    """Multiply-accumulates of one step for one batch row: ``g*H*(in + s) + proj*H``."""
    return GATES[mode] * hidden * (in_size + state) + proj * hidden


def _rows(x: Any) -> int:
    """Steps times batch rows of a recurrent input.

    A ``PackedSequence`` holds one row per real timestep of every sequence, so its data has
    ``sum(batch_sizes)`` rows; a tensor ``(L, N, in)``, ``(N, L, in)``, ``(L, in)``, ``(N, in)``
    or ``(in,)`` has ``numel / in`` rows whatever its layout.
    """
    data = x.data if isinstance(x, PackedSequence) else x
    return leading_rows(data) if isinstance(data, Tensor) else 0


def _dtype(inputs: tuple[Any, ...], parts: Parts) -> torch.dtype:
    """The dtype of a recurrent call's input (a stand-in part's dtype; the default dtype
    where no part is priced by a call)."""
    if not parts:
        return torch.get_default_dtype()
    x = inputs[0] if inputs else None
    return float_dtype(x.data if isinstance(x, PackedSequence) else x)


def _step_parts(parts: Parts, mode: str, rows: int, in_size: int, hidden: int, state: int,
                proj: int, bias: bool, dtype: torch.dtype) -> Count:
    """``rows * step_ops(...)`` with its parts priced as the profiler prices their layer
    types (``moduleprofiler.formulas.parts``): the input and recurrent products and the
    projection as ``nn.Linear`` (one call each over all ``rows``), each gate function as its
    module; the gate adds and multiplies as built in."""
    if not parts:
        return rows * step_ops(mode, in_size, hidden, state, proj, bias)
    width = GATES[mode] * hidden
    functions = GATE_FUNCTIONS[mode]
    arithmetic = POINTWISE_OPS[mode] - sum(PER_ELEMENT[cls] * n for cls, n in functions)
    counts: list[Count] = [
        rows * hidden * arithmetic,
        parts.linear((rows,), in_size, width, bias,
                     linear_layer_ops(rows, in_size, width, bias), dtype),  # W_i x
        parts.linear((rows,), state, width, bias,
                     linear_layer_ops(rows, state, width, bias), dtype),  # W_h h
    ]
    for cls, n in functions:
        counts += [parts.elementwise(cls, (rows, hidden), rows * hidden * PER_ELEMENT[cls],
                                     dtype)] * n
    if proj:
        counts.append(parts.linear((rows,), hidden, proj, False,
                                   linear_layer_ops(rows, hidden, proj, False), dtype))
    return total(*counts)


def _step_macs_parts(parts: Parts, mode: str, rows: int, in_size: int, hidden: int,
                     state: int, proj: int, bias: bool, dtype: torch.dtype) -> Count:
    """``rows * step_macs(...)``, the products priced as the profiler prices ``nn.Linear``."""
    if not parts:
        return rows * step_macs(mode, in_size, hidden, state, proj)
    width = GATES[mode] * hidden
    return total(
        parts.linear((rows,), in_size, width, bias, rows * in_size * width, dtype),
        parts.linear((rows,), state, width, bias, rows * state * width, dtype),
        parts.linear((rows,), hidden, proj, False, rows * hidden * proj, dtype) if proj else 0,
    )


_Step = Callable[[Parts, str, int, int, int, int, int, bool, torch.dtype], Count]


def _stack_cost(module: nn.RNNBase, parts: Parts, step: _Step, rows: int,
                dtype: torch.dtype) -> Count:
    """Sum of ``step(...)`` over the layers and directions of an RNN stack."""
    directions = 2 if module.bidirectional else 1
    proj = module.proj_size
    out_size = proj or module.hidden_size
    cost: int | float = 0
    for layer in range(module.num_layers):
        # Layers after the first read both directions' outputs of the layer below.
        in_size = module.input_size if layer == 0 else directions * out_size
        count = step(parts, module.mode, rows, in_size, module.hidden_size, out_size, proj,
                     module.bias, dtype)
        if count is None:  # a part the profiler cannot price: unknown
            return None
        cost += directions * count
    return cost


def _dropout_ops(module: nn.RNNBase, rows: int, parts: Parts, dtype: torch.dtype) -> Count:
    """Dropout on the outputs of every layer but the last: 0 in eval, as ``nn.Dropout``."""
    if not module.training or module.dropout == 0:
        return 0
    directions = 2 if module.bidirectional else 1
    width = directions * (module.proj_size or module.hidden_size)
    dropped = parts.elementwise(nn.Dropout, (rows, width),
                                rows * width * (DROPOUT_MASK_OPS + DROPOUT_ELEMENT_OPS), dtype,
                                p=float(module.dropout))
    return total(*[dropped] * (module.num_layers - 1))


def _rnn_ops(parts: Parts) -> Callable[..., Count]:
    def rnn_ops(module: nn.RNNBase, inputs: tuple[Any, ...], output: Any) -> Count:
        """rows * (sum over layers l, directions of step_ops(in_l)); packed: rows =
        sum(batch_sizes)."""
        rows, dtype = (_rows(inputs[0]) if inputs else 0), _dtype(inputs, parts)
        stack = _stack_cost(module, parts, _step_parts, rows, dtype)
        if not module.training or module.dropout == 0:
            return stack
        return total(stack, _dropout_ops(module, rows, parts, dtype))

    return rnn_ops


def _rnn_macs(parts: Parts) -> Callable[..., Count]:
    def rnn_macs(module: nn.RNNBase, inputs: tuple[Any, ...], output: Any) -> Count:
        """rows * sum over layers and directions of gates*H*(in_l + state) + proj*H."""
        rows = _rows(inputs[0]) if inputs else 0
        return _stack_cost(module, parts, _step_macs_parts, rows, _dtype(inputs, parts))

    return rnn_macs


# the gate products, gate functions and dropout are priced as the profiler prices their
# layer types
rnn_ops = register_ops(nn.RNN, nn.GRU, nn.LSTM)(with_parts(BUILT_IN_OPS, _rnn_ops))
rnn_macs = register_macs(nn.RNN, nn.GRU, nn.LSTM)(with_parts(BUILT_IN_MACS, _rnn_macs))


def _cell_mode(module: nn.RNNCellBase) -> str:
    if isinstance(module, nn.LSTMCell):
        return "LSTM"
    if isinstance(module, nn.GRUCell):
        return "GRU"
    return "RNN_RELU" if getattr(module, "nonlinearity", "tanh") == "relu" else "RNN_TANH"


def _cell_sizes(module: nn.RNNCellBase, inputs: tuple[Any, ...], output: Any
                ) -> tuple[int, int]:
    """``(input size, hidden size)`` of a cell's call: the last dims of its input and of its
    new state (``h'``; LSTMCell returns ``(h', c')``), which match the weights the call used
    where ``input_size`` / ``hidden_size`` need not (a weight replaced by one of another
    shape)."""
    state = output[0] if isinstance(output, tuple) else output
    if not inputs or not isinstance(inputs[0], Tensor) or not isinstance(state, Tensor):
        return module.input_size, module.hidden_size
    return int(inputs[0].size(-1)), int(state.size(-1))


def _cell_ops(parts: Parts) -> Callable[..., Count]:
    def rnn_cell_ops(module: nn.RNNCellBase, inputs: tuple[Any, ...], output: Any) -> Count:
        """rows * step_ops(input_size) with rows = batch (1 for a 1-D input)."""
        rows = _rows(inputs[0]) if inputs else 0
        in_size, hidden = _cell_sizes(module, inputs, output)
        # ``module.bias`` is a bool here (0.0.4 tested ``is not None`` and always counted
        # bias: B3).
        return _step_parts(parts, _cell_mode(module), rows, in_size, hidden, hidden, 0,
                           module.bias, _dtype(inputs, parts))

    return rnn_cell_ops


def _cell_macs(parts: Parts) -> Callable[..., Count]:
    def rnn_cell_macs(module: nn.RNNCellBase, inputs: tuple[Any, ...], output: Any) -> Count:
        """rows * gates * H * (input_size + H)."""
        rows = _rows(inputs[0]) if inputs else 0
        in_size, hidden = _cell_sizes(module, inputs, output)
        return _step_macs_parts(parts, _cell_mode(module), rows, in_size, hidden, hidden, 0,
                                module.bias, _dtype(inputs, parts))

    return rnn_cell_macs


rnn_cell_ops = register_ops(nn.RNNCell, nn.GRUCell, nn.LSTMCell)(
    with_parts(BUILT_IN_OPS, _cell_ops))
rnn_cell_macs = register_macs(nn.RNNCell, nn.GRUCell, nn.LSTMCell)(
    with_parts(BUILT_IN_MACS, _cell_macs))
