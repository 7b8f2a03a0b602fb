"""Per-operator accounting: every aten operator of the forward, tallied per module call.

:class:`OperatorListener` is opt-in (pass it to ``profile(listeners=...)``). It observes every
module call, also those a module formula covers (their operators are then dispatched to the
observer, which the counting alone would not do), and writes per call
``call.values["operators"]``: operator name (``aten.mm``, as in ``Profile.unsupported_ops``) ->
``{"calls", "ops", "macs", "bytes"}`` for the call's own operators (its children's are in theirs).

* ``ops`` / ``macs``: from the operator formulas, looked up exactly as the counting does
  (:class:`~moduleprofiler.operators.registry.PassFormulas` on the same kind of table); an
  operator without a formula is unknown: ``None``, never 0. Free operators (views, copies)
  count 0 ops.
* ``bytes``: what the operator reads and writes, by the traffic rule
  (:func:`moduleprofiler.efficiency.traffic.operator_bytes`); a view moves 0.

The table of these tallies is :meth:`Profile.by_operator`
(:func:`moduleprofiler.export.by_operator.by_operator_view`). No time per operator: timing an
operator from inside the dispatch mode measures the host's launch on a GPU (kernels run
asynchronously) and adds the mode's own cost to every small operator on a CPU; per-operator
device time is what ``torch.profiler``'s ``key_averages()`` measures.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from moduleprofiler.call import Call
from moduleprofiler.efficiency.traffic import operator_bytes
from moduleprofiler.export.by_operator import OPERATORS_COLUMN
from moduleprofiler.operators.registry import (
    MISSING,
    OperatorMap,
    PassFormulas,
    get_default_operator_map,
    operator_name,
)
from moduleprofiler.runner import Listener, PassRunner
from moduleprofiler.validate import check_operator_map


class _Tally:
    """One operator's calls inside one module call."""

    __slots__ = ("bytes", "calls", "macs", "ops")

    def __init__(self) -> None:
        self.calls = 0
        self.ops: int | float | None = 0
        self.macs: int | float | None = 0
        self.bytes = 0


class OperatorListener(Listener):
    """Calls, ops, MACs and bytes of every aten operator, per module call (see the module
    docstring); pass it in ``ModuleProfiler().profile(..., listeners=[OperatorListener()])``
    and read the table with ``profile.by_operator()``.

    Args:
        operators: the operator formulas (default: those the pass counts with, the
            profiler's ``operator_fn_map``; outside a counted pass the registered ones,
            :func:`~moduleprofiler.operators.registry.get_default_operator_map`).
    """

    def __init__(self, operators: OperatorMap | None = None) -> None:
        if operators is not None:
            check_operator_map(operators, "operators")
        self._operators = operators
        self._formulas = PassFormulas(operators)
        self._tallies: dict[int, dict[str, _Tally]] = {}

    def start(self, runner: PassRunner) -> None:
        table = self._operators if self._operators is not None else runner.context.operators
        self._formulas = PassFormulas(get_default_operator_map() if table is None else table)

    def observe(self, module: nn.Module) -> bool:
        # every call, also those a module formula covers: their operators are the table's rows
        return True

    def operator(self, call: Call | None, func: Any, args: tuple[Any, ...],
                 kwargs: dict[str, Any], out: Any) -> None:
        if call is None:  # outside every call: the runner only reports it to observe_outside
            return
        tallies = self._tallies.get(call.index)
        if tallies is None:
            tallies = self._tallies[call.index] = {}
        name = operator_name(func)
        tally = tallies.get(name)
        if tally is None:
            tally = tallies[name] = _Tally()
        tally.calls += 1
        moved = operator_bytes(func, args, kwargs, out)
        if moved is not None:
            tally.bytes += moved
        counted = self._formulas.count(func, args, kwargs, out, call)
        if counted is MISSING:
            tally.ops = tally.macs = None  # one call without a formula: the sum is unknown
        elif counted is not None and tally.ops is not None and tally.macs is not None:
            tally.ops += counted[0]  # None: free (views, copies, allocations)
            tally.macs += counted[1]

    def finish(self, runner: PassRunner) -> None:
        for call in runner.calls:
            tallies = self._tallies.get(call.index, {})
            # plain dicts of ints (None: unknown): they round-trip through the profile's JSON
            call.values[OPERATORS_COLUMN] = {
                name: {"calls": t.calls, "ops": t.ops, "macs": t.macs, "bytes": t.bytes}
                for name, t in tallies.items()}
        self._tallies.clear()
