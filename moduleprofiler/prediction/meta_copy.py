"""A copy of a model on the meta device (parameters and buffers as meta tensors: no memory, no
computation), optionally cast to a dtype; the user's model is not touched."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_map


def _meta(tensor: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    target = dtype if dtype is not None and tensor.is_floating_point() else tensor.dtype
    return torch.empty_like(tensor, device="meta", dtype=target)


def meta_copy(model: nn.Module, dtype: torch.dtype | None = None) -> nn.Module:
    """``model`` rebuilt on the meta device: its modules copied, each parameter and buffer
    replaced by a meta tensor of the same shape (and ``dtype`` for floating ones)."""
    memo: dict[int, Any] = {}
    for parameter in model.parameters():
        memo[id(parameter)] = nn.Parameter(_meta(parameter, dtype),
                                           requires_grad=parameter.requires_grad)
    for buffer in model.buffers():
        memo[id(buffer)] = _meta(buffer, dtype)
    return copy.deepcopy(model, memo)


def meta_input(value: Any, dtype: torch.dtype | None = None) -> Any:
    """``value`` with every tensor as a meta tensor (floating ones cast to ``dtype``)."""
    def convert(item: Any) -> Any:
        if isinstance(item, torch.Tensor):
            converted = _meta(item, dtype)
            return converted.requires_grad_(item.requires_grad) if \
                converted.is_floating_point() else converted
        return item
    return tree_map(convert, value)


class FusedAttentionOnMeta(TorchFunctionMode):
    """On the meta device ``scaled_dot_product_attention`` would run its unfused math
    (matmuls and a softmax), where a GPU runs one fused kernel: run the fused operator's meta
    kernel instead, so the operators seen are the ones a GPU runs (forward and backward)."""

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if func is F.scaled_dot_product_attention:
            fused = _fused_attention(*args, **kwargs)
            if fused is not None:
                return fused
        return func(*args, **kwargs)


def _fused_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                     is_causal: bool = False, scale: float | None = None,
                     enable_gqa: bool = False) -> torch.Tensor | None:
    if query.device.type != "meta" or query.dim() != 4 or enable_gqa or \
            key.shape[1] != query.shape[1]:
        return None
    grad = torch.is_grad_enabled() and any(
        t.requires_grad for t in (query, key, value))
    try:
        return torch.ops.aten._scaled_dot_product_efficient_attention(
            query, key, value, attn_mask, grad, dropout_p, is_causal, scale=scale)[0]
    except (RuntimeError, TypeError):
        return None
