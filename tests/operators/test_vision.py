"""torchvision operators (``operators/vision.py``): NMS, ROI align / pool and their
position-sensitive twins, deformable convolution, forward and backward."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from moduleprofiler import ModuleProfiler
from moduleprofiler.operators import lookup
from moduleprofiler.operators._common import Count
from moduleprofiler.operators.registry import MISSING, OperatorCounter, load_families
from moduleprofiler.operators.vision import pool_windows
from tests.operators.helpers import count, fcm_flops

torchvision = pytest.importorskip("torchvision")
ops = torchvision.ops
load_families()  # moduleprofiler may have been imported before torchvision in this process

torch.manual_seed(0)
FEATURES = torch.randn(2, 3, 10, 12)
# (batch index, x1, y1, x2, y2)
ROIS = torch.tensor([[0, 1.0, 1.0, 6.0, 7.0], [1, 0.0, 2.0, 9.0, 9.0], [0, 2.5, 0.5, 11.0, 8.0]])


def backward_count(fn: Callable[..., Tensor], *inputs: Tensor) -> Count:
    """(ops, macs) of the backward of ``fn(*inputs).sum()`` (the inputs made leaves)."""
    leaves = [x.detach().clone().requires_grad_() for x in inputs]
    total = fn(*leaves).sum()
    counter = OperatorCounter()
    with counter:
        total.backward()
    assert not counter.missing, dict(counter.missing)
    return counter.ops, counter.macs


def test_every_torchvision_operator_has_a_formula() -> None:
    for name in ("nms", "roi_align", "_roi_align_backward", "roi_pool", "_roi_pool_backward",
                 "ps_roi_align", "_ps_roi_align_backward", "ps_roi_pool",
                 "_ps_roi_pool_backward", "deform_conv2d", "_deform_conv2d_backward"):
        assert lookup(getattr(torch.ops.torchvision, name).default) is not MISSING, name


# -- NMS ---------------------------------------------------------------------------------------

def test_nms_counts_every_pair() -> None:
    boxes = torch.tensor([[0, 0, 1, 1.0], [0, 0, 1, 1.1], [5, 5, 6, 6]])
    scores = torch.tensor([0.9, 0.8, 0.7])
    # areas 3 * 3 = 9, sort 3 * ceil(log2 3) = 6, 3 pairs * 13 = 39
    assert count(ops.nms, boxes, scores, 0.5) == (9 + 6 + 39, 0)


def test_nms_is_the_worst_case_whatever_is_suppressed() -> None:
    # 10 identical boxes: the CPU kernel computes 9 IoUs and suppresses the rest, but the count
    # is the worst case: 30 + 10 * 4 + 13 * 45 = 655
    boxes = torch.tensor([[0, 0, 1, 1.0]]).repeat(10, 1)
    assert count(ops.nms, boxes, torch.rand(10), 0.5) == (30 + 40 + 585, 0)


# -- ROI align ---------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_roi_align_fixed_sampling(mode: str) -> None:
    # sampling_ratio 2: 4 samples per bin; 3 ROIs * 3 * 4 bins = 36 bin samples sets:
    # per bin and sample 8 per channel (interpolation 7, accumulate 1) + 10 for the weights:
    # 3 * 4 * (3 * 4) * (8 * 3 + 10) = 4896
    assert count(ops.roi_align, FEATURES, ROIS, (3, 4), 1.0, 2, True, mode=mode) == (4896, 0)


def test_roi_align_adaptive_sampling_reads_the_boxes() -> None:
    # grid = ceil(h / 3) x ceil(w / 4): ROI 0 h 6 w 5: 2 x 2; ROI 1 h 7 w 9: 3 x 3;
    # ROI 2 h 7.5 w 8.5: 3 x 3; 22 samples per bin in all: 12 * 22 * 34 = 8976
    assert count(ops.roi_align, FEATURES, ROIS, (3, 4), 1.0, -1, False) == (8976, 0)
    # spatial_scale 0.5 halves the boxes: 1 x 1, 2 x 2, 2 x 2 -> 9: 12 * 9 * 34 = 3672
    assert count(ops.roi_align, FEATURES, ROIS, (3, 4), 0.5, -1, False) == (3672, 0)


def test_roi_align_adaptive_sampling_on_meta_covers_the_map() -> None:
    # every box taken as the 10 x 12 map: ceil(10/3) * ceil(12/4) = 12 samples, 36 in all:
    # 12 * 36 * 34 = 14688
    meta = FEATURES.to("meta"), ROIS.to("meta")
    assert count(ops.roi_align, *meta, (3, 4), 1.0, -1, False) == (14688, 0)


def test_roi_align_backward() -> None:
    # one divide per gradient element (3 * 3 * 3 * 4 = 108), then as the forward: 4896
    fn = lambda x: ops.roi_align(x, ROIS, (3, 4), 1.0, 2, True)  # noqa: E731
    assert backward_count(fn, FEATURES) == (108 + 4896, 0)


def test_ps_roi_align() -> None:
    x = torch.randn(1, 8, 6, 6)  # 8 channels = 2 outputs * (2 x 2 bins)
    roi = torch.tensor([[0, 0.0, 0.0, 5.0, 5.0]])
    # 4 bins * 4 samples * (8 * 2 + 10) = 416
    assert count(ops.ps_roi_align, x, roi, (2, 2), 1.0, 2) == (416, 0)
    fn = lambda t: ops.ps_roi_align(t, roi, (2, 2), 1.0, 2)  # noqa: E731
    # 8 gradient elements, then 416
    assert backward_count(fn, x) == (8 + 416, 0)


# -- ROI pooling -------------------------------------------------------------------------------

POOL_INPUT = torch.randn(1, 2, 6, 6)
# ROI 0 spans 6 x 6 cells: four 3 x 3 windows; ROI 1 spans rows 2-3, columns 1-3: windows of
# 1 row by 2 columns ([1, 3) and [2, 4))
POOL_ROIS = torch.tensor([[0, 0.0, 0.0, 5.0, 5.0], [0, 1.0, 2.0, 3.0, 3.0]])


def test_roi_pool() -> None:
    # 2 channels * (4 * (9 - 1) + 4 * (2 - 1)) = 72 comparisons
    assert count(ops.roi_pool, POOL_INPUT, POOL_ROIS, (2, 2), 1.0) == (72, 0)


def test_roi_pool_backward() -> None:
    # one add per gradient element: 2 ROIs * 2 channels * 4 bins = 16
    fn = lambda x: ops.roi_pool(x, POOL_ROIS, (2, 2), 1.0)  # noqa: E731
    assert backward_count(fn, POOL_INPUT) == (16, 0)


def test_roi_pool_windows_are_torchvisions() -> None:
    # the kernel's own windows, read from its maxima over a ramp (bottom-right corner) and a
    # falling ramp (top-left corner), against ours, on random boxes and scales
    generator = torch.Generator().manual_seed(1)
    height, width = 13, 17
    ramp = torch.arange(height * width, dtype=torch.float32).view(1, 1, height, width)
    for scale in (1.0, 0.5, 0.25):
        corners = torch.rand(30, 4, generator=generator) * torch.tensor(
            [width, height, width, height]) / scale * 1.3 - 2
        rois = torch.cat([torch.zeros(30, 1), corners], dim=1)
        high, argmax = torch.ops.torchvision.roi_pool(ramp, rois, scale, 3, 5)
        low = -torch.ops.torchvision.roi_pool(-ramp, rois, scale, 3, 5)[0]
        rows = high // width - low // width + 1
        cols = high % width - low % width + 1
        expected = torch.where(argmax >= 0, rows * cols, 0).view(30, 3, 5)
        ours = pool_windows(rois, scale, (3, 5), (height, width), True, (height, width))
        assert torch.equal(ours.to(expected.dtype), expected)


def test_ps_roi_pool() -> None:
    x = torch.randn(1, 8, 6, 6)
    roi = torch.tensor([[0, 0.0, 0.0, 5.0, 5.0]])
    # the box spans 5 cells (no + 1 here); bins of 2.5: windows [0, 3) and [2, 5), 3 x 3 = 9:
    # 2 outputs * 4 bins * 9 (8 adds, 1 divide) = 72
    assert count(ops.ps_roi_pool, x, roi, (2, 2), 1.0) == (72, 0)
    fn = lambda t: ops.ps_roi_pool(t, roi, (2, 2), 1.0)  # noqa: E731
    # a divide and 9 adds per gradient element: 8 * 10 = 80
    assert backward_count(fn, x) == (80, 0)


# -- deformable convolution --------------------------------------------------------------------

WEIGHT = torch.randn(4, 3, 3, 3)
OFFSET = torch.randn(2, 2 * 9, 8, 10)  # (N, 2 * kh * kw, OH, OW)
MASK = torch.rand(2, 9, 8, 10)
# outputs 2 * 4 * 8 * 10 = 640, each a dot product of Cin * K = 27: 640 * 53 = 33920, the bias
# add 640; 4320 samples read (2 * 3 * 9 * 80), 7 each: 30240; 1440 sample points (2 * 9 * 80),
# 12 each: 17280
DEFORM = 33920 + 640 + 30240 + 17280
DEFORM_MACS = 640 * 27


def test_deform_conv2d() -> None:
    assert count(ops.deform_conv2d, FEATURES, OFFSET, WEIGHT) == (DEFORM, DEFORM_MACS)
    # the mask multiplies each sample read: + 4320
    assert count(ops.deform_conv2d, FEATURES, OFFSET, WEIGHT, mask=MASK) == \
        (DEFORM + 4320, DEFORM_MACS)


def test_deform_conv2d_macs_are_the_convolutions() -> None:
    # with zero offsets it is conv2d: FlopCounterMode counts 2 * macs for it (34560)
    assert 2 * count(ops.deform_conv2d, FEATURES, torch.zeros_like(OFFSET), WEIGHT)[1] == \
        fcm_flops(F.conv2d, FEATURES, WEIGHT) == 34560
    # groups and offset groups: (1, 4, 6, 6) -> (1, 6, 4, 4), groups 2, offset groups 2
    x, w = torch.randn(1, 4, 6, 6), torch.randn(6, 2, 3, 3)
    grouped = torch.ops.torchvision.deform_conv2d(
        x, w, torch.zeros(1, 2 * 2 * 9, 4, 4), torch.zeros(1, 2 * 9, 4, 4), torch.zeros(6),
        1, 1, 0, 0, 1, 1, 2, 2, False)
    assert grouped.shape == (1, 6, 4, 4)
    macs = count(torch.ops.torchvision.deform_conv2d, x, w, torch.zeros(1, 36, 4, 4),
                 torch.zeros(1, 18, 4, 4), torch.zeros(6), 1, 1, 0, 0, 1, 1, 2, 2, False)[1]
    assert 2 * macs == fcm_flops(F.conv2d, x, w, groups=2) == 2 * 96 * 18


def test_deform_conv2d_backward() -> None:
    # products: input columns and weight gradient, 2 * 17280 macs, 2 ops each: 69120;
    # per sample read 31 (recomputed sample 7, input scatter 8, offset gradients 16): 133920;
    # sample points again 17280; bias gradient 640 - 4 = 636
    fn = lambda x, o, w: ops.deform_conv2d(x, o, w)  # noqa: E731
    expected = 69120 + 133920 + 17280 + 636
    assert backward_count(fn, FEATURES, OFFSET, WEIGHT) == (expected, 2 * DEFORM_MACS)
    masked = lambda x, o, w, m: ops.deform_conv2d(x, o, w, mask=m)  # noqa: E731
    # the mask: + 6 per sample read, 4320 * 6 = 25920
    assert backward_count(masked, FEATURES, OFFSET, WEIGHT, MASK) == \
        (expected + 25920, 2 * DEFORM_MACS)


# -- a detection head, profiled ----------------------------------------------------------------

class Head(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.offset = nn.Conv2d(8, 18, 3, padding=1)
        self.deform = ops.DeformConv2d(8, 8, 3, padding=1)
        self.align = ops.RoIAlign((2, 2), 1.0, 2)
        self.pool = ops.RoIPool((2, 2), 1.0)

    def forward(self, x: Tensor) -> Any:
        features = self.conv(x)
        features = self.deform(features, self.offset(features))
        rois = torch.tensor([[0, 1.0, 1.0, 6.0, 6.0], [0, 0.0, 0.0, 7.0, 5.0]])
        keep = ops.nms(rois[:, 1:], torch.tensor([0.9, 0.8]), 0.5)
        return self.align(features, rois[keep]).sum() + self.pool(features, rois).sum()


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_detection_head_profiles_completely(backward: bool) -> None:
    profile = ModuleProfiler().profile(Head(), torch.randn(1, 3, 8, 8), backward=backward)
    assert profile.complete, (profile.unsupported_ops, profile.unsupported)
