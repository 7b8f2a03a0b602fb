"""The kernel-choice rows' benchmarks on the meta device: the bytes they are priced on, and
held-out shapes that are not grid shapes."""

from __future__ import annotations

import torch

from moduleprofiler.prediction.calibrate_kernels import (
    attention_shapes,
    bmm_shapes,
    conv_shapes,
    roll_bench,
    width_bench,
)

META = torch.device("meta")


def test_width_benchmarks_count_bytes_as_the_main_grid_does() -> None:
    # 4096 elements in rows of 96: 42 rows = 4032 elements; read and written, fp32
    assert width_bench("layer_norm", 4096, 96, META, torch.float32)[1] == 2 * 4032 * 4
    # a backward reads the input and the gradient and writes the input's gradient
    assert width_bench("layer_norm_backward", 4096, 96, META, torch.bfloat16)[1] == \
        3 * 4032 * 2
    # 28 x 28 x 128 = 100352 elements an image: 2 images in 2 ** 18 elements, bf16
    assert roll_bench(2 ** 18, META, torch.bfloat16)[1] == 2 * 2 * 100352 * 2


def test_held_out_shapes_are_off_the_grid() -> None:
    for shapes in (bmm_shapes, conv_shapes, attention_shapes):
        grid, held_out = set(shapes()), set(shapes(held_out=True))
        assert held_out and not grid & held_out
    # the convolutions' last entry says channels-last: both layouts are measured
    assert {shape[-1] for shape in conv_shapes()} == {0, 1}
