"""torchvision's detection operators: ``nms``, ``roi_align``, ``roi_pool``, their
position-sensitive twins, ``deform_conv2d``, and the backward operators autograd runs for them.

torchvision is optional, and importing it takes seconds, so moduleprofiler never does: these
formulas are registered as soon as torchvision's operators exist (at import when torchvision
was imported first, else at the first operator lookup that misses after it was imported).

Conventions (``docs/operators.md``), in the module formulas' units:

* **Bilinear sampling.** A sample point's four weights cost 10 ops: per coordinate a floor, the
  fraction and its complement (3), then the four products. They are counted once per sample
  point and shared by every channel that reads it. Interpolating one channel is a 4-term dot
  product: 7 ops. NB: the sample coordinates themselves (``start + (iy + 0.5) * bin / grid``)
  are index arithmetic and are not counted; the CUDA kernels recompute the weights per channel,
  which is not counted either.
* **Data-dependent windows.** The adaptive sampling grid of ``roi_align``
  (``sampling_ratio <= 0``) and the windows of ``roi_pool`` depend on the boxes. On real tensors
  the boxes are read; NB: on the meta device every box is taken to cover the whole feature map.
* **NMS** is counted for its worst case (see :func:`nms_ops`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from moduleprofiler.operators._common import ZERO, Args, Count, numel, register
from moduleprofiler.operators.registry import OPERATOR_FORMULAS, register_family_loader
from moduleprofiler.operators.selection import log2_ceil

SAMPLE_WEIGHTS = 10   # floor, fraction, complement per coordinate (6) + 4 products
INTERPOLATE = 7       # w1*v1 + w2*v2 + w3*v3 + w4*v4
OFFSET_ADD = 2        # deform_conv2d: the learned offset added to each coordinate
IOU = 13              # 4 max/min, 2 subtracts, 2 clamps at 0, area product, union (2), divide,
#                       comparison with the threshold
BOX_AREA = 3          # (x2 - x1) * (y2 - y1)


# -- non-maximum suppression -------------------------------------------------------------------

def nms_ops(args: Args, out: Any) -> Count:
    """3N + N * ceil(log2 N) + 13 * N * (N - 1) / 2 for N boxes: areas, the sort, every IoU.

    NB: the CPU kernel skips boxes already suppressed, so the IoUs it computes depend on the
    data; the count is the worst case, N * (N - 1) / 2 IoUs, which is exact when no box is
    suppressed and is what the CUDA kernel computes (its IoU mask covers every pair).
    """
    boxes = args.tensor("dets")
    n = int(boxes.shape[0]) if boxes is not None and boxes.dim() else 0
    return BOX_AREA * n + n * log2_ceil(n) + IOU * (n * (n - 1) // 2), 0


# -- ROI align ---------------------------------------------------------------------------------

def _boxes(rois: Tensor | None) -> Tensor | None:
    """The (R, 4) box coordinates of ``rois`` (R, 5) on the CPU; ``None`` on meta."""
    if rois is None or rois.device.type == "meta" or rois.dim() != 2:
        return None
    return rois.detach().to("cpu")[:, 1:5]


def align_samples(rois: Tensor | None, scale: float, pooled: tuple[int, int], ratio: int,
                  aligned: bool, size: tuple[int, int]) -> int:
    """Samples per bin summed over ROIs: ``ratio**2`` each, or the adaptive
    ``ceil(roi_h / ph) * ceil(roi_w / pw)`` (NB: on meta, a ROI covering the ``size`` map)."""
    count = int(rois.shape[0]) if rois is not None and rois.dim() else 0
    if count == 0:
        return 0
    if ratio > 0:
        return count * ratio * ratio
    boxes = _boxes(rois)
    if boxes is None:
        return count * math.ceil(size[0] / pooled[0]) * math.ceil(size[1] / pooled[1])
    heights = (boxes[:, 3] - boxes[:, 1]) * scale
    widths = (boxes[:, 2] - boxes[:, 0]) * scale
    if not aligned:  # torchvision forces malformed ROIs to 1x1
        heights, widths = heights.clamp(min=1.0), widths.clamp(min=1.0)
    grid_h = torch.ceil(heights / pooled[0]).clamp(min=0)
    grid_w = torch.ceil(widths / pooled[1]).clamp(min=0)
    return int((grid_h * grid_w).sum())


def align_ops(samples: int, channels: int, pooled: tuple[int, int]) -> int:
    """ph * pw * samples * (8 * channels + 10): per output element and sample 7 for the
    interpolation and 1 to accumulate (the last one is the divide by the sample count); the
    weights, 10 per sample point, shared by the channels."""
    return pooled[0] * pooled[1] * samples * (8 * channels + SAMPLE_WEIGHTS)


def _pooled(args: Args) -> tuple[int, int]:
    return int(args.get("pooled_height", 1)), int(args.get("pooled_width", 1))


def _map_size(args: Args) -> tuple[int, int]:
    """(H, W) of the feature map: from the input, or the backward's ``height`` / ``width``."""
    source = args.tensor("input")
    if source is not None and source.dim() == 4:
        return int(source.shape[2]), int(source.shape[3])
    return int(args.get("height", 1)), int(args.get("width", 1))


def _align_samples(args: Args, aligned: bool) -> int:
    return align_samples(args.tensor("rois"), args.number("spatial_scale", 1.0), _pooled(args),
                         int(args.get("sampling_ratio", -1)), aligned, _map_size(args))


def _out_channels(tensor: Tensor | None) -> int:
    return int(tensor.shape[1]) if tensor is not None and tensor.dim() == 4 else 0


def roi_align_ops(args: Args, out: Any) -> Count:
    """ph * pw * S * (8C + 10), S = samples per bin summed over ROIs (see align_ops)."""
    source = args.tensor("input")
    channels = int(source.shape[1]) if source is not None and source.dim() == 4 else 0
    return align_ops(_align_samples(args, args.flag("aligned")), channels, _pooled(args)), 0


def roi_align_backward_ops(args: Args, out: Any) -> Count:
    """numel(grad) + ph * pw * S * (8C + 10): per gradient element one divide by the sample
    count, per sample 4 products and 4 accumulates; the weights again."""
    grad = args.tensor("grad")
    channels = int(args.get("channels", _out_channels(grad)))
    return numel(grad) + align_ops(
        _align_samples(args, args.flag("aligned")), channels, _pooled(args)), 0


def ps_roi_align_ops(args: Args, out: Any) -> Count:
    """As roi_align with C the output channels (C_in / (ph * pw)); torchvision samples it as
    an aligned ROI align."""
    channels = _out_channels(out[0] if isinstance(out, (tuple, list)) else out)
    return align_ops(_align_samples(args, True), channels, _pooled(args)), 0


def ps_roi_align_backward_ops(args: Args, out: Any) -> Count:
    """numel(grad) + ph * pw * S * (8C + 10), C the output channels."""
    grad = args.tensor("grad")
    return numel(grad) + align_ops(
        _align_samples(args, True), _out_channels(grad), _pooled(args)), 0


# -- ROI pooling -------------------------------------------------------------------------------

def _round_half_away(values: Tensor) -> Tensor:
    """C's ``round`` (halves away from zero; ``torch.round`` rounds them to even)."""
    return torch.sign(values) * torch.floor(values.abs() + 0.5)


def _bin_extents(starts: Tensor, sizes: Tensor, pooled: int, clip: int) -> Tensor:
    """(R, pooled) window lengths along one axis, as torchvision's pooling kernels cut them."""
    bins = sizes.unsqueeze(1) / pooled
    steps = torch.arange(pooled, dtype=bins.dtype)
    begin = torch.floor(steps * bins) + starts.unsqueeze(1)
    end = torch.ceil((steps + 1) * bins) + starts.unsqueeze(1)
    return (end.clamp(0, clip) - begin.clamp(0, clip)).clamp(min=0)


def pool_windows(rois: Tensor | None, scale: float, pooled: tuple[int, int],
                 size: tuple[int, int], plus_one: bool, clip: tuple[int, int]) -> Tensor:
    """(R, ph, pw) window areas of ROI pooling. ``plus_one``: a box [a, b] spans b - a + 1
    cells (roi_pool) rather than b - a (ps_roi_pool); windows are clipped to ``clip``. NB: on
    meta every box covers the whole ``size`` map."""
    count = int(rois.shape[0]) if rois is not None and rois.dim() else 0
    boxes = _boxes(rois)
    if boxes is None:
        starts = torch.zeros(count, 2, dtype=torch.float64)
        sizes = torch.tensor([size], dtype=torch.float64).expand(count, 2)
    else:
        corners = _round_half_away(boxes * scale)
        starts = corners[:, [1, 0]]
        sizes = (corners[:, [3, 2]] - starts + int(plus_one)).clamp(min=1)
    heights = _bin_extents(starts[:, 0], sizes[:, 0], pooled[0], clip[0])
    widths = _bin_extents(starts[:, 1], sizes[:, 1], pooled[1], clip[1])
    return heights.unsqueeze(2) * widths.unsqueeze(1)


def roi_pool_ops(args: Args, out: Any) -> Count:
    """C * sum over ROI bins of (window - 1) comparisons (0 for an empty window)."""
    source = args.tensor("input")
    if source is None or source.dim() != 4:
        return ZERO
    size = _map_size(args)
    windows = pool_windows(args.tensor("rois"), args.number("spatial_scale", 1.0),
                           _pooled(args), size, plus_one=True, clip=size)
    return int(source.shape[1]) * int((windows - 1).clamp(min=0).sum()), 0


def roi_pool_backward_ops(args: Args, out: Any) -> Count:
    """numel(grad): each gradient element is added at its maximum's position."""
    return numel(args.tensor("grad")), 0


def ps_roi_pool_ops(args: Args, out: Any) -> Count:
    """C_out * sum over ROI bins of the window (window - 1 adds and a divide; 0 if empty).

    NB: torchvision's forward clips windows to H - 1 and W - 1, its backward to H and W; each
    is counted as it runs.
    """
    size = _map_size(args)
    windows = pool_windows(args.tensor("rois"), args.number("spatial_scale", 1.0),
                           _pooled(args), size, plus_one=False, clip=(size[0] - 1, size[1] - 1))
    channels = _out_channels(out[0] if isinstance(out, (tuple, list)) else out)
    return channels * int(windows.sum()), 0


def ps_roi_pool_backward_ops(args: Args, out: Any) -> Count:
    """C_out * sum over non-empty ROI bins of (window + 1): a divide, then an add per cell."""
    size = _map_size(args)
    windows = pool_windows(args.tensor("rois"), args.number("spatial_scale", 1.0),
                           _pooled(args), size, plus_one=False, clip=size)
    filled = windows[windows > 0]
    return _out_channels(args.tensor("grad")) * int((filled + 1).sum()), 0


# -- deformable convolution --------------------------------------------------------------------
#
# deform_conv2d samples the input at every (tap, output position) moved by a learned offset
# (one offset per offset group), multiplies by the mask when there is one, and runs the
# convolution's products on those samples. ``columns`` = N * C_in * kh * kw * OH * OW samples
# read; ``points`` = N * offset_groups * kh * kw * OH * OW sample points.

POINT = OFFSET_ADD + SAMPLE_WEIGHTS  # 12 per sample point
# Backward, per sample read: the sample recomputed for the weight gradient (7), the input
# gradient scattered to the 4 neighbours (4 products, 4 accumulates), the offset gradient
# (per coordinate the interpolation's derivative, 6, times the column gradient, accumulated: 8).
COLUMN_BACKWARD = INTERPOLATE + 8 + 2 * 8
# With a mask, per sample read: the recomputed sample, the column gradient for the input and
# the two offset gradients times the mask (4), and the mask gradient (a multiply-accumulate, 2).
MASK_BACKWARD = 6


def _deform_sizes(args: Args, output: Tensor | None) -> tuple[int, int, int, int]:
    """(outputs, macs per output, columns, points) of a deformable convolution."""
    weight = args.tensor("weight")
    if output is None or weight is None or output.dim() != 4 or weight.dim() != 4:
        return 0, 0, 0, 0
    batch, _, out_h, out_w = (int(s) for s in output.shape)
    source = args.tensor("input")
    in_channels = int(source.shape[1]) if source is not None else 0
    taps = int(weight.shape[2]) * int(weight.shape[3])
    positions = batch * taps * out_h * out_w
    offset_groups = int(args.get("offset_groups", 1))
    return numel(output), int(weight[0].numel()), in_channels * positions, offset_groups * positions


def deform_conv2d_ops(args: Args, out: Any) -> Count:
    """out * (2 * Cin/g * K) (products and the bias add) + columns * (7 + mask) + points * 12;
    macs = out * Cin/g * K.

    NB: torchvision always adds a bias (zeros when none is given), so its add is always counted.
    """
    outputs, per_output, columns, points = _deform_sizes(args, out)
    macs = outputs * per_output
    sampling = columns * (INTERPOLATE + int(args.flag("use_mask"))) + points * POINT
    return outputs * (2 * per_output - 1) + outputs + sampling, macs


def deform_conv2d_backward_ops(args: Args, out: Any) -> Count:
    """4 * macs (input-column and weight gradients, 2 ops per MAC) + columns * (31 + 6 * mask)
    + points * 12 + (numel(grad) - C_out) for the bias gradient; macs = 2 * forward macs."""
    grad = args.tensor("grad")
    outputs, per_output, columns, points = _deform_sizes(args, grad)
    macs = 2 * outputs * per_output
    sampling = columns * (COLUMN_BACKWARD + MASK_BACKWARD * int(args.flag("use_mask")))
    bias = outputs - _out_channels(grad) if outputs else 0
    return 2 * macs + sampling + points * POINT + bias, macs


# -- registration ------------------------------------------------------------------------------

FORMULAS = {
    "nms": nms_ops,
    "roi_align": roi_align_ops,
    "_roi_align_backward": roi_align_backward_ops,
    "ps_roi_align": ps_roi_align_ops,
    "_ps_roi_align_backward": ps_roi_align_backward_ops,
    "roi_pool": roi_pool_ops,
    "_roi_pool_backward": roi_pool_backward_ops,
    "ps_roi_pool": ps_roi_pool_ops,
    "_ps_roi_pool_backward": ps_roi_pool_backward_ops,
    "deform_conv2d": deform_conv2d_ops,
    "_deform_conv2d_backward": deform_conv2d_backward_ops,
}


def register_torchvision() -> bool:
    """Register the formulas of the torchvision operators that exist; False (nothing done) when
    torchvision's operators are not loaded (torchvision not installed, or not imported yet)."""
    namespace = torch.ops.torchvision
    found = [name for name in FORMULAS if hasattr(namespace, name)]
    for name in found:
        if getattr(namespace, name) not in OPERATOR_FORMULAS:  # registered once
            register(getattr(namespace, name))(FORMULAS[name])
    return bool(found)


register_family_loader(register_torchvision)
