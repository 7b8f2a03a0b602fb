"""Host time of one operator and one module call, from the host costs a calibration measured
(the CPU driving the GPU issues every launch; in eager PyTorch that often decides latency)."""

from __future__ import annotations

from dataclasses import dataclass

from moduleprofiler.prediction.calibration import HostCosts
from moduleprofiler.prediction.op_classes import VIEW, OpWork

IN_SITU_HOST_FACTOR = 0.95
"""Where the host costs hold no measured factor of their own (:attr:`HostCosts.in_model`):
launches inside a model's forward cost the host this share of what the calibration's
tight loops of one operator measured: measured on three synthetic stacks (layer norms,
linears and GELUs; convolutions, batch norms and ReLUs; attention blocks in plain PyTorch),
their host-bound forwards' fastest iterations against the loops' costs measured beside them
on the same host, in three interleaved rounds on an H200's host (0.87 to 1.08 by stack and
round, median 0.95; ``benchmarks/prediction/host_in_model.py``). No model of the prediction
proof is in it. A predicted latency is the *fastest* a host-bound pass runs: the same host
work differs by tens of percent between runs of one model."""


HOST_FALLBACK = {"sort": "reduction", "topk": "reduction", "scan": "unary",
                 "histogram": "unary", "grouped_gemm": "gemm"}
"""The class that prices a launch whose own host class a calibration did not measure (the
mixture-of-experts router's operators, measured since: several kernels' host work each)."""


@dataclass(frozen=True)
class HostModel:
    """Host microseconds per operator launch and per module call on one CPU, inside a
    model's forward: the calibration's tight-loop costs times the in-model factor (and
    ``scale``)."""

    costs: HostCosts
    scale: float = 1.0
    """Applied to every cost: this CPU's speed relative to the one ``costs`` measured."""
    in_model: float | None = None
    """A launch inside a model relative to the tight loops ``costs`` measured (1.0: the
    loops' costs as measured); ``None``: the factor ``costs`` measured
    (:attr:`HostCosts.in_model`), else :data:`IN_SITU_HOST_FACTOR`."""
    source: str = ""
    """Where the costs come from (the calibration's CPU, or "measured here")."""

    def call_us(self, depth: int) -> float:
        """The cost of a module call (``__call__``, hooks dispatch, ``forward``) at ``depth``
        (the root's call: 0) around the operators it runs: the tight loop's call at depth 0
        plus ``module_call_depth`` per level (0 where the costs did not measure it)."""
        us = self.costs.us
        return (us["module_call"] + depth * us.get("module_call_depth", 0.0)) * self._factor

    def op_us(self, work: OpWork) -> float:
        """Host microseconds to issue ``work`` (a class the costs did not measure: priced as
        :data:`HOST_FALLBACK` says, else as a unary launch)."""
        us = self.costs.for_dtype(work.dtype)
        if work.host == VIEW:
            return us["view"] * self._factor
        cost = us.get(work.host)
        if cost is None:
            cost = us.get(HOST_FALLBACK.get(work.host, "unary"), us["unary"])
        if work.host == "gemm":  # the benchmark was F.linear: a transpose view and the matmul
            cost -= us["view"]
        return max(cost, us["view"]) * self._factor

    def launch_us(self, work: OpWork, share: float) -> float:
        """Host microseconds of a kernel a library call launches itself (cuDNN's per-step
        kernels): ``share`` of an elementwise operator's issue cost in ``work``'s dtype."""
        return self.costs.for_dtype(work.dtype)["unary"] * share * self._factor

    @property
    def factor(self) -> float:
        """The in-model factor applied: :attr:`in_model`, else the one the costs measured,
        else :data:`IN_SITU_HOST_FACTOR`."""
        if self.in_model is not None:
            return self.in_model
        return IN_SITU_HOST_FACTOR if self.costs.in_model is None else self.costs.in_model

    @property
    def _factor(self) -> float:
        return self.scale * self.factor


def missing_host_notes(costs: HostCosts) -> list[str]:
    """What ``costs`` did not measure, and what the host model takes instead."""
    notes = []
    if costs.in_model is None:
        notes.append(f"the host costs ({costs.cpu}) hold no measured in-model factor: "
                     f"launches inside a model are priced at {IN_SITU_HOST_FACTOR} times the "
                     "tight loops' costs (IN_SITU_HOST_FACTOR, measured on one H200 host); "
                     "calibrate() measures it")
    if not costs.us_by_dtype:
        notes.append(f"the host costs ({costs.cpu}) hold fp32 loops only: bf16 and fp16 "
                     "launches are priced as fp32 ones, which costs the host less (a batch "
                     "norm 1.7 times less on an H200's host); calibrate() measures them by "
                     "dtype")
    if "module_call_depth" not in costs.us:
        notes.append(f"the host costs ({costs.cpu}) hold no cost of a module call by depth: "
                     "every module call is priced as one at the top level; calibrate() "
                     "measures it")
    return notes
