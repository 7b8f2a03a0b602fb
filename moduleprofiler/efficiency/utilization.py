"""Model and hardware FLOP utilisation (MFU, HFU) of a forward or a training step.

* **Model FLOPs**: the work the model needs, ``2 x MACs`` of the forward plus, for a training
  step, of the backward (the convention of ``FlopCounterMode`` and of the ``6N`` estimate).
* **Hardware FLOPs**: what the device really did: model FLOPs plus the forward work re-run in
  the backward by activation checkpointing (``self_recompute_macs`` of a
  :class:`~moduleprofiler.efficiency.TrafficListener`).

``MFU = model FLOPs / (time x peak)``, ``HFU = hardware FLOPs / (time x peak)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from moduleprofiler.efficiency.peaks import DevicePeaks, peak_dtype
from moduleprofiler.efficiency.roofline import call_dtype
from moduleprofiler.records import ProfileData, without_formula
from moduleprofiler.validate import check_real


@dataclass(frozen=True)
class Utilization:
    """FLOP utilisation of one timed forward or training step."""

    model_flops: float
    """Forward (+ backward) FLOPs, ``2 x MACs``, recomputation excluded."""
    hardware_flops: float
    """``model_flops`` plus recomputed forward FLOPs."""
    recompute_flops: float
    seconds: float
    peak_flops_per_s: float
    dtype: str
    complete: bool
    """False when some work had no formula, in the forward, the backward or the work an
    activation checkpoint reran (a ``TrafficListener``'s ``unsupported_recompute``): the
    FLOPs (and so MFU, HFU) are lower bounds."""

    @property
    def mfu(self) -> float:
        """Model FLOPs utilisation, 0-1."""
        return self.model_flops / (self.seconds * self.peak_flops_per_s)

    @property
    def hfu(self) -> float:
        """Hardware FLOPs utilisation, 0-1."""
        return self.hardware_flops / (self.seconds * self.peak_flops_per_s)

    @property
    def model_tflops(self) -> float:
        """The rate of the model FLOPs (``model_flops``, ``2 x MACs`` of the whole forward or
        training step) over ``seconds``, in TFLOP/s: ``mfu`` times ``peak_tflops``. Not the
        ``achieved_tflops`` column, which is one call's own ops over its self time."""
        return self.model_flops / self.seconds / 1e12

    @property
    def peak_tflops(self) -> float:
        """The peak the utilisation is measured against (the device's for ``dtype``),
        TFLOP/s."""
        return self.peak_flops_per_s / 1e12


def utilization(profile: ProfileData, step_ms: float, peaks: DevicePeaks,
                dtype: str | torch.dtype | None = None) -> Utilization:
    """MFU and HFU of ``profile``'s work done in ``step_ms`` milliseconds.

    A profile with ``backward=True`` is a training step (forward + backward FLOPs); without it,
    a forward. ``dtype`` picks the peak (default: the dtype of most multiply-accumulates).

    Raises:
        TypeError: ``peaks`` is not a :class:`DevicePeaks` or ``step_ms`` not a number.
        ValueError: ``step_ms`` is not a positive finite time, the device has no peak
            for the dtype, or ``profile`` counted no ops (a timing or memory pass: its FLOPs
            are unknown, and an MFU of 0 would say the device did nothing) or knows none
            (no formula covers any of its work).
    """
    if not isinstance(peaks, DevicePeaks):
        raise TypeError(f"peaks must be a DevicePeaks (device_peaks('H100 SXM'), "
                        f"measure_peaks()), got {type(peaks).__name__} {peaks!r}")
    if not profile.counted:
        raise ValueError("profile counts no ops (a timing or memory pass): its FLOPs are "
                         "unknown, not 0; pass a profile() result, or merge this one into it "
                         "(counts.merge(this))")
    if not knows_flops(profile):
        raise ValueError(f"no FLOPs of the profile are known ({without_formula(profile)}): "
                         "an MFU of 0 would say the device did nothing; register formulas "
                         "for them (docs/extending.md)")
    check_real(step_ms, "step_ms", "a time in milliseconds")
    if not 0 < step_ms < math.inf:
        raise ValueError(f"step_ms must be a positive time in milliseconds, got {step_ms!r}")
    name = peak_dtype(dtype) if dtype is not None else _main_dtype(profile, peaks)
    peak = None if name is None else peaks.flops_per_s(name)
    if dtype is None and name is None:
        raise ValueError("no call of the profile has multiply-accumulates in a dtype with a "
                         f"peak, to take the peak of {peaks.name} from: pass dtype=")
    if peak is None:
        raise ValueError(f"{peaks.name} has no peak for dtype {dtype or name!r}: pass dtype=")
    recomputed = [r.metrics["self_recompute_macs"] for r in profile.records
                  if "self_recompute_macs" in r.metrics]  # a TrafficListener's
    recompute = 2 * sum(macs for macs in recomputed if macs is not None)
    hardware = float(profile.total_flops or 0)  # a counting pass (checked above)
    # every counted work known: the forward, the backward, the checkpoints' reruns
    complete = profile.macs_complete and None not in recomputed
    if profile.backward:
        hardware += 2 * float(profile.total_backward_macs or 0)
        complete = complete and bool(profile.backward_complete)
    return Utilization(hardware - recompute, hardware, recompute, step_ms / 1e3, peak,
                       name or "", complete)


def _main_dtype(profile: ProfileData, peaks: DevicePeaks) -> str | None:
    """The dtype in which most multiply-accumulates ran."""
    weights: dict[str, float] = {}
    for record in profile.records:
        if record.self_macs:
            name = call_dtype(record, peaks)
            if name is not None:
                weights[name] = weights.get(name, 0) + record.self_macs
    return max(weights, key=lambda key: weights[key]) if weights else None


def transformer_flops_per_token(params: int, layers: int, heads: int, head_dim: int,
                                seq_len: int) -> int:
    """The PaLM / nanoGPT estimate of training FLOPs per token, ``6N + 12·L·H·Q·T``: 6 FLOPs
    per parameter (2 forward, 4 backward) plus attention's score and value matmuls (``L``
    layers, ``H`` heads of size ``Q``, sequence length ``T``)."""
    return 6 * params + 12 * layers * heads * head_dim * seq_len


def knows_flops(profile: ProfileData) -> bool:
    """Whether some of ``profile``'s FLOPs are known, or all of them are 0 (a complete count):
    not so when no formula covers any of its multiply-accumulates, whose known total of 0
    says nothing."""
    return bool(profile.total_macs) or profile.macs_complete

