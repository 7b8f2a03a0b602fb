"""Formulas for Hugging Face layers, registered by dotted class name so that ``transformers``
is never imported by moduleprofiler.

``Conv1D`` (GPT-2, OpenAI GPT, ImageGPT, CLVP, Decision Transformer...) is a linear layer with
a transposed weight of shape ``(nx, nf)`` and a bias that is always there:
``y = x @ W + b``, computed with one ``addmm``. The class has lived in three modules; each key
below is a real ``__module__ + "." + __qualname__``:

* ``transformers.pytorch_utils.Conv1D``: transformers 4.x releases since the move out of
  ``modeling_utils`` (``modeling_utils`` still re-exports it, but the class's own module is
  ``pytorch_utils``), and 5.x;
* ``transformers.modeling_utils.Conv1D``: the older transformers releases that defined it there;
* ``pytorch_transformers.modeling_utils.Conv1D``: the package's name before ``transformers``.

``NewGELUActivation`` (GPT-2's ``gelu_new``) spells the tanh approximation of GELU out in
eight elementwise operators; it counts what ``nn.GELU(approximate="tanh")`` counts, as those
operators do, without observing each of them (a third of GPT-2's observed operators).
"""

from __future__ import annotations

from typing import Any

from torch import nn

from moduleprofiler.formulas._common import no_macs, numel_of_first
from moduleprofiler.formulas.activation import GELU_TANH
from moduleprofiler.registry import register_macs, register_ops

CONV1D_KEYS = (
    "transformers.pytorch_utils.Conv1D",
    "transformers.modeling_utils.Conv1D",
    "pytorch_transformers.modeling_utils.Conv1D",
)


def _conv1d_macs(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> int:
    # nx and nf from the call's tensors (the weight is (nx, nf), transposed w.r.t. nn.Linear):
    # what the call computed with, and no weight read (a parametrized one would be computed
    # again)
    x = inputs[0]
    rows = int(x.shape[:-1].numel())
    return rows * int(x.shape[-1]) * int(output.shape[-1])


@register_ops(*CONV1D_KEYS)
def hf_conv1d_ops(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> int:
    """2 * rows * nx * nf: rows * nf dot products of length nx (2 * nx - 1) plus the bias add."""
    return 2 * _conv1d_macs(module, inputs, output)


@register_macs(*CONV1D_KEYS)
def hf_conv1d_macs(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> int:
    """rows * nx * nf."""
    return _conv1d_macs(module, inputs, output)


NEW_GELU_KEYS = ("transformers.activations.NewGELUActivation",)


@register_ops(*NEW_GELU_KEYS)
def hf_new_gelu_ops(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> int:
    """numel * 15: 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3))), as
    ``nn.GELU(approximate="tanh")`` (``GELU_TANH``)."""
    return numel_of_first(inputs) * GELU_TANH


register_macs(*NEW_GELU_KEYS)(no_macs)
