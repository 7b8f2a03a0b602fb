"""Exceptions raised by moduleprofiler."""

from __future__ import annotations


class ProfilingError(RuntimeError):
    """A profiling pass could not complete.

    The message names the module path (as in ``named_modules()``, ``""`` for the root)
    whose forward failed; the original exception is chained as ``__cause__``.
    """

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class FormulaError(ProfilingError):
    """A registered formula raised or returned something that is not a count."""


class RegistryError(ValueError):
    """Invalid registration: a duplicate key or a key that is not a module type."""


class LossError(ProfilingError, TypeError):
    """A backward pass found no loss: the model's output holds no floating-point tensor that
    requires grad, and no ``loss_fn`` was given (or it returned something else)."""
