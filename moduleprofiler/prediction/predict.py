"""``predict()``: per-module latency predicted for a GPU, on the meta device (no memory, no
GPU, no computation): every aten operator of the pass is classified, timed on the device from a
calibration (:mod:`.device_model`) and on the host from host costs (:mod:`.host_model`), and
the pass's latency comes from the two chains together (:mod:`.chain`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch

from moduleprofiler.devices import cuda_available, default_device, fp32_precision
from moduleprofiler.efficiency.device_names import matching_devices, table_name
from moduleprofiler.efficiency.peaks import DEVICE_PEAKS, DevicePeaks, device_peaks
from moduleprofiler.export.profile import Profile
from moduleprofiler.prediction.calibrate import cpu_op_us, measure_host
from moduleprofiler.prediction.calibration import Calibration, HostCosts, shipped_calibrations
from moduleprofiler.prediction.chain import ChainResult, Step, run_chain
from moduleprofiler.prediction.device_model import (
    CONV_TABLES,
    IEEE,
    MATMUL_TABLES,
    DeviceModel,
)
from moduleprofiler.prediction.host_in_model import with_in_model_factor
from moduleprofiler.prediction.host_model import HostModel, missing_host_notes
from moduleprofiler.prediction.listener import PredictionListener
from moduleprofiler.timing.device_trace import after_sessions_notes

REFERENCE = "H100 SXM"
"""The shipped calibration whose achieved fractions a datasheet-only device borrows."""
DONOR = "H200"
"""The shipped calibration with every table: where another calibration lacks one (measured
before ``calibrate()`` measured it), its achieved fractions stand in."""

DTYPE_NAMES: dict[str, torch.dtype] = {
    "fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16}
"""The dtype names a prediction takes (``predict(dtype="bf16")``), short and long."""

DeviceSpec = str | Calibration | DevicePeaks | Path
HostSpec = str | HostCosts | HostModel | None

DEFAULT_HOST = "calibrated"
"""The host ``predict()`` and ``--predict`` assume: the CPU that drove the calibrated GPU. A
latency is what people ask for, and eager PyTorch is often bound by its host; ``host=None``
predicts the device's time alone, never called a latency."""


@dataclass(frozen=True, repr=False)
class PredictedProfile(Profile):
    """A :class:`~moduleprofiler.Profile` whose calls carry predicted times
    (``predicted_device_ms``, ``predicted_host_ms``, ``predicted_bound`` and their ``self_``
    and ``backward_`` forms), and the pass's prediction."""

    KEYS: ClassVar[dict[str, str]] = {
        "predicted_for": "a prediction: the device (and the host) it is for",
        "prediction_notes": "a prediction: what it rests on and where it is a bound",
        "predicted_device_lower_bound": "a prediction: some operators' device time is unknown, "
                                        "so predicted_device_ms and the latency are lower "
                                        "bounds",
    }
    """The keys of a prediction's ``result_fields`` (``to_dict()``, the JSON) that no other
    table of the glossary holds, with their meaning (docs/glossary.md lists them)."""

    predicted_latency_ms: float | None = None
    """The whole pass (forward, or forward and backward), host and device chains together:
    the minimum over runs, what the pass takes at best (``None`` with ``host=None``: without
    a host there is no latency, only ``predicted_device_ms``, a lower bound on it)."""
    predicted_device_ms: float | None = None
    """The device's busy time in the pass."""
    predicted_device_ms_low: float | None = None
    """The device's busy time at the low end of the expected error: each operator's time
    times the 10th percentile of measured over predicted time of its calibration table's
    held-out shapes (``None``: the calibration holds no residuals for a table the pass used)."""
    predicted_device_ms_high: float | None = None
    """The same at the high end (the 90th percentile)."""
    predicted_host_ms: float | None = None
    """The host's time to issue the pass (``None`` with ``host=None``)."""
    predicted_for: str = ""
    """The device (and the host) the prediction is for."""
    prediction_notes: tuple[str, ...] = ()
    """What the prediction rests on and where it is a bound."""
    predicted_device_lower_bound: bool = False
    """Some operators' device time is unknown (no calibration table times them; the notes
    name them): ``predicted_device_ms`` and the latency are lower bounds, and a pass that
    looks host-bound without them may not be."""

    @property
    def pass_notes(self) -> tuple[str, ...]:
        """:attr:`prediction_notes`, under every table of the prediction."""
        return self.prediction_notes

    @property
    def predicted_regime(self) -> str | None:
        """``"host-bound"`` when the device would be idle over half the pass, else
        ``"device-bound"`` (``None`` without a host model, or when the device time is a lower
        bound that finds the pass host-bound: the unknown kernels may make it device-bound;
        more device time never makes a device-bound pass host-bound)."""
        if self.predicted_host_ms is None or self.predicted_latency_ms is None:
            return None
        assert self.predicted_device_ms is not None
        if self.predicted_device_ms >= 0.5 * self.predicted_latency_ms:
            return "device-bound"
        return None if self.predicted_device_lower_bound else "host-bound"


def resolve_device(device: DeviceSpec | DeviceModel) -> tuple[DeviceModel, list[str]]:
    """The device model for ``device``: a shipped calibration's name, a datasheet name
    (``"A100 80GB SXM"``: the reference calibration's achieved fractions on its peaks), a
    :class:`Calibration` or its JSON path, or :class:`DevicePeaks` (a :class:`DeviceModel`
    already resolved: itself)."""
    if isinstance(device, DeviceModel):
        return device, []
    shipped = shipped_calibrations()
    model, notes = _resolve(device, shipped)
    # a calibration the user made is their device's alone: only shipped ones borrow
    by_name = model.calibration is shipped.get(model.calibration.name)
    if DONOR in shipped and by_name and model.calibration is not shipped[DONOR]:
        donor = device_peaks(DONOR)
        model = dataclasses.replace(model, donor=DeviceModel(shipped[DONOR], donor, donor))
    return model, notes


def _resolve(device: DeviceSpec,
             shipped: dict[str, Calibration]) -> tuple[DeviceModel, list[str]]:
    notes: list[str] = []
    if isinstance(device, (str, Path)) and str(device).endswith(".json"):
        device = Calibration.load(device)
    if isinstance(device, Calibration):
        peaks = device_peaks(device.name) if device.name in DEVICE_PEAKS else \
            device_peaks(device.device_name)
        return DeviceModel(device, peaks, peaks), notes
    if not isinstance(device, (str, Path, DevicePeaks)):
        raise TypeError(f"device must be a device's name, a Calibration, its JSON path or "
                        f"DevicePeaks, got {type(device).__name__} {device!r}")
    peaks = device if isinstance(device, DevicePeaks) else device_peaks(str(device))
    if peaks.name in shipped:
        return DeviceModel(shipped[peaks.name], peaks, peaks), notes
    if REFERENCE not in shipped:
        raise ValueError(f"no calibration for {peaks.name!r} and no reference calibration "
                         "shipped: measure one with moduleprofiler.prediction.calibrate()")
    notes.append(f"{peaks.name} has datasheet peaks only: its operator times are the "
                 f"{REFERENCE} calibration's achieved fractions of the peak applied to its "
                 "own peaks (run moduleprofiler.prediction.calibrate() on one to measure it)")
    reference = shipped[REFERENCE]
    return DeviceModel(reference, peaks, device_peaks(REFERENCE)), notes


def with_fp32_math(device: DeviceModel, tf32: bool | None) -> DeviceModel:
    """``device`` running fp32 matmuls and convolutions as a real run would: in TF32 when
    ``tf32`` says so, else as torch's settings say now: the matmul precision
    (``torch.set_float32_matmul_precision``: ``"highest"``, torch's default, is plain FP32;
    ``"high"`` and ``"medium"`` are TF32) and cuDNN's (TF32 by default)."""
    if tf32 is not None:
        return dataclasses.replace(device, matmul_tf32=tf32, conv_tf32=tf32)
    # read from the backends, which both precision APIs set; get_float32_matmul_precision()
    # raises once the newer per-backend API has been used
    return dataclasses.replace(device, matmul_tf32=fp32_precision("cuda.matmul") == "tf32",
                               conv_tf32=fp32_precision("cudnn.conv") == "tf32")


def fp32_notes(device: DeviceModel, tables: set[str], tf32: bool | None) -> list[str]:
    """What the prediction assumed for the fp32 matmuls and convolutions of the pass
    (``tables``: the calibration tables its fp32 operators used)."""
    notes = []
    for what, family, on, backend in (
            ("matmuls", MATMUL_TABLES, device.matmul_tf32, "cuda.matmul"),
            ("convolutions", CONV_TABLES, device.conv_tf32, "cudnn.conv")):
        if not tables & family:
            continue
        rate = device.peaks.flops_per_s("tf32" if on else "fp32")
        peak = f", {rate / 1e12:g} TFLOP/s peak" if rate else ""
        why = f"tf32={tf32}" if tf32 is not None else \
            f"torch.backends.{backend}.fp32_precision is {fp32_precision(backend)!r}"
        if on and rate is None:  # Volta, Turing: the device model prices them at FP32
            fp32 = device.peaks.flops_per_s("fp32")
            at = f", {fp32 / 1e12:g} TFLOP/s peak" if fp32 else ""
            notes.append(f"fp32 {what} on plain FP32{at}: {device.peaks.name} has no TF32 "
                         f"tensor cores ({why} asks for TF32)")
        elif on:
            notes.append(f"fp32 {what} on TF32 tensor cores{peak} ({why})")
        elif any(device.measured_as(table, "fp32").endswith(IEEE) for table in tables & family):
            notes.append(f"fp32 {what} on plain FP32{peak} ({why}; TF32 with "
                         "torch.set_float32_matmul_precision('high') or tf32=True): priced "
                         "from the calibration's rows measured without TF32")
        else:
            notes.append(f"fp32 {what} on plain FP32{peak} ({why}; TF32 with "
                         "torch.set_float32_matmul_precision('high') or tf32=True): the "
                         "calibration measured TF32, so their times are its achieved "
                         "fractions of the peak on the FP32 peak")
    return notes


def resolve_host(host: HostSpec, device: DeviceModel) -> tuple[HostModel | None, list[str]]:
    """The host model: ``"calibrated"`` (the default: the CPU that drove the calibrated
    device), ``None`` (the device time alone: a lower bound, no latency), ``"this"`` (this
    machine's CPU: measured on its CUDA device if it has one, else the calibrated costs scaled
    by this CPU's speed on a tiny operator), or :class:`HostCosts`."""
    if host is None:
        return None, ["host=None: the device's time alone (predicted_device_ms), a lower "
                      "bound on the latency, which is not predicted (eager PyTorch is often "
                      "bound by its host)"]
    if isinstance(host, HostModel):
        return host, []
    if isinstance(host, HostCosts):
        return HostModel(host, source=host.cpu), missing_host_notes(host)
    reference = device.calibration.host
    if host == "calibrated":
        if reference is None:
            raise ValueError("host='calibrated' (the default): this calibration has no host "
                             "costs; pass host=None for the device's time alone, or "
                             "host='this'")
        return HostModel(reference, source=reference.cpu), missing_host_notes(reference)
    if host == "this":
        if cuda_available():
            cuda = default_device()
            notes = after_sessions_notes("host='this': the host costs")
            costs = with_in_model_factor(cuda, measure_host(cuda))
            return HostModel(costs, source=f"{costs.cpu} (measured here)"), notes
        if reference is None:
            raise ValueError("host='this' without CUDA scales a calibration's host costs, "
                             "and this calibration has none")
        here = cpu_op_us()
        scale = here / reference.us["cpu_op"]
        source = f"this CPU ({scale:.2f}x {reference.cpu})"
        return HostModel(reference, scale, source=source), [
            f"host='this' on a machine without CUDA: {reference.cpu}'s launch costs "
            f"scaled by {scale:.2f}, this CPU's time on a tiny operator relative to it",
            *missing_host_notes(reference)]
    raise ValueError(f"host must be None, 'calibrated', 'this' or HostCosts, got {host!r}")


def measured_gpu(measured: Any) -> str | None:
    """The name of the GPU a measured profile ran on, as CUDA reported it (``None``: it names
    none). A ``time_modules`` result records the timed device in its environment
    (``device_name``, read from that device's properties) and every GPU of the machine in its
    hardware columns (0.0.4's ``gpu``, a list of names); a result with hardware columns only
    names its GPU when the machine had one kind."""
    environment = getattr(measured, "environment", None) or {}
    if str(environment.get("device", "")).startswith("cuda"):
        # on the CPU, device_name is the processor: only a CUDA run's names a GPU
        return str(environment.get("device_name") or "") or None
    gpus = (getattr(measured, "hardware", None) or {}).get("gpu")
    names = {str(name) for name in gpus} if isinstance(gpus, (list, tuple)) else set()
    return names.pop() if len(names) == 1 else None


def measured_device(measured: Any, measured_on: DeviceSpec | None) -> DeviceSpec:
    """The device a measured profile ran on: ``measured_on``, else the peak-table name of the
    GPU it recorded (:func:`measured_gpu`).

    Raises:
        ValueError: ``measured_on`` is needed: the profile names no GPU of the peak table.
        UnknownDeviceError, AmbiguousDeviceError: ``measured_on`` names no card of the peak
            table, or several (the message names ``measured_on``).
    """
    if measured_on is not None:
        if isinstance(measured_on, str) and not measured_on.endswith(".json"):
            table_name(measured_on, "measured_on")  # a wrong name said as the argument's
        return measured_on
    name = measured_gpu(measured)
    table_names = matching_devices(name) if name else ()
    if len(table_names) != 1:
        known = f" (any of {', '.join(table_names)})" if table_names else ""
        raise ValueError("measured_on: the measured profile does not name a known GPU "
                         f"({name!r}{known}); pass measured_on='H100 SXM' (or another device)")
    return table_names[0]


def dtype_of(dtype: str | torch.dtype | None) -> torch.dtype | None:
    """``dtype`` as a torch dtype (``"bf16"``, ``torch.bfloat16``; ``None`` keeps the
    model's)."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPE_NAMES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPE_NAMES)} or a torch dtype, "
                         f"got {dtype!r}")
    return DTYPE_NAMES[dtype]


def finish_prediction(profile: Profile, listener: PredictionListener, device: DeviceModel,
                      host: HostModel | None, notes: list[str],
                      tf32: bool | None = None) -> PredictedProfile:
    """The profile with the pass's prediction: the forward's (and backward's) steps through
    the two chains; ``tf32``: the ``predict`` keyword the device's fp32 math came from
    (``None``: torch's settings)."""
    steps: list[Step] = [*listener.steps[""], *listener.steps["backward_"]]
    result: ChainResult = run_chain(steps)
    notes = [*notes, *fp32_notes(device, listener.fp32_tables, tf32)]
    if device.borrowed and device.donor is not None:
        notes.append(f"the {device.calibration.name} calibration has no "
                     f"{', '.join(sorted(device.borrowed))} tables: those operators are "
                     f"timed from the {device.donor.calibration.name} calibration's achieved "
                     "fractions of the peak, applied to this device's peaks")
    if device.unmeasured:
        notes.append(f"the {device.calibration.name} calibration did not measure "
                     f"{', '.join(sorted(device.unmeasured))}: those operators are priced as "
                     "the kernels it measured (1024-wide rows, channels-first convolutions, one "
                     "expert's layer product); "
                     "calibrate() on the device measures them")
    if device.stood_in:
        notes.append(f"the {device.calibration.name} calibration measured no "
                     f"{', '.join(sorted(device.stood_in))} kernels: "
                     + ", ".join(f"{dtype} operators are timed from its "
                                 f"{'bf16' if dtype == 'fp16' else 'fp32'} tables"
                                 for dtype in sorted(device.stood_in)))
    if device.no_peak:
        fp32 = device.peaks.flops_per_s("fp32")
        at = "" if fp32 is None else f", {fp32 / 1e12:g} TFLOP/s"
        notes.append(f"{device.peaks.name}'s datasheet gives no "
                     f"{', '.join(sorted(device.no_peak))} peak (no tensor cores for it): "
                     f"those operators are priced at its plain FP32 peak{at}")
    if device.without_in_chain:
        notes.append(f"the {device.calibration.name} calibration did not measure small "
                     "kernels inside a chain of others: memory-bound operators are priced as "
                     "its loops of one operator ran them (a pass of many small kernels is "
                     "predicted low); calibrate() on the device measures them")
    if listener.unknown:
        notes.append("no calibration table times "
                     + ", ".join(f"{name} ({count}x)" for name, count in
                                 sorted(listener.unknown.items()))
                     + ": their device time is unknown and the totals are lower bounds")
    if listener.by_rule:
        notes.append("no class of their own, priced as elementwise kernels on the bytes they "
                     "move (a sort, an FFT or a solver runs other kernels, often longer): "
                     + ", ".join(f"{name} ({count}x)" for name, count in
                                 sorted(listener.by_rule.items())))
    if listener.no_band:
        notes.append("the calibration holds no held-out residuals for "
                     + ", ".join(sorted(listener.no_band))
                     + ": no expected error band (predicted_device_ms_low / _high unknown)")
    low, high = (None if any(band[i] is None for band in listener.band_us.values())
                 else sum(band[i] or 0.0 for band in listener.band_us.values()) / 1e3
                 for i in (0, 1))
    target = device.peaks.name + (f", host {host.source}" if host is not None else "")
    fields = {f.name: getattr(profile, f.name) for f in dataclasses.fields(profile)
              if f.init}
    return PredictedProfile(
        **fields,
        # without a host the chain's end is the device's alone: not a latency
        predicted_latency_ms=result.latency_us / 1e3 if host is not None else None,
        predicted_device_ms=result.device_us / 1e3,
        predicted_device_ms_low=low, predicted_device_ms_high=high,
        predicted_host_ms=result.host_us / 1e3 if host is not None else None,
        predicted_for=target, prediction_notes=tuple(notes),
        predicted_device_lower_bound=bool(listener.unknown))
