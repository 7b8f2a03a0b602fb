"""moduleprofiler 0.0.4's io-size map: module type -> ``(module, inputs, output) ->
(input_size, output_size)``, with the ``"default"`` key for every other type.

Every call's sizes come from :func:`moduleprofiler.shapes.default_io_size` (the first
positional input's shape and the whole output's), which the core records for every call
anyway. 0.0.4's map had keys of its own for ``GRUCell``, ``GRU``, ``LSTMCell`` and ``LSTM``
(functions that dropped dimensions); they are kept as keys, so that code reading
``get_default_io_size_map()[nn.LSTM]`` runs, and give the same exact shapes. Functions
registered here, or put in a profiler's ``io_size_fn_map``, replace it for their types (and
subclasses).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from torch import nn

from moduleprofiler.registry import F, FormulaMap, FormulaRegistry, Key, LiveFormulaMap, live_map
from moduleprofiler.shapes import default_io_size
from moduleprofiler.validate import DEFAULT_KEY

IO_SIZE_FUNCTIONS = FormulaRegistry("io-size")


def register_io_size(*types: Key) -> Callable[[F], F]:
    """Register ``(module, inputs, output) -> (input_size, output_size)`` for module types."""
    return IO_SIZE_FUNCTIONS.register(*types)


def unregister_io_size(*types: Key) -> None:
    """Remove default io-size functions registered for ``types``."""
    IO_SIZE_FUNCTIONS.unregister(*types)


# 0.0.4's keys, in its order; the counting pass sees default_io_size itself and reuses the
# shapes it recorded already, so these keys cost nothing
IO_SIZE_FUNCTIONS.register(nn.GRUCell, nn.GRU, nn.LSTMCell, nn.LSTM)(default_io_size)


def get_default_io_size_map() -> FormulaMap:
    """A new dict of the default io-size functions: 0.0.4's keys (``GRUCell``, ``GRU``,
    ``LSTMCell``, ``LSTM``, ``"default"``) and any registered since."""
    return {**IO_SIZE_FUNCTIONS.as_map(), DEFAULT_KEY: default_io_size}


_DEFAULT_IO_SIZE: Mapping[str, Callable[..., Any]] = MappingProxyType(
    {DEFAULT_KEY: default_io_size})


def live_io_size_map(own: Mapping[Any, Any] | None = None) -> LiveFormulaMap:
    """A profiler's io-size map: ``own`` entries over the live io-size registry (and the 0.0.4
    ``"default"`` key)."""
    return live_map(own, _DEFAULT_IO_SIZE, IO_SIZE_FUNCTIONS.table, factory=live_io_size_map)
