"""Host time of one operator and one module call, from the host costs a calibration measured
(the CPU driving the GPU issues every launch; in eager PyTorch that often decides latency)."""

from __future__ import annotations

from dataclasses import dataclass

from moduleprofiler.prediction.calibration import HostCosts
from moduleprofiler.prediction.op_classes import VIEW, OpWork


@dataclass(frozen=True)
class HostModel:
    """Host microseconds per operator launch and per module call on one CPU.

    The costs are the calibration's tight loops, as measured: a factor for launches inside a
    model, fitted on three models' host-bound forwards, came out 1.07 (medians) and 0.84
    (minima), within the host's own run-to-run spread (``docs/prediction.md``)."""

    costs: HostCosts
    scale: float = 1.0
    """Applied to every cost: this CPU's speed relative to the one ``costs`` measured."""
    source: str = ""
    """Where the costs come from (the calibration's CPU, or "measured here")."""

    @property
    def module_call_us(self) -> float:
        """The cost of calling a module (``__call__``, hooks dispatch, ``forward``) around
        the operators it runs."""
        return self.costs.us["module_call"] * self.scale

    def op_us(self, work: OpWork) -> float:
        """Host microseconds to issue ``work``."""
        us = self.costs.us
        if work.host == VIEW:
            return us["view"] * self.scale
        cost = us.get(work.host, us["unary"])
        if work.host == "gemm":  # the benchmark was F.linear: a transpose view and the matmul
            cost -= us["view"]
        return max(cost, us["view"]) * self.scale
