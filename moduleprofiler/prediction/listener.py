"""``PredictionListener``: every aten operator of the pass, in issue order, with its predicted
host and device microseconds, booked to the module call that ran it (backward operators to the
call whose forward created their autograd node)."""

from __future__ import annotations

from typing import Any

import torch

from moduleprofiler.call import Call
from moduleprofiler.errors import DeviceDtypeError
from moduleprofiler.prediction.backward_classes import GEMM_LAYOUT_TABLES, step_work
from moduleprofiler.prediction.chain import Step
from moduleprofiler.prediction.columns import CALL_COLUMNS
from moduleprofiler.prediction.device_model import LINEAR_TABLES, DeviceModel
from moduleprofiler.prediction.host_model import HostModel
from moduleprofiler.prediction.op_classes import OpWork
from moduleprofiler.prediction.rnn_kernels import (
    LAUNCH_SHARE,
    Kernel,
    RecurrentShape,
    backward_kernels,
    forward_kernels,
    recurrent_shape,
)
from moduleprofiler.records import display_path
from moduleprofiler.runner import Listener, PassRunner

_PHASES = ("", "backward_")

_ONE_DTYPE_TABLES = frozenset({"gemm", "bmm", "conv", "conv_backward", "attention"}) \
    | LINEAR_TABLES | GEMM_LAYOUT_TABLES
"""Tables of operators whose device kernels (cuBLAS, cuDNN, fused attention) take their data
operands, the first three arguments (``mm``'s two matrices; ``addmm``'s bias and matrices; a
convolution's input, weight and bias; its backward's gradient, input and weight; attention's
query, key and value), in one floating dtype: mixed or integer operands raise on a device,
never on the meta device. An attention backward's other tensors (its log-sum-exp in fp32, its
random seed in int64) are of other dtypes by design, and its forward was checked."""


def check_operand_dtypes(name: str, args: tuple[Any, ...], call: Call | None) -> None:
    """Raise as a device would for a matrix product, convolution or attention ``name`` whose
    data operands (:data:`_ONE_DTYPE_TABLES`) are not of one floating dtype.

    Raises:
        DeviceDtypeError: naming the module ``call`` and the dtypes.
    """
    dtypes = tuple(dict.fromkeys(arg.dtype for arg in args[:3]
                                 if isinstance(arg, torch.Tensor)))
    # complex products and convolutions run (cuBLAS's complex GEMMs): priced as unknown; a
    # float8 one has no kernel (float8 products run as torch._scaled_mm, with scales)
    if not dtypes or (len(dtypes) == 1 and ((dtypes[0].is_floating_point
                                             and dtypes[0].itemsize > 1)
                                            or dtypes[0].is_complex)):
        return
    where = (f"module {display_path(call.path)!r} ({type(call.module).__name__})"
             if call is not None else "outside any module")
    what = (f"mixes {' and '.join(str(d) for d in dtypes)} tensors, which a device refuses"
            if len(dtypes) > 1 else f"on {dtypes[0]} tensors, which a device has no kernel for")
    if any(dtype.is_floating_point and dtype.itemsize == 1 for dtype in dtypes):
        what += " (float8 products run as torch._scaled_mm, with scales)"
    raise DeviceDtypeError(
        f"{where}: {name} {what} (a real run raises here; the meta device does not check): "
        "cast the input to the model's dtype",
        None if call is None else call.path, dtypes)


def _unmeasured_operands(args: tuple[Any, ...]) -> bool:
    """Whether a data operand (the first three arguments) is complex or float64: a complex
    matrix product does four real ones' work in kernels of its own, a float64 one runs at the
    device's FP64 rate; no calibration table times either."""
    return any(isinstance(arg, torch.Tensor) and (arg.is_complex() or arg.dtype == torch.float64)
               for arg in args[:3])


def _plus(total: float | None, value: float | None) -> float | None:
    """``total + value``, unknown (``None``) once either is."""
    return None if total is None or value is None else total + value


class PredictionListener(Listener):
    """Predicts each operator as it runs (on the meta device: nothing is computed) and writes
    per call ``self_predicted_device_ms`` / ``self_predicted_host_ms`` (and the
    ``backward_`` ones); the pass's issue order is kept for the chain model."""

    wants_nodes = True
    observes_all = True
    columns = CALL_COLUMNS

    def __init__(self, device: DeviceModel, host: HostModel | None) -> None:
        self.device = device
        self.host = host
        self.steps: dict[str, list[Step]] = {phase: [] for phase in _PHASES}
        """Issue-ordered host/device steps per phase (``""``: forward)."""
        self.unknown: dict[str, int] = {}
        """Operators no calibration table times, with their call counts."""
        self.by_rule: dict[str, int] = {}
        """Operators without a class of their own, priced by the elementwise rule, with
        their call counts."""
        self.fp32_tables: set[str] = set()
        """The calibration tables fp32 operators of the pass used (TF32 or not: the notes)."""
        self.band_us: dict[str, list[float | None]] = {phase: [0.0, 0.0] for phase in _PHASES}
        """Per phase, the pass's device time at the low and the high end of its operators'
        error bands (``None``: an operator has no band)."""
        self.no_band: set[str] = set()
        """Tables whose operators ran without held-out residuals to give a band."""
        self._own: dict[tuple[str, int], list[float | None]] = {}
        self._recurrent: dict[int, RecurrentShape] = {}
        """The calls of recurrent layers a GPU runs as one cuDNN call, by call index: their
        operators on the meta device (the per-step decomposition) are replaced by cuDNN's
        kernels (:mod:`~moduleprofiler.prediction.rnn_kernels`)."""
        self._recurrent_backward: set[int] = set()

    def enter(self, call: Call, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self.host is not None:
            cost = self.host.call_us(call.depth)
            self.steps[""].append(Step(cost, 0.0))
            self._book("", call, cost, 0.0)
        shape = recurrent_shape(call.module, args)
        if shape is not None:
            # cuDNN's recurrent kernels, as its products, have none for float8
            check_operand_dtypes(f"cuDNN's {shape.mode}",
                                 (torch.empty(0, dtype=shape.dtype, device="meta"),), call)
            self._recurrent[call.index] = shape
            self._cudnn_call("", call, shape, forward_kernels(shape))

    def operator(self, call: Call | None, func: Any, args: tuple[Any, ...],
                 kwargs: dict[str, Any], out: Any) -> None:
        if call is not None and call.index in self._recurrent:
            return  # priced as cuDNN's kernels when the call started
        self._record("", call, func, args, kwargs, out)

    def backward_operator(self, owner: Call | None, func: Any, args: tuple[Any, ...],
                          kwargs: dict[str, Any], out: Any) -> None:
        if owner is not None and owner.index in self._recurrent:
            if owner.index not in self._recurrent_backward:  # its first backward operator
                self._recurrent_backward.add(owner.index)
                shape = self._recurrent[owner.index]
                self._cudnn_call("backward_", owner, shape, backward_kernels(shape))
            return
        self._record("backward_", owner, func, args, kwargs, out)

    def _cudnn_call(self, phase: str, call: Call, shape: RecurrentShape,
                    kernels: list[Kernel]) -> None:
        """One cuDNN call running ``kernels``: the host issues the call like its first
        kernel's operator plus cuDNN's set-up, then each further launch
        (:data:`~.rnn_kernels.LAUNCH_SHARE`); a persistent kernel's device time is the
        measured one (:func:`~.rnn_kernels.persistent_step_us`)."""
        first = True
        for kernel in kernels:
            work = kernel.work
            if kernel.step_us is not None:  # a persistent kernel: every step in one launch
                device_us: float | None = kernel.step_us * kernel.times
            elif work.table in _ONE_DTYPE_TABLES and shape.dtype == torch.float64:
                device_us = None  # as any float64 product: no calibration measured one
            else:
                device_us = self.device.op_us(work)
                if device_us is not None:
                    device_us *= kernel.times // kernel.launches
            for _ in range(kernel.launches):
                host_us = 0.0
                if self.host is not None:
                    host_us = self.host.op_us(work) + self.host.launch_us(
                        work, shape.setup_share) if first else \
                        self.host.launch_us(work, LAUNCH_SHARE[shape.mode])
                self._price(phase, call, work, device_us, host_us)
                first = False

    def _record(self, phase: str, call: Call | None, func: Any, args: tuple[Any, ...],
                kwargs: dict[str, Any], out: Any) -> None:
        work = step_work(func, args, kwargs, out, phase == "backward_")
        device_us: float | None = None
        if work.table in _ONE_DTYPE_TABLES:
            check_operand_dtypes(work.name, args, call)
            if not _unmeasured_operands(args):  # no calibration measured such kernels
                device_us = self.device.op_us(work)
        else:
            device_us = self.device.op_us(work)
        host_us = self.host.op_us(work) if self.host is not None else 0.0
        self._price(phase, call, work, device_us, host_us)

    def _price(self, phase: str, call: Call | None, work: OpWork, device_us: float | None,
               host_us: float) -> None:
        """Book ``work``'s predicted device time (``None``: unknown) and host time."""
        if work.dtype == "fp32" and work.table is not None and device_us is not None:
            self.fp32_tables.add(work.table)
        if device_us is None:
            self.unknown[work.name] = self.unknown.get(work.name, 0) + 1
        elif work.by_rule:
            self.by_rule[work.name] = self.by_rule.get(work.name, 0) + 1
        self.steps[phase].append(Step(host_us, device_us or 0.0, work.syncs))
        band = self.device.error_band(work)
        if band is None and work.table is not None:
            self.no_band.add(work.table)
        low, high = (None, None) if band is None or device_us is None else \
            (device_us * band[0], device_us * band[1])
        totals = self.band_us[phase]
        totals[0] = _plus(totals[0], low)
        totals[1] = _plus(totals[1], high)
        self._book(phase, call, host_us, device_us, low, high)

    def _book(self, phase: str, call: Call | None, host_us: float, device_us: float | None,
              low_us: float | None = 0.0, high_us: float | None = 0.0) -> None:
        if call is None:
            return
        own = self._own.setdefault((phase, call.index), [0.0, 0.0, 0.0, 0.0])
        own[0] = _plus(own[0], device_us)
        own[1] = (own[1] or 0.0) + host_us
        own[2] = _plus(own[2], low_us)
        own[3] = _plus(own[3], high_us)

    def finish(self, runner: PassRunner) -> None:
        for call in runner.calls:
            for phase in _PHASES if any(self.steps["backward_"]) else ("",):
                device_us, host_us, low_us, high_us = self._own.get(
                    (phase, call.index), [0.0, 0.0, 0.0, 0.0])
                for suffix, value in (("", device_us), ("_low", low_us), ("_high", high_us)):
                    call.values[f"self_predicted_{phase}device_ms{suffix}"] = \
                        None if value is None else value / 1e3
                if self.host is not None:
                    call.values[f"self_predicted_{phase}host_ms"] = (host_us or 0.0) / 1e3
        self._own.clear()
