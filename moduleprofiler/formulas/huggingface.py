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
"""

from __future__ import annotations

from typing import Any

from torch import nn

from moduleprofiler.registry import register_macs, register_ops
from moduleprofiler.tensors import module_tensor

CONV1D_KEYS = (
    "transformers.pytorch_utils.Conv1D",
    "transformers.modeling_utils.Conv1D",
    "pytorch_transformers.modeling_utils.Conv1D",
)


def _conv1d_macs(module: nn.Module, inputs: tuple[Any, ...]) -> int:
    # the weight read from the parameter table (``module_tensor``): ``get_parameter`` splits
    # a dotted path and type-checks on every call, a third of this formula's cost
    nx, nf = module_tensor(module, "weight").shape  # (in, out): transposed w.r.t. nn.Linear
    rows = int(inputs[0].shape[:-1].numel())
    return rows * int(nx) * int(nf)


@register_ops(*CONV1D_KEYS)
def hf_conv1d_ops(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> int:
    """2 * rows * nx * nf: rows * nf dot products of length nx (2 * nx - 1) plus the bias add."""
    return 2 * _conv1d_macs(module, inputs)


@register_macs(*CONV1D_KEYS)
def hf_conv1d_macs(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> int:
    """rows * nx * nf."""
    return _conv1d_macs(module, inputs)
