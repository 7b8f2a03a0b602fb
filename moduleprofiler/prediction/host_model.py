"""Host time of one operator and one module call, from the host costs a calibration measured
(the CPU driving the GPU issues every launch; in eager PyTorch that often decides latency)."""

from __future__ import annotations

from dataclasses import dataclass

from moduleprofiler.prediction.calibration import HostCosts
from moduleprofiler.prediction.op_classes import VIEW, OpWork

IN_SITU_HOST_FACTOR = 0.95
"""Launches inside a model's forward cost the host this share of what the calibration's
tight loops of one operator measured: measured on three synthetic stacks (layer norms,
linears and GELUs; convolutions, batch norms and ReLUs; attention blocks in plain PyTorch),
their host-bound forwards' fastest iterations against the loops' costs measured beside them
on the same host, in three interleaved rounds on an H200's host (0.87 to 1.08 by stack and
round, median 0.95; ``benchmarks/prediction/host_in_model.py``). No model of the prediction
proof is in it. A predicted latency is the *fastest* a host-bound pass runs: the same host
work differs by tens of percent between runs of one model."""


@dataclass(frozen=True)
class HostModel:
    """Host microseconds per operator launch and per module call on one CPU, inside a
    model's forward: the calibration's tight-loop costs times ``in_model`` (and ``scale``)."""

    costs: HostCosts
    scale: float = 1.0
    """Applied to every cost: this CPU's speed relative to the one ``costs`` measured."""
    in_model: float = IN_SITU_HOST_FACTOR
    """A launch inside a model relative to the tight loops ``costs`` measured (1.0: the
    loops' costs as measured)."""
    source: str = ""
    """Where the costs come from (the calibration's CPU, or "measured here")."""

    @property
    def module_call_us(self) -> float:
        """The cost of calling a module (``__call__``, hooks dispatch, ``forward``) around
        the operators it runs."""
        return self.costs.us["module_call"] * self._factor

    def op_us(self, work: OpWork) -> float:
        """Host microseconds to issue ``work``."""
        us = self.costs.us
        if work.host == VIEW:
            return us["view"] * self._factor
        cost = us.get(work.host, us["unary"])
        if work.host == "gemm":  # the benchmark was F.linear: a transpose view and the matmul
            cost -= us["view"]
        return max(cost, us["view"]) * self._factor

    @property
    def _factor(self) -> float:
        return self.scale * self.in_model
