"""Exceptions raised by moduleprofiler."""

from __future__ import annotations

from collections.abc import Iterator


class ProfilingError(RuntimeError):
    """A profiling pass could not complete.

    The message names the module path (as in ``named_modules()``, ``""`` for the root)
    whose forward failed; the original exception is chained as ``__cause__``.
    """

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


def backward_failed(exc: Exception) -> ProfilingError:
    """The :class:`ProfilingError` of a backward pass that raised ``exc`` where no module's
    forward did (a backward hook, an autograd function)."""
    return ProfilingError(f"the backward pass raised {type(exc).__name__}: {exc}")


class FormulaError(ProfilingError):
    """A registered formula raised or returned something that is not a count."""


class RegistryError(ValueError):
    """Invalid registration: a duplicate key or a key that is not a module type."""


class LossError(ProfilingError, TypeError):
    """A backward pass found no loss: the model's output holds no floating-point tensor that
    requires grad, and no ``loss_fn`` was given (or it returned something else)."""


class DeviceDtypeError(ProfilingError, TypeError):
    """An operator that a device would refuse for its tensors' dtypes (a matrix product or
    convolution of mixed or integer dtypes), found where nothing checks them (the meta
    device of :meth:`~moduleprofiler.ModuleProfiler.predict`). ``path`` names the module
    whose forward ran it, ``dtypes`` the dtypes of its operands."""

    def __init__(self, message: str, path: str | None, dtypes: tuple[object, ...]) -> None:
        super().__init__(message, path)
        self.dtypes = dtypes


class MixedDeviceError(ValueError):
    """A pass cannot tell which device it runs on: the model and its input are on devices of
    different types (a model on ``cuda`` called with a CPU tensor). The message names where
    each is; ``device=`` says which to use."""


class DeviceUnavailableError(RuntimeError):
    """A device asked for that this process cannot use (no such backend here, or fewer
    devices than its index needs); the message names the argument."""


class InputMismatchError(ValueError):
    """``Profile.merge`` was given the result of a pass over another input than this one's (a
    batch of 64 beside a batch of 1): its times or bytes would stand beside counts they were
    not measured with. The message names both inputs' shapes; ``mine`` and ``theirs`` hold
    their shape trees."""

    def __init__(self, message: str, mine: object, theirs: object) -> None:
        super().__init__(message)
        self.mine = mine
        self.theirs = theirs


class RescaledColumnError(KeyError, ValueError):
    """A column name that was retired when its quantity moved to another column on another
    scale (``ops_fraction``, 0-1, is ``self_ops_pct``, 0-100): selecting it is refused rather
    than answered with numbers 100 times what the old name meant. ``new`` names the column to
    use. A ``KeyError`` and a ``ValueError``, as the unknown column names of the views are."""

    def __init__(self, message: str, name: str, new: str) -> None:
        super().__init__(message)
        self.name = name
        self.new = new

    def __str__(self) -> str:  # the message, not KeyError's repr of it
        return str(self.args[0])


def error_chain(error: BaseException) -> Iterator[BaseException]:
    """``error``, then the exception it was raised from (``__cause__``, else the one it was
    raised while handling), and so on, each once."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__
