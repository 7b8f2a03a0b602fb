"""Fake quantization: the quantize-dequantize round trips of quantization-aware training
(``torch.ao.quantization.prepare_qat``: ``FakeQuantize``, ``FusedMovingAvgObsFakeQuantize``,
learnable fake quantizers).

Each element is quantized and dequantized at once, as torch's kernels compute it:
``q = zero_point + round(x / scale)`` (a multiply by ``1 / scale``, a rounding, an add), clamped
to ``[quant_min, quant_max]`` (2 comparisons), and dequantized, ``(q - zero_point) * scale``
(2): **7 per element**. The kernels that also return the gradient mask
(``*_cachemask``) test ``quant_min <= q <= quant_max`` (2 comparisons and an and): **10**. The
fused observer (``_fused_moving_avg_obs_fq_helper``, what the default QAT qconfigs run) first
finds the minimum and maximum of the input (``2 (n - k)`` comparisons for ``k`` sets of
quantization parameters, one per channel with ``per_row_fake_quant``, else one) and moves the
running minimum and maximum towards them (``r + c (x - r)``, 3 each: ``6k``), then fake-quantizes
with the mask. Its ``observer_on`` and ``fake_quant_on`` switches are tensors: read on real
tensors, taken as on where there is no data (meta). NB: computing a scale and zero point from a
minimum and maximum (a few scalar operations per set) and the reciprocal of the scale are not
counted; ``macs`` are 0 throughout.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from moduleprofiler.operators._common import Args, Count, aten, by_decomposition, numel, register

ROUND_TRIP = 7
"""Ops per element of a quantize-dequantize round trip (scale, round, shift, clamp, unshift,
rescale)."""
MASK = 3
"""Ops per element of the gradient mask ``quant_min <= q <= quant_max``."""
MOVING_AVERAGE = 3
"""Ops per running statistic moved towards a new value: ``r + c * (x - r)``."""


def _switched_on(switch: Any) -> bool:
    """Whether a tensor switch (``observer_on``, ``fake_quant_enabled``) is on: read from its
    value on real tensors, on where there is no data to read (meta, fake tensors)."""
    if not isinstance(switch, Tensor) or switch.numel() == 0:
        return True
    if switch.is_meta or type(switch).__name__ == "FakeTensor":
        return True
    return bool(switch.reshape(-1)[0].item() != 0)


@register(*aten("_fake_quantize_learnable_per_tensor_affine",
                "_fake_quantize_learnable_per_channel_affine"))
def fake_quantize_ops(args: Args, out: Any) -> Count:
    """numel * 7: per element a quantize-dequantize round trip."""
    return ROUND_TRIP * numel(args.first()), 0


@register(*aten("fake_quantize_per_tensor_affine_cachemask",
                "fake_quantize_per_channel_affine_cachemask"))
def fake_quantize_cachemask_ops(args: Args, out: Any) -> Count:
    """numel * 10: the round trip (7) and the gradient mask's two comparisons and and (3)."""
    return (ROUND_TRIP + MASK) * numel(args.first()), 0


@register(*aten("_fake_quantize_per_tensor_affine_cachemask_tensor_qparams"))
def fake_quantize_switched_ops(args: Args, out: Any) -> Count:
    """numel * 10 when ``fake_quant_enabled``, else 0 (the input is passed through)."""
    if not _switched_on(args.get("fake_quant_enabled")):
        return 0, 0
    return fake_quantize_cachemask_ops(args, out)  # type: ignore[no-any-return]


# the composite fused_moving_avg_obs_fake_quant takes the same arguments; counted directly, not
# by decomposition, so that its switches are read where it arrives whole (inference_mode)
@register(*aten("_fused_moving_avg_obs_fq_helper", "_fused_moving_avg_obs_fq_helper_functional",
                "fused_moving_avg_obs_fake_quant"))
def fused_observer_fake_quantize_ops(args: Args, out: Any) -> Count:
    """With ``observer_on``: ``2 (n - k)`` min/max comparisons and ``6k`` for the moving
    averages (``k`` = channels with ``per_row_fake_quant``, else 1); with ``fake_quant_on``:
    ``10 n`` (round trip and mask)."""
    x = args.first()
    if not isinstance(x, Tensor):
        return 0, 0
    n = numel(x)
    ops = 0
    if n and _switched_on(args.get("observer_on")):
        sets = 1
        if args.flag("per_row_fake_quant") and x.dim() > 0:
            sets = int(x.shape[int(args.get("ch_axis") or 0)])
        ops += 2 * (n - sets) + 2 * MOVING_AVERAGE * sets
    if _switched_on(args.get("fake_quant_on")):
        ops += (ROUND_TRIP + MASK) * n
    return ops, 0


# composites torch lowers to the kernels above (whole under ``torch.inference_mode``)
by_decomposition(*aten("fake_quantize_per_tensor_affine", "fake_quantize_per_channel_affine"))
