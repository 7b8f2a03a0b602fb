"""Which module's forward raised, read from the exception's traceback: the hook-free passes
(``benchmark``, the 0.0.4 timers) keep no call stack of their own, and running the model
again to find out would repeat whatever the failure cost (and may not fail the same way)."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Literal

from torch import nn

from moduleprofiler.errors import ProfilingError, backward_failed
from moduleprofiler.records import display_path


def failing_module(exc: BaseException, root: nn.Module) -> tuple[str, nn.Module] | None:
    """``(path, module)`` of the innermost module of ``root`` whose method was running when
    ``exc`` was raised (a frame whose ``self`` is one of ``root``'s modules), or ``None``
    when the failure happened outside every one of them (or ``root`` is no module: the pass's
    argument check names that)."""
    if not isinstance(root, nn.Module):
        return None
    paths = {id(module): path for path, module in root.named_modules()}
    found: tuple[str, nn.Module] | None = None
    trace: TracebackType | None = exc.__traceback__
    while trace is not None:  # outermost frame first: the last match is the innermost
        owner = trace.tb_frame.f_locals.get("self")
        if isinstance(owner, nn.Module) and id(owner) in paths:
            found = (paths[id(owner)], owner)
        trace = trace.tb_next
    return found


def located_error(exc: Exception, root: nn.Module) -> ProfilingError | None:
    """A :class:`ProfilingError` naming the module whose forward raised ``exc``, in the words
    the hooked passes use (one message whichever iteration failed), or ``None`` when no module
    of ``root`` was running."""
    failed = failing_module(exc, root)
    if failed is None:
        return None
    path, module = failed
    return ProfilingError(f"forward of module {display_path(path)!r} "
                          f"({type(module).__name__}) raised {type(exc).__name__}: {exc}", path)


def located_errors(module: nn.Module) -> LocatedErrors:
    """``with located_errors(model): ...``: :class:`LocatedErrors`."""
    return LocatedErrors(module)


class LocatedErrors:
    """Turn a forward failure inside a pass that keeps no call stack of its own (the
    hook-free timers) into a :class:`ProfilingError` naming the module whose forward failed
    (:func:`located_error`): the model is not run again. Errors raised outside every module
    (bad arguments) propagate unchanged.

    A class, not a ``contextlib.contextmanager`` generator: one of those takes a
    ``RuntimeError`` (which :class:`ProfilingError` is) chained from a ``StopIteration`` for
    the generator's own misuse and re-raises the bare ``StopIteration``, so a forward that
    raised ``StopIteration`` would not have been named."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 trace: TracebackType | None) -> Literal[False]:
        if exc is None or isinstance(exc, ProfilingError) or not isinstance(exc, Exception):
            return False
        located = located_error(exc, self.module)
        if located is None:
            return False
        raise located from exc


def backward_error(exc: Exception, root: nn.Module,
                   owner: Callable[[BaseException], str]) -> ProfilingError:
    """The :class:`ProfilingError` for a backward that raised ``exc``: the module whose forward
    raised it where one did (a checkpoint rerunning it), else
    :func:`~moduleprofiler.errors.backward_failed`'s (a backward hook, an autograd
    function), with ``owner(exc)``'s words on the module whose backward it was where the
    caller's pass can tell (:meth:`PassRunner.failed_backward_of
    <moduleprofiler.runner.PassRunner.failed_backward_of>`)."""
    located = located_error(exc, root)
    if located is not None:
        return located
    failed = backward_failed(exc)
    where = owner(exc)
    return ProfilingError(f"{failed}{where}") if where else failed
