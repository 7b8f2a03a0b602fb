"""Recurrent kernels: ``lstm`` / ``gru`` / ``rnn_tanh`` / ``rnn_relu`` (dense and packed),
oneDNN's ``mkldnn_rnn_layer``, cuDNN's ``_cudnn_rnn``, MIOpen's ``miopen_rnn``, the single-step
cells and the fused point-wise cell kernels.

Every kernel counts what the module formulas of ``formulas/recurrent.py`` count for the same
configuration (the per-step arithmetic is shared with them): per row (batch entry x timestep),
per layer and direction, ``g*H*(2*in - 1) + g*H*(2*s - 1)`` for the two matmuls, ``2*g*H``
for the biases, ``H * pointwise`` for the gates and ``proj*(2*H - 1)`` for an LSTM projection;
macs ``g*H*(in + s) + proj*H``. Layer sizes are read from the weights, so a kernel needs no
module to be counted.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

from torch import Tensor

from moduleprofiler.formulas.linear import leading_rows
from moduleprofiler.formulas.recurrent import GATES, POINTWISE_OPS, step_macs, step_ops
from moduleprofiler.operators._common import (
    ZERO,
    Args,
    BoundFormula,
    Count,
    aten,
    named,
    register,
)

_CUDNN_MODES = {0: "RNN_RELU", 1: "RNN_TANH", 2: "LSTM", 3: "GRU"}
"""The ``mode`` integers of ``mkldnn_rnn_layer`` / ``_cudnn_rnn`` / ``miopen_rnn``."""


class Layer(NamedTuple):
    """One layer and direction of a recurrent stack, sized from its weights."""

    in_size: int
    hidden: int
    state: int  # size of the recurrent input: hidden, or proj_size
    proj: int
    bias: bool


def step_count(mode: str, layer: Layer) -> Count:
    """(ops, macs) of one step of one row through ``layer``."""
    ops = step_ops(mode, layer.in_size, layer.hidden, layer.state, layer.proj, layer.bias)
    return ops, step_macs(mode, layer.in_size, layer.hidden, layer.state, layer.proj)


def _layer(mode: str, w_ih: Tensor, w_hh: Tensor, w_hr: Tensor | None, bias: bool) -> Layer:
    hidden = int(w_ih.shape[0]) // GATES[mode]
    proj = int(w_hr.shape[0]) if w_hr is not None else 0
    return Layer(int(w_ih.shape[1]), hidden, int(w_hh.shape[1]), proj, bias)


def _layers(mode: str, params: list[Any], has_biases: bool, per_layer: int | None = None
            ) -> Iterator[Layer]:
    """Layers of a flat weight list ``[w_ih, w_hh, (b_ih, b_hh), (w_hr)] * layers*dirs``.

    Without ``per_layer`` it is inferred: a projected LSTM has one weight more per layer
    (its ``w_hr``), whose row count ``proj`` is the column count of ``w_hh``.
    """
    tensors = [p for p in params if isinstance(p, Tensor)]
    if per_layer is None:
        per_layer = 2 + 2 * int(has_biases)
        # The tensor after a layer's weights is the next layer's w_ih (g*H rows, as the first
        # w_ih) or this layer's w_hr (proj < H rows): torch requires proj_size < hidden_size.
        if len(tensors) > per_layer and int(tensors[per_layer].shape[0]) != int(
            tensors[0].shape[0]
        ):
            per_layer += 1
    for start in range(0, len(tensors) - per_layer + 1, per_layer):
        group = tensors[start : start + per_layer]
        w_hr = group[-1] if per_layer in (3, 5) else None
        yield _layer(mode, group[0], group[1], w_hr, has_biases)


def _stack_count(mode: str, rows: int, layers: Iterator[Layer]) -> Count:
    ops = macs = 0
    for layer in layers:
        step_ops, step_macs = step_count(mode, layer)
        ops += rows * step_ops
        macs += rows * step_macs
    return ops, macs


def _rows(x: Any) -> int:
    """Rows (timesteps x batch) of a ``(..., in)`` input or ``(sum(batch_sizes), in)`` data;
    0 without a feature dim."""
    usable = isinstance(x, Tensor) and x.dim() > 0 and int(x.shape[-1]) > 0
    return leading_rows(x) if usable else 0


def _sequence(mode: str) -> BoundFormula:
    def formula(args: Args, out: Any) -> Count:
        x = args.first()  # ``input`` (dense) or ``data`` (packed)
        params = list(args.get("params") or ())
        if not params:
            return ZERO
        layers = _layers(mode, params, args.flag("has_biases"))
        return _stack_count(mode, _rows(x), layers)

    return named(formula, f"{mode.lower()}_ops",
                 f"rows * sum over layers and directions of the {mode} step (as "
                 f"nn.{mode.split('_')[0]}); rows = timesteps * batch, or sum(batch_sizes) when "
                 "packed.")


for _mode, _name in (("LSTM", "lstm"), ("GRU", "gru"), ("RNN_TANH", "rnn_tanh"),
                     ("RNN_RELU", "rnn_relu")):
    register(*aten(_name))(_sequence(_mode))


@register(*aten("mkldnn_rnn_layer"))
def mkldnn_rnn_layer_ops(args: Args, out: Any) -> Count:
    """rows * step(in, hidden_size) for the one layer and direction this call computes."""
    mode = _CUDNN_MODES.get(int(args.get("mode", 2)), "LSTM")
    w_ih, w_hh = args.tensor("weight0"), args.tensor("weight1")
    if w_ih is None or w_hh is None:
        return ZERO
    layer = _layer(mode, w_ih, w_hh, None, args.flag("has_biases"))
    return _stack_count(mode, _rows(args.first()), iter([layer]))


@register(*aten("_cudnn_rnn", "miopen_rnn"))
def cudnn_rnn_ops(args: Args, out: Any) -> Count:
    """rows * sum over layers and directions of the step (``weight_stride0`` weights each)."""
    mode = _CUDNN_MODES.get(int(args.get("mode", 2)), "LSTM")
    weights = list(args.get("weight") or ())
    per_layer = int(args.get("weight_stride0") or 0)
    if not weights or per_layer < 2:
        return ZERO
    has_biases = per_layer >= 4
    layers = _layers(mode, weights, has_biases, per_layer)
    return _stack_count(mode, _rows(args.first()), layers)


def _cell(mode: str) -> BoundFormula:
    def formula(args: Args, out: Any) -> Count:
        w_ih, w_hh = args.tensor("w_ih"), args.tensor("w_hh")
        if w_ih is None or w_hh is None:
            return ZERO
        biases = int(args.tensor("b_ih") is not None) + int(args.tensor("b_hh") is not None)
        layer = _layer(mode, w_ih, w_hh, None, bias=False)
        ops, macs = step_count(mode, layer)
        ops += biases * GATES[mode] * layer.hidden
        rows = _rows(args.first())
        return rows * ops, rows * macs

    return named(formula, f"{mode.lower()}_cell_ops",
                 f"rows * {mode} step (as nn.{mode.split('_')[0]}Cell); rows = batch.")


for _mode, _name in (("LSTM", "lstm_cell"), ("GRU", "gru_cell"), ("RNN_TANH", "rnn_tanh_cell"),
                     ("RNN_RELU", "rnn_relu_cell")):
    register(*aten(_name))(_cell(_mode))


def _fused_cell(mode: str) -> BoundFormula:
    gates = GATES[mode]

    def formula(args: Args, out: Any) -> Count:
        input_gates = args.first()
        if not isinstance(input_gates, Tensor) or input_gates.dim() == 0:
            return ZERO
        hidden = int(input_gates.shape[-1]) // gates
        rows = _rows(input_gates)
        biases = int(args.tensor("input_bias") is not None)
        biases += int(args.tensor("hidden_bias") is not None)
        return rows * hidden * (POINTWISE_OPS[mode] + biases * gates), 0

    return named(formula, f"fused_{mode.lower()}_cell_ops",
                 f"rows * H * ({POINTWISE_OPS[mode]} + {gates} per bias): the {mode} gate "
                 "arithmetic after the two matmuls, which run as separate mm operators.")


register(*aten("_thnn_fused_lstm_cell"))(_fused_cell("LSTM"))
register(*aten("_thnn_fused_gru_cell"))(_fused_cell("GRU"))
