"""Taking CUDA's memory-relevant kernel choices on the meta device.

Some composite operations pick their kernels by device, and the choice changes what autograd
keeps for backward:

* ``F.dropout`` in training: CUDA runs ``native_dropout`` and saves a ``bool`` mask (1 byte per
  element); CPU and meta scale a float noise tensor (4 bytes per element for float32).
* ``F.scaled_dot_product_attention``: CUDA runs the flash kernel (float16/bfloat16, no mask) or
  the memory-efficient kernel (otherwise), which save the output and a log-sum-exp per row; CPU
  and meta with dropout (and meta always) run the math path, which saves the full
  ``heads x seq x seq`` attention matrix.

:class:`CudaKernelChoices` is a ``TorchFunctionMode`` that routes these calls to the CUDA
kernels' own operators, whose meta kernels give the same output and saved tensors, so that a
plan made on the meta device predicts a CUDA run. Anything it does not recognise runs as is.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.overrides import TorchFunctionMode

_DROPOUT = inspect.signature(F.dropout)
_SDPA_PARAMETERS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale",
                    "enable_gqa")
_HALF = (torch.float16, torch.bfloat16)


class CudaKernelChoices(TorchFunctionMode):
    """Route ``F.dropout`` and ``F.scaled_dot_product_attention`` to the operators CUDA would
    run (meta device only: the CUDA attention operators have no CPU kernels)."""

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        if func is F.dropout or func is torch.dropout:
            return self._dropout(func, args, kwargs)
        if func is F.scaled_dot_product_attention:
            return self._attention(func, args, kwargs)
        return func(*args, **kwargs)

    @staticmethod
    def _dropout(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if func is torch.dropout:  # torch.dropout(input, p, train)
            named = dict(zip(("input", "p", "train"), args), **kwargs)
            input, p, training, inplace = named["input"], named["p"], named["train"], False
        else:
            bound = _DROPOUT.bind(*args, **kwargs)
            bound.apply_defaults()
            input, p = bound.arguments["input"], bound.arguments["p"]
            training, inplace = bound.arguments["training"], bound.arguments["inplace"]
        if not training or inplace or not 0 < p < 1 or not isinstance(input, Tensor) \
                or input.numel() == 0:
            return func(*args, **kwargs)
        return torch.native_dropout(input, p, True)[0]

    @staticmethod
    def _attention(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        bound = {**dict(zip(_SDPA_PARAMETERS, args)), **kwargs}
        query, key, value = bound["query"], bound["key"], bound["value"]
        mask = bound.get("attn_mask")
        dropout, causal = float(bound.get("dropout_p", 0.0)), bool(bound.get("is_causal", False))
        scale = bound.get("scale")
        if bound.get("enable_gqa") or any(
            not isinstance(t, Tensor) or t.dim() != 4 or t.is_nested for t in (query, key, value)
        ) or not query.dtype == key.dtype == value.dtype or key.shape[1] != query.shape[1]:
            return func(*args, **kwargs)
        head = query.shape[-1]
        grad = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
        if query.dtype in _HALF and mask is None and head <= 256 and head % 8 == 0:
            return torch.ops.aten._scaled_dot_product_flash_attention(
                query, key, value, dropout, causal, False, scale=scale)[0]
        if query.dtype in (*_HALF, torch.float32) and head % 4 == 0:
            if isinstance(mask, Tensor) and mask.dtype == torch.bool:
                mask = torch.where(mask.logical_not(), float("-inf"), 0.0).to(query.dtype)
            return torch.ops.aten._scaled_dot_product_efficient_attention(
                query, key, value, mask, grad, dropout, causal, scale=scale)[0]
        return func(*args, **kwargs)
