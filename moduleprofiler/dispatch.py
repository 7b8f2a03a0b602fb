"""A ``TorchDispatchMode`` that reports every aten operator call to a callback.

No monkey-patching: the mode sits on torch's own mode stack. It can be switched off while a module
whose formula already covers its work is running, so operator accounting costs nothing there.

Switching is on the hot path (twice per formula-covered call inside an observed one), so it is
done in two levels: :meth:`OperatorObserver.start` / :meth:`~OperatorObserver.stop` enter and
leave the mode the documented way (``__enter__`` / ``__exit__``, which also keep torch's "a
dispatch mode is on" flags), while :meth:`~OperatorObserver.set_active` in between only pushes
the mode onto, or pops it off, torch's dispatch-mode stack (about a quarter of the cost), and
only when the state changes. :attr:`~OperatorObserver.muted` keeps the mode on the stack but
stops the reports, for the short stretches (a listener's own work at the end of a call) where
popping and pushing again would cost more than letting the few operators through. A pop takes
the top of the stack: when another mode was entered after the observer (a selective activation
checkpoint's, one the model enters itself), the observer is muted in place instead.

Higher-order operators (``torch.cond``, ``while_loop``, ``flex_attention``'s kernel) reach the
mode too, and run as they are: the operators inside them are not seen (modules called inside
are still counted by their formulas), so each is reported as one operator, which has no
formula: its work is unknown and listed, the totals lower bounds. With gradients on they are
refused with a clear error: seen by the mode before autograd, they would lose their backward.
A dispatch mode refuses them by default, which made a model calling ``torch.cond`` fail under
the profiler.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch._ops import HigherOrderOperator
from torch.utils._python_dispatch import TorchDispatchMode

from moduleprofiler.meta_stand_ins import meta_stand_in

OperatorCallback = Callable[[torch._ops.OpOverload, tuple[Any, ...], dict[str, Any], Any], None]

_push_mode = torch._C._push_on_torch_dispatch_stack
_pop_mode = torch._C._pop_torch_dispatch_stack
_stack_len = torch._C._len_torch_dispatch_stack
_stack_at = torch._C._get_dispatch_stack_at


class OperatorObserver(TorchDispatchMode):
    """Runs each operator, then calls ``callback(func, args, kwargs, out)`` (unless muted)."""

    supports_higher_order_operators = True

    def __init__(self, callback: OperatorCallback) -> None:
        super().__init__()
        self._callback = callback
        self._entered = False  # between start() and stop()
        self.pushed = False
        """Whether the mode is on torch's dispatch-mode stack now (operators reach it)."""
        self.muted = False
        """While True, operators still run through the mode but are not reported."""
        self.suspended = False
        """While True (inside a higher-order operator), :meth:`set_active` changes nothing."""
        self._stranded = False
        """Switched off while another mode was above it on the stack (a selective activation
        checkpoint's, one the model enters itself): it stays there, muted, since a pop would
        take that mode off instead."""

    def __torch_dispatch__(self, func: torch._ops.OpOverload, types: Any,
                           args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
                           ) -> Any:
        if kwargs is None:
            kwargs = {}
        if isinstance(func, HigherOrderOperator):
            out = self._run_higher_order(func, args, kwargs)
        else:
            try:
                out = func(*args, **kwargs)
            except RuntimeError:
                out = meta_stand_in(func, args, kwargs)
                if out is None:
                    raise
        if not self.muted:
            self._callback(func, args, kwargs, out)
        return out

    def _run_higher_order(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]
                          ) -> Any:
        if torch.is_grad_enabled():
            # the mode sees it before autograd does: run from here, it would leave autograd
            # (its output would not require grad), a silently different model
            raise NotImplementedError(
                f"the higher-order operator {func.name()!r} cannot be observed with gradients "
                "on (its backward would be lost): profile its forward, without backward")
        # torch popped the mode for this call; module calls inside it (a branch of
        # ``torch.cond`` calling a submodule) must not push or pop it meanwhile
        pushed, suspended = self.pushed, self.suspended
        self.pushed, self.suspended = False, True
        try:
            return func(*args, **kwargs)
        finally:
            self.pushed, self.suspended = pushed, suspended

    def start(self) -> None:
        """Enter the mode and observe (idempotent)."""
        if not self._entered:
            self.__enter__()
            self._entered = self.pushed = True
        elif not self.pushed:
            if not self._stranded:
                _push_mode(self)
            self.pushed, self._stranded = True, False
        self.muted = False

    def stop(self) -> None:
        """Leave the mode if it was entered (safe to call in ``finally``)."""
        if self._entered:
            if not self.pushed and not self._stranded:  # ``__exit__`` pops it: put it back
                _push_mode(self)
            self._entered = self.pushed = self._stranded = False
            self.muted = False
            self.__exit__(None, None, None)

    def set_active(self, active: bool) -> None:
        """Observe (``True``) or not (``False``) from now on; between :meth:`start` and
        :meth:`stop` this only pushes or pops the mode, and only when the state changes."""
        if self.suspended:
            return
        if active:
            if not self._entered:
                self.start()
            elif not self.pushed:  # the common switch, without start()'s call
                if self._stranded:  # still on the stack, under the other mode
                    self._stranded = False
                else:
                    _push_mode(self)
                self.pushed = True
            self.muted = False
        elif self.pushed:
            # one call in the common case (ours on top); asking the stack first cost two more
            # on every switch
            try:
                top = _pop_mode(None)
            except RuntimeError:  # an empty stack: ours was taken off already
                top = self
            if top is not self:
                # a mode entered after ours was on top: it goes back, ours stays under it
                _push_mode(top)
                self._stranded = any(_stack_at(i) is self for i in range(_stack_len()))
            self.pushed = False
            self.muted = self._stranded
