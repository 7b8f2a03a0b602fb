"""The communication listener: every collective that runs inside a module call, booked to it.

It observes every dispatcher operator of the pass (the runner's operator events, forward and
backward) and keeps those of :mod:`moduleprofiler.distributed.collectives`; it is opt-in, since
observing every operator costs what an operator-counted pass costs.

Where a collective is booked:

* forward: to the innermost running module call; a collective issued by another library's
  forward *pre-hook* of a module (FSDP2 gathers a unit's parameters there, tensor parallelism
  redistributes inputs there) is booked to that module's call, not to its caller, and one
  issued by a forward hook runs inside the call anyway;
* backward: to the forward call that created the autograd node running it
  (:meth:`~moduleprofiler.runner.PassRunner.owner_of_node`): DDP's bucket all-reduce runs in
  the gradient accumulation of a parameter and is booked to the first call of the module that
  holds that parameter; a collective with no owning call (DDP's final bucket flush) is outside
  every call.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from contextlib import ExitStack
from typing import Any, Literal

import torch
from torch import nn

from moduleprofiler.call import Call
from moduleprofiler.devices import synchronize
from moduleprofiler.distributed.collectives import Collective, describe, is_communication
from moduleprofiler.export.columns import register_column, register_own_and_inclusive
from moduleprofiler.runner import Listener, PassRunner

_PHASES = {"forward": "", "backward": "backward_"}
for _phase, _prefix in _PHASES.items():
    _words = _prefix.replace("_", " ")
    _own: tuple[tuple[str, Literal["bytes", "count", "time"], str, str, str], ...] = (
        # name (own: self_<name>; inclusive: <name>), kind, label, unit, the own share
        (f"{_prefix}comm_bytes", "bytes", f"{_words}comm bytes", "bytes",
         f"bytes of the collectives of the call's own {_phase} work"),
        (f"{_prefix}comm_bus_bytes", "bytes", f"{_words}bus bytes", "bytes",
         f"bytes each rank sends and receives (bandwidth-optimal) for the collectives of the "
         f"call's own {_phase} work"),
        (f"{_prefix}collectives", "count", f"{_words}collectives", "calls",
         f"collectives (all_reduce, all_gather, ...) the call's own {_phase} work issued"),
        (f"{_prefix}comm_ms", "time", f"{_words}comm time", "ms",
         f"time of the collectives of the call's own {_phase} work, each from its start to "
         "its completion (CommunicationListener(timing=True), which makes them synchronous)"))
    for _name, _kind, _label, _unit, _description in _own:
        # the collectives of a subtree, summed: a timed collective is synchronous, so their
        # times add up as the bytes do
        register_own_and_inclusive(_name, _kind, _label, _unit, _description)
    register_column(f"{_prefix}comm_kinds", "text", f"{_words}comm", aggregation="first",
                    description=f"the kinds of the collectives of the call's own {_phase} "
                                "work, each with its count (all_reduce x2)")


class CommunicationListener(Listener):
    """Records every collective of the pass: kind, bytes, bus bytes, group size and (with
    ``timing=True``) its time, per module call.

    Pass it to :meth:`ModuleProfiler.profile` (``listeners=[CommunicationListener()]``): each
    call gets its own ``self_comm_bytes``, ``self_comm_bus_bytes``, ``self_collectives``,
    ``comm_kinds`` (and ``self_comm_ms``), each with its inclusive column (``comm_bytes``...:
    the call with every call inside it), the same with ``backward_`` after ``self_`` for a
    profiled backward, and :attr:`collectives` lists every one in order.

    Args:
        timing: wait for each collective where it is issued and time it from its start to its
            completion. NB: this makes every collective synchronous (DDP and FSDP2 no longer
            overlap communication with compute) and, on CUDA, synchronizes the device after
            every operator, so that a collective's time is its own.
    """

    wants_nodes = True
    observes_all = True

    def __init__(self, *, timing: bool = False) -> None:
        if not isinstance(timing, bool):
            raise TypeError(f"timing must be a bool, got {type(timing).__name__}")
        self.timing = timing
        self.collectives: list[Collective] = []
        """Every collective, in the order they ran."""
        self._hooks = ExitStack()
        self._pending: nn.Module | None = None
        self._held: list[int] = []  # positions in ``collectives`` issued by ``_pending``'s hooks
        self._last = self._started = 0.0
        self._backward = False

    # -- the forward -----------------------------------------------------------------------
    def start(self, runner: PassRunner) -> None:
        self.collectives = []
        self._backward = False
        # a module with forward pre-hooks of its own (besides the runner's) may communicate in
        # them: a pre-hook put in front of them names the module those collectives are for
        for module in runner.modules:
            if len(module._forward_pre_hooks) > 1:
                self._hooks.enter_context(module.register_forward_pre_hook(
                    self._before_hooks, prepend=True))
        self._last = time.perf_counter()

    def stop(self, runner: PassRunner) -> None:
        self._hooks.close()
        self._pending = None
        self._held = []

    def _before_hooks(self, module: nn.Module, args: Any) -> None:
        self._pending = module
        self._held = []

    def enter(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self._pending is call.module:
            for position in self._held:
                self.collectives[position] = dataclasses.replace(
                    self.collectives[position], call=call.index, path=call.path)
            self._pending = None
            self._held = []

    def operator(self, call: Call | None, func: Any, args: tuple[Any, ...],
                 kwargs: dict[str, Any], out: Any) -> None:
        if is_communication(func):
            self._record(call, "forward", func, args, kwargs, out)
            if self._pending is not None:
                self._held.append(len(self.collectives) - 1)
        elif self.timing:
            self._stamp()

    def backward_operator(self, owner: Call | None, func: Any, args: tuple[Any, ...],
                          kwargs: dict[str, Any], out: Any) -> None:
        self._backward = True
        if is_communication(func):
            self._record(owner, "backward", func, args, kwargs, out)
        elif self.timing:
            self._stamp()

    def finish(self, runner: PassRunner) -> None:
        phases = ("forward", "backward") if self._backward else ("forward",)
        for phase in phases:
            prefix = _PHASES[phase]
            mine: dict[int, list[Collective]] = {}
            for collective in self.collectives:
                if collective.phase == phase and collective.call is not None:
                    mine.setdefault(collective.call, []).append(collective)
            for call in runner.calls:
                found = mine.get(call.index, [])
                values = call.values
                values[f"self_{prefix}comm_bytes"] = sum(c.bytes for c in found)
                values[f"self_{prefix}comm_bus_bytes"] = sum(c.bus_bytes for c in found)
                values[f"self_{prefix}collectives"] = len(found)
                values[f"{prefix}comm_kinds"] = _kinds(found)
                if self.timing:
                    values[f"self_{prefix}comm_ms"] = sum(c.ms or 0.0 for c in found)

    # -- helpers ---------------------------------------------------------------------------
    def _record(self, call: Call | None, phase: str, func: Any, args: tuple[Any, ...],
                kwargs: dict[str, Any], out: Any) -> None:
        kind, size, bus, group = describe(func, args, kwargs, out)
        ms = None
        if self.timing:
            _wait(func, out)
            ms = (self._stamp() - self._started) * 1e3
        self.collectives.append(Collective(
            None if call is None else call.index, None if call is None else call.path, phase,
            kind, func._schema.name, size, bus, group, ms))

    def _stamp(self) -> float:
        """Finish the device's queued work and mark the time: the next operator starts now."""
        synchronize()
        self._started, self._last = self._last, time.perf_counter()
        return self._last

    @property
    def outside(self) -> list[Collective]:
        """The collectives that ran outside every module call."""
        return [c for c in self.collectives if c.call is None]


def _wait(func: Any, out: Any) -> None:
    """Wait for the collective ``func`` that returned ``out``: the ``Work`` of a ``c10d``
    operator, the result tensors of a functional collective."""
    functional = func.namespace != "c10d"
    for item in out if isinstance(out, (tuple, list)) else (out,):
        if isinstance(item, torch.ScriptObject):
            work = torch._C._distributed_c10d.Work.unbox(item)
            if work is not None:  # a blocking call (``async_op=False``) returns no work
                work.wait()
        elif functional and isinstance(item, torch.Tensor):
            torch.ops._c10d_functional.wait_tensor(item)


def _kinds(found: list[Collective]) -> str:
    counts = Counter(c.kind for c in found)
    return ", ".join(kind if n == 1 else f"{kind} x{n}" for kind, n in counts.items())
