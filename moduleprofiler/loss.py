"""The one default loss, used by every pass that runs a backward without a ``loss_fn``.

Its rule is stated once, for users, in docs/architecture.md ("The default loss");
:func:`default_loss` applies its steps in order, each numbered as there.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor

from moduleprofiler.errors import LossError
from moduleprofiler.shapes import iter_tensors

LossFn = Callable[[Any], Tensor]


def _scalar_with_grad(value: Any) -> bool:
    return (isinstance(value, Tensor) and value.numel() == 1 and value.is_floating_point()
            and value.requires_grad)


def default_loss(output: Any) -> Tensor:
    """The scalar a backward pass differentiates when no ``loss_fn`` is given (the rule:
    docs/architecture.md, "The default loss").

    Raises:
        LossError: the output holds no floating-point tensor that requires grad.
    """
    if _scalar_with_grad(output):  # 1.
        return output  # type: ignore[no-any-return]
    if isinstance(output, Mapping):  # 2.
        loss = output.get("loss")
    elif isinstance(output, (tuple, list)):
        # Hugging Face's return_dict=False: (loss, logits, ...), the loss first (the Trainer
        # reads outputs[0]); summing the logits too would differentiate more than training does
        loss = output[0] if output else None
    else:
        loss = getattr(output, "loss", None)
    if isinstance(loss, Tensor) and _scalar_with_grad(loss):
        return loss
    tensors = list(iter_tensors(output))  # 3.
    parts = [t.sum() for t in tensors if t.is_floating_point() and t.requires_grad]
    if not parts:  # 4.
        if torch.is_inference_mode_enabled() or any(t.is_inference() for t in tensors):
            raise LossError(
                f"cannot derive a loss from the model's output ({type(output).__name__}): it was "
                "computed under torch.inference_mode(), which records no autograd graph; run "
                "the backward pass outside the inference_mode block")
        raise LossError(
            f"cannot derive a loss from the model's output ({type(output).__name__}): it holds "
            "no floating-point tensor that requires grad; pass loss_fn=, a function from the "
            "output to a scalar tensor")
    return functools.reduce(torch.add, parts)


def user_loss(loss_fn: Callable[..., Any], *args: Any) -> Tensor:
    """``loss_fn(*args)``, checked as the backward pass needs it: one element, a tensor.

    Raises:
        LossError: ``loss_fn`` raised (the cause chained), or returned something other than a
            one-element tensor (a tensor that does not require grad is left to the caller,
            which can say why).
    """
    try:
        loss = loss_fn(*args)
    except LossError:
        raise
    except Exception as exc:
        raise LossError(f"loss_fn raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(loss, Tensor):
        raise LossError(f"loss_fn returned {type(loss).__name__}: the backward pass needs a "
                        "one-element tensor that requires grad")
    if loss.numel() != 1:
        raise LossError(f"loss_fn returned a tensor of shape {tuple(loss.shape)}: the backward "
                        "pass needs a one-element loss (reduce it, e.g. with .sum() or "
                        ".mean())")
    return loss


def loss_of(output: Any, loss_fn: Callable[..., Any] | None, *args: Any) -> Tensor:
    """The loss a backward pass differentiates: ``loss_fn(output, *args)`` checked by
    :func:`user_loss`, or without ``loss_fn`` the :func:`default_loss` of ``output``."""
    return default_loss(output) if loss_fn is None else user_loss(loss_fn, output, *args)
