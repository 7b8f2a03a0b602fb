"""A ``TorchDispatchMode`` that reports every aten operator call to a callback.

No monkey-patching: the mode sits on torch's own mode stack. It can be switched off while a module
whose formula already covers its work is running, so operator accounting costs nothing there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

OperatorCallback = Callable[[torch._ops.OpOverload, tuple[Any, ...], dict[str, Any], Any], None]


class OperatorObserver(TorchDispatchMode):
    """Runs each operator, then calls ``callback(func, args, kwargs, out)``."""

    def __init__(self, callback: OperatorCallback) -> None:
        super().__init__()
        self._callback = callback
        self._active = False

    def __torch_dispatch__(self, func: torch._ops.OpOverload, types: Any,
                           args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
                           ) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self._callback(func, args, kwargs, out)
        return out

    def start(self) -> None:
        """Push the mode (idempotent)."""
        if not self._active:
            self.__enter__()
            self._active = True

    def stop(self) -> None:
        """Pop the mode if it is on the stack (safe to call in ``finally``)."""
        if self._active:
            self._active = False
            self.__exit__(None, None, None)

    def set_active(self, active: bool) -> None:
        """Observe (``True``) or not (``False``) from now on."""
        if active:
            self.start()
        else:
            self.stop()
