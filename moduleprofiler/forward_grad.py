"""Passes that run a model's forward without gradients, and forwards that take gradients
themselves.

``profile()``, ``time_modules``, ``benchmark`` and ``measure_memory``'s inference pass run
their forwards under ``torch.no_grad()``: nothing of autograd's graph is built, timed or
metered. A forward that takes gradients itself
(``torch.autograd.grad`` inside it: a force field's forces from its energy) fails there, so
where the caller's own mode allows gradients such a pass runs again with them on, as the model
runs. Called under the caller's ``torch.no_grad()``, the model's error stands: its own call
fails the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import torch

from moduleprofiler.errors import ProfilingError, error_chain

T = TypeVar("T")

_NO_GRAPH = "does not require grad and does not have a grad_fn"
"""What autograd says when a forward asks for the gradient of a tensor that no_grad left
without a graph."""


def takes_gradients(error: BaseException) -> bool:
    """Whether ``error`` is a forward's own gradient failing for want of grad mode."""
    return any(isinstance(cause, RuntimeError) and _NO_GRAPH in str(cause)
               for cause in error_chain(error))


def without_gradients(run: Callable[[bool], T]) -> T:
    """``run(False)``, the pass with gradients off; ``run(True)`` where that failed because the
    forward takes gradients itself and the caller's mode allows them (the module docstring)."""
    try:
        return run(False)
    except ProfilingError as exc:
        if not torch.is_grad_enabled() or not takes_gradients(exc):
            raise
    return run(True)
