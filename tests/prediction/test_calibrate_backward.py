"""The training step's calibration benchmarks, run on the CPU: the shapes, the layouts and the
bytes each table's rows are keyed by."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from moduleprofiler.prediction import calibrate_backward
from moduleprofiler.prediction.calibrate_backward import (
    BACKWARD_MEMORY_KINDS,
    backward_memory_bench,
    backward_tables,
    layout_shapes,
)


class _CpuSweep:
    """Runs each benchmark once and reports 1 µs per label (the shape of a real sweep)."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, Callable[[], Callable[[], Any]]]] = []
        self.results: list[Any] = []

    def add(self, label: str, make: Callable[[], Callable[[], Any]]) -> None:
        self.runs.append((label, make))

    def run(self) -> dict[str, float]:
        labels = {}
        for label, make in self.runs:
            self.results.append((label, make()()))
            labels[label] = 1.0
        self.runs.clear()
        return labels


def test_layout_shapes_keep_long_reductions_and_odd_widths_under_the_cap() -> None:
    shapes = layout_shapes(quick=False)
    # a vision transformer's weight gradient: 768 x 3072 reduced over 32 x 197 tokens
    assert (768, 3072, 6304) in shapes
    # a vocabulary in each position: the output width, the reduction, the rows
    assert {(50257, 768, 768), (768, 50257, 768), (768, 768, 50257)} <= set(shapes)
    assert (50257, 768, 4096) not in shapes  # 2 * 50257 * 768 * 4096 > 2 ** 38
    assert all(2 * m * n * k <= calibrate_backward.LAYOUT_FLOP_CAP for m, n, k in shapes)
    assert len(shapes) == len(set(shapes))


def test_each_layout_stores_the_operand_it_names_transposed(monkeypatch: Any) -> None:
    monkeypatch.setattr(calibrate_backward, "LAYOUT_DIMS", (8, 16))
    monkeypatch.setattr(calibrate_backward, "LAYOUT_UNALIGNED", ())
    monkeypatch.setattr(calibrate_backward, "MEMORY_SIZES", (2 ** 10, 2 ** 12))
    sweep = _CpuSweep()
    tables = backward_tables(sweep, torch.device("cpu"), torch.float32, quick=False)
    # 2 sizes in each of m, n, k: 8 shapes per layout
    assert [len(tables[f"gemm_grad_{layout}"]) for layout in ("nn", "nt", "tn")] == [8, 8, 8]
    assert tables["gemm_grad_tn"][1] == [8, 8, 16, 1.0]
    products = dict(sweep.results)
    assert products["gemm_grad_tn:8:16:8"].shape == (8, 16)
    # two sizes of each memory kind, keyed by bytes: 1024 and 4096 elements of a layer norm's
    # gradient, input and input gradient (3 x 4 bytes each)
    assert tables["mem_layer_norm_backward"] == [[12288, 1.0], [49152, 1.0]]
    a, b = calibrate_backward._layout_operands(torch.zeros(64), torch.zeros(64), "tn", 4, 2, 8)
    assert a.shape == (4, 8) and a.stride() == (1, 4)  # stored 8 x 4: its transpose
    a, b = calibrate_backward._layout_operands(torch.zeros(64), torch.zeros(64), "nt", 4, 2, 8)
    assert b.shape == (8, 2) and b.stride() == (1, 8)


@pytest.mark.parametrize("kind, numel, expected", [
    # 2 ** 20 elements of 28 x 28 x 256 maps: batch 5 (1,003,520 elements) read and written
    ("batch_norm_train", 2 ** 20, 2 * 5 * 256 * 784 * 4),
    # the gradient and the input read, the input's gradient written
    ("batch_norm_backward", 2 ** 20, 3 * 5 * 256 * 784 * 4),
    ("layer_norm_backward", 2 ** 20, 3 * 2 ** 20 * 4),
    # 1024 rows of 1024 summed into one row of 1024
    ("bias_grad", 2 ** 20, (2 ** 20 + 1024) * 4),
    # 64 maps of 128 x 128 pooled to 64 x 64: gradient (4 B) and indices (8 B) of the
    # pooled, input read and its gradient written
    ("max_pool_backward", 2 ** 20, 64 * 64 * 64 * 12 + 2 * 2 ** 20 * 4),
])
def test_backward_memory_benchmarks_move_the_bytes_they_are_keyed_by(
        kind: str, numel: int, expected: int) -> None:
    bench, moved = backward_memory_bench(kind, numel, torch.device("cpu"), torch.float32)
    assert moved == expected
    bench()  # it runs


def test_every_backward_memory_kind_has_a_benchmark() -> None:
    for kind in BACKWARD_MEMORY_KINDS:
        assert backward_memory_bench(kind, 2 ** 12, torch.device("meta"), torch.bfloat16)[1] > 0
    with pytest.raises(ValueError, match="unknown"):
        backward_memory_bench("nope", 1, torch.device("meta"), torch.float32)
