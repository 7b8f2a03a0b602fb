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

from torch import Tensor, nn
from torch.nn.utils.rnn import PackedSequence

from moduleprofiler.formulas.activation import PER_ELEMENT, SIGMOID, TANH
from moduleprofiler.formulas.linear import leading_rows
from moduleprofiler.formulas.zero import DROPOUT_ELEMENT_OPS, DROPOUT_MASK_OPS
from moduleprofiler.registry import register_macs, register_ops

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


def step_ops(mode: str, in_size: int, hidden: int, state: int, proj: int, bias: bool) -> int:
    """Ops of one step for one batch row: matmuls, bias adds, gate arithmetic, projection."""
    gates = GATES[mode]
    ops = gates * hidden * ((2 * in_size - 1) + (2 * state - 1))
    if bias:
        ops += 2 * gates * hidden
    ops += hidden * POINTWISE_OPS[mode]
    return ops + proj * (2 * hidden - 1)


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


def _stack_cost(module: nn.RNNBase, per_step: Callable[[int, int, int], int]) -> int:
    """Sum ``per_step(in_size, state, proj)`` over layers and directions of an RNN stack."""
    directions = 2 if module.bidirectional else 1
    proj = module.proj_size
    out_size = proj or module.hidden_size
    total = 0
    for layer in range(module.num_layers):
        # Layers after the first read both directions' outputs of the layer below.
        in_size = module.input_size if layer == 0 else directions * out_size
        total += directions * per_step(in_size, out_size, proj)
    return total


def _dropout_ops(module: nn.RNNBase, rows: int) -> int:
    """Dropout on the outputs of every layer but the last: 0 in eval, as ``nn.Dropout``."""
    if not module.training or module.dropout == 0:
        return 0
    directions = 2 if module.bidirectional else 1
    dropped = rows * directions * (module.proj_size or module.hidden_size)
    return (module.num_layers - 1) * dropped * (DROPOUT_MASK_OPS + DROPOUT_ELEMENT_OPS)


@register_ops(nn.RNN, nn.GRU, nn.LSTM)
def rnn_ops(module: nn.RNNBase, inputs: tuple[Any, ...], output: Any) -> int:
    """rows * (sum over layers l, directions of step_ops(in_l)); packed: rows = sum(batch_sizes)."""
    rows = _rows(inputs[0]) if inputs else 0
    steps = rows * _stack_cost(
        module,
        lambda in_size, state, proj: step_ops(
            module.mode, in_size, module.hidden_size, state, proj, module.bias
        ),
    )
    return steps + _dropout_ops(module, rows)


@register_macs(nn.RNN, nn.GRU, nn.LSTM)
def rnn_macs(module: nn.RNNBase, inputs: tuple[Any, ...], output: Any) -> int:
    """rows * sum over layers and directions of gates*H*(in_l + state) + proj*H."""
    rows = _rows(inputs[0]) if inputs else 0
    return rows * _stack_cost(
        module,
        lambda in_size, state, proj: step_macs(
            module.mode, in_size, module.hidden_size, state, proj
        ),
    )


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


@register_ops(nn.RNNCell, nn.GRUCell, nn.LSTMCell)
def rnn_cell_ops(module: nn.RNNCellBase, inputs: tuple[Any, ...], output: Any) -> int:
    """rows * step_ops(input_size) with rows = batch (1 for a 1-D input)."""
    rows = _rows(inputs[0]) if inputs else 0
    in_size, hidden = _cell_sizes(module, inputs, output)
    # ``module.bias`` is a bool here (0.0.4 tested ``is not None`` and always counted bias: B3).
    return rows * step_ops(_cell_mode(module), in_size, hidden, hidden, 0, module.bias)


@register_macs(nn.RNNCell, nn.GRUCell, nn.LSTMCell)
def rnn_cell_macs(module: nn.RNNCellBase, inputs: tuple[Any, ...], output: Any) -> int:
    """rows * gates * H * (input_size + H)."""
    rows = _rows(inputs[0]) if inputs else 0
    in_size, hidden = _cell_sizes(module, inputs, output)
    return rows * step_macs(_cell_mode(module), in_size, hidden, hidden, 0)
