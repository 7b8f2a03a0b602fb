"""The odd-shape rows' benchmarks: every shape is of the class it measures, and held-out
shapes are not grid shapes."""

from __future__ import annotations

from moduleprofiler.prediction.calibrate_odd_shapes import (
    dense_conv_shapes,
    dense_linear_shapes,
    misaligned_bmm_shapes,
    misaligned_linear_shapes,
    odd_conv_shapes,
    odd_group_shapes,
)
from moduleprofiler.prediction.op_classes import (
    ODD_GROUP_WIDTH,
    bmm_features,
    conv_features,
    gemm_features,
)


def test_held_out_shapes_are_off_the_grid() -> None:
    for shapes in (misaligned_bmm_shapes, misaligned_linear_shapes, odd_conv_shapes,
                   dense_conv_shapes, dense_linear_shapes, odd_group_shapes):
        grid, held_out = set(shapes()), set(shapes(held_out=True))
        assert held_out and not grid & held_out


def test_every_batched_product_and_layer_is_misaligned_in_fp32_and_bf16() -> None:
    # 25 tokens: 25 * 4 = 100 and 25 * 2 = 50 bytes a row, neither a multiple of 16;
    # 50 tokens: 200 and 100 bytes, neither
    for held_out in (False, True):
        for _, (b, m, n, k) in misaligned_bmm_shapes(held_out):
            for size in (4, 2):
                assert bmm_features(b, m, n, k, size)[-1] == 6.0
    for m, n, k in misaligned_linear_shapes():
        for size in (4, 2):
            assert gemm_features(m, n, k, size)[-1] == 6.0
    # held out: 196 patches (784 bytes a row in fp32, aligned; 392 in bf16, not) and 258
    assert {gemm_features(m, n, k, 4)[-1] for m, n, k in misaligned_linear_shapes(True)} == \
        {0.0, 6.0}
    assert {gemm_features(m, n, k, 2)[-1] for m, n, k in misaligned_linear_shapes(True)} == {6.0}


def test_grouped_convolutions_are_neither_dense_nor_depthwise() -> None:
    grouped = [s for s in odd_conv_shapes() if 1 < s[6] < s[1]]
    depthwise = [s for s in odd_conv_shapes() if s[6] == s[1]]
    # group widths 8 to 64, channels-first, 3 x 3
    assert {s[1] // s[6] for s in grouped} == {8, 16, 32, 64}
    assert {s[7] for s in odd_conv_shapes()} == {0}
    # 120 channels = 24 x 5 groups is held out of these rows (odd_group_shapes measures it)
    assert not any(s[1] == 120 and s[6] == 5 for s in grouped)
    assert any(s[1] == 120 and s[6] == 5 for s in odd_conv_shapes(held_out=True))
    assert {s[4] for s in depthwise} == {3, 5}


def test_odd_group_widths_are_measured_and_held_out_apart() -> None:
    widths = {s[1] // s[6] for s in odd_group_shapes()}
    held_out = {s[1] // s[6] for s in odd_group_shapes(held_out=True)}
    assert widths == {24, 48} and held_out == {40, 56, 72}
    # RegNetY-016's widest stage: 888 channels = 24 x 37 groups, a measured row
    assert (8, 888, 888, 7, 3, 1, 37, 0) in odd_group_shapes()
    for shape in odd_group_shapes() + odd_group_shapes(held_out=True):
        n, cin, cout, side, kernel, stride, groups, _ = shape
        assert 1 < groups < cin and cin == cout
        # every one of them is set apart from the powers of two by the odd-width feature
        assert conv_features(n, cin, cout, side, kernel, stride, groups)[-2] == ODD_GROUP_WIDTH
