"""The device model on a small synthetic calibration, with hand-computed expectations."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from moduleprofiler.efficiency.peaks import device_peaks
from moduleprofiler.prediction.calibration import Calibration
from moduleprofiler.prediction.device_model import DeviceModel
from moduleprofiler.prediction.op_classes import OpWork, gemm_features, grouped_gemm_features


def _calibration(rows: list[list[float]]) -> Calibration:
    return Calibration("H100 SXM", "test", 132, "x", "today", {"bf16": {"gemm": rows,
                       "mem_unary": [[1e3, 2.0], [1e9, 500.0]]}})


def _gemm(m: int, n: int, k: int) -> OpWork:
    return OpWork("aten.mm", "gemm", gemm_features(m, n, k, 2), "bf16", 2.0 * m * n * k,
                  2.0 * (m * k + k * n + m * n), "gemm")


def test_a_measured_shape_is_predicted_as_measured() -> None:
    peaks = device_peaks("H100 SXM")
    model = DeviceModel(_calibration([[4096, 4096, 4096, 200.0], [64, 64, 64, 3.0]]), peaks,
                        peaks)
    # the exact shape is its own nearest neighbour, at distance 0: weight 1000 against
    # the other's 1 / (6^2 * 3 + 1e-3); its scaling ratio is 1
    assert model.op_us(_gemm(4096, 4096, 4096)) == pytest.approx(200.0, rel=0.01)


def test_a_larger_gemm_scales_by_its_roofline() -> None:
    peaks = device_peaks("H100 SXM")
    model = DeviceModel(_calibration([[4096, 4096, 4096, 200.0]]), peaks, peaks)
    # one neighbour: us * (roof + floor) / (roof_i + floor), floor = 200 (the table's
    # fastest); roof of 2 * 8192 * 4096 * 4096 FLOPs at 989.4 TFLOP/s = 277.8 us, the
    # neighbour's 138.9 us
    roof, roof_i = 2 * 8192 * 4096 ** 2 / 989.4e6, 2 * 4096 ** 3 / 989.4e6
    expected = 200.0 * (roof + 200.0) / (roof_i + 200.0)
    assert model.op_us(_gemm(8192, 4096, 4096)) == pytest.approx(expected, rel=1e-6)


def test_a_datasheet_device_uses_the_reference_fractions_on_its_own_peaks() -> None:
    h100, a100 = device_peaks("H100 SXM"), device_peaks("A100 80GB SXM")
    model = DeviceModel(_calibration([[4096, 4096, 4096, 200.0]]), a100, h100)
    assert model.transferred
    # on the A100 (312 TFLOP/s bf16) the same GEMM's roof is 440.5 us against 138.9 us
    roof, roof_i = 2 * 4096 ** 3 / 312e6, 2 * 4096 ** 3 / 989.4e6
    assert model.op_us(_gemm(4096, 4096, 4096)) == pytest.approx(
        200.0 * (roof + 200) / (roof_i + 200), rel=1e-6)


def test_launching_nothing_costs_no_device_time_and_a_missing_table_is_unknown() -> None:
    peaks = device_peaks("H100 SXM")
    model = DeviceModel(_calibration([[64, 64, 64, 3.0]]), peaks, peaks)
    assert model.op_us(OpWork("aten.view", None, (), "bf16", 0, 0, "view")) == 0.0
    assert model.op_us(OpWork("aten.convolution", "conv", (1.0,) * 7, "bf16", 1, 1,
                              "conv")) is None


def test_memory_bound_operators_follow_the_bytes() -> None:
    peaks = device_peaks("H100 SXM")
    model = DeviceModel(_calibration([[64, 64, 64, 3.0]]), peaks, peaks)
    work = OpWork("aten.relu", "mem_unary", (math.log2(1e9),), "bf16", 0.0, 1e9, "unary")
    assert model.op_us(work) == pytest.approx(500.0, rel=0.01)


def _norm(nbytes: float, width: int) -> OpWork:
    return OpWork("aten.native_layer_norm", "mem_layer_norm",
                  (math.log2(nbytes), math.log2(width)), "bf16", 0.0, nbytes, "layer_norm")


def _norms(rows: list[list[float]]) -> Calibration:
    return Calibration("H100 SXM", "test", 132, "x", "today", {"bf16": {
        "mem_layer_norm": rows}})


def test_a_norm_is_priced_by_the_width_of_its_rows_where_widths_were_measured() -> None:
    peaks = device_peaks("H100 SXM")
    # the main grid's rows are 1024 wide ([bytes, us]); a 48-wide row measured 10x slower
    model = DeviceModel(_norms([[2 ** 27, 50.0], [2 ** 27, 48, 500.0]]), peaks, peaks)
    assert model.op_us(_norm(2 ** 27, 48)) == pytest.approx(500.0, rel=0.01)
    assert model.op_us(_norm(2 ** 27, 1024)) == pytest.approx(50.0, rel=0.01)
    assert not model.unmeasured


def test_an_older_calibration_prices_every_width_as_its_rows_and_says_so() -> None:
    peaks = device_peaks("H100 SXM")
    model = DeviceModel(_norms([[2 ** 20, 5.0], [2 ** 27, 50.0]]), peaks, peaks)
    wide = model.op_us(_norm(2 ** 27, 1024))
    assert not model.unmeasured  # the width it measured: nothing to say
    assert model.op_us(_norm(2 ** 27, 48)) == wide
    assert model.unmeasured == {"mem_layer_norm row widths"}


def test_an_operators_prelude_is_priced_by_its_own_table_and_added() -> None:
    peaks = device_peaks("H100 SXM")
    model = DeviceModel(_calibration([[64, 64, 64, 3.0]]), peaks, peaks)
    copy = OpWork("aten.contiguous", "mem_unary", (math.log2(1e9),), "bf16", 0.0, 1e9, "copy")
    norm = OpWork("aten.native_layer_norm", "mem_unary", (math.log2(1e3),), "bf16", 0.0, 1e3,
                  "layer_norm", prelude=copy)
    # each on a measured row of mem_unary: 500 us (1e9 bytes) and 2 us (1e3 bytes)
    assert model.op_us(copy) == pytest.approx(500.0, rel=0.01)
    assert model.op_us(norm) == pytest.approx(502.0, rel=0.01)
    assert model.op_us(dataclasses.replace(norm, prelude=None)) == pytest.approx(2.0, rel=0.01)


def _unary(nbytes: float) -> OpWork:
    return OpWork("aten.relu", "mem_unary", (math.log2(nbytes),), "bf16", 0.0, nbytes, "unary")


def _cached_and_dram_rows(rows: list[list[float]]) -> Calibration:
    return Calibration("H100 SXM", "test", 132, "x", "today", {"bf16": {"mem_unary": rows}})


def test_a_memory_bound_operator_is_no_faster_than_the_tables_rows_beyond_the_cache() -> None:
    peaks = device_peaks("H100 SXM")
    # a 16 MiB row timed on operands the loop kept in the cache (3 us), and rows of 256 MiB
    # and 1 GiB that time the memory: 160 us per 2^28 bytes
    model = DeviceModel(_cached_and_dram_rows([[2 ** 24, 3.0], [2 ** 28, 160.0],
                                               [2 ** 30, 640.0]]), peaks, peaks)
    # 16 MiB at the memory's rate: 2^24 * 160 / 2^28 = 10 us, not the cached row's 3 us
    assert model.op_us(_unary(2 ** 24)) == pytest.approx(10.0, rel=1e-6)
    # beyond the cache the rows are the floor's own: 1 GiB as measured
    assert model.op_us(_unary(2 ** 30)) == pytest.approx(640.0, rel=0.01)
    # a tiny operator stays launch-bound: its floor, 2^10 * 160 / 2^28 = 0.0006 us, is far
    # below what its nearest row predicts
    assert model.op_us(_unary(2 ** 10)) > 1.0


def test_the_floor_follows_the_devices_bandwidth_and_needs_rows_beyond_the_cache() -> None:
    h100, a100 = device_peaks("H100 SXM"), device_peaks("A100 80GB SXM")
    rows = [[2 ** 24, 3.0], [2 ** 28, 160.0], [2 ** 30, 640.0]]
    moved = DeviceModel(_cached_and_dram_rows(rows), a100, h100)
    # the H100's fraction of its bandwidth on the A100's: 10 us * 3.35 / 2.039 TB/s
    assert moved.op_us(_unary(2 ** 24)) == pytest.approx(
        10.0 * h100.bytes_per_s / a100.bytes_per_s, rel=1e-6)
    # a calibration whose rows stop below 256 MiB gives no floor: the row as measured
    older = DeviceModel(_cached_and_dram_rows([[2 ** 20, 2.0], [2 ** 24, 3.0]]), h100, h100)
    assert older.op_us(_unary(2 ** 24)) == pytest.approx(3.0, rel=0.01)


def test_a_compute_table_has_no_memory_floor() -> None:
    peaks = device_peaks("H100 SXM")
    model = DeviceModel(_calibration([[4096, 4096, 4096, 200.0]]), peaks, peaks)
    table = model.table("gemm", "bf16")
    assert table is not None and table.dram_fraction is None
    unary = model.table("mem_unary", "bf16")
    # its 1e9-byte row: 1e9 / 3.35e12 s = 298.5 us of roof in 500 us
    assert unary is not None and unary.dram_fraction == pytest.approx(
        1e9 / peaks.bytes_per_s * 1e6 / 500.0, rel=1e-9)


def test_rows_at_one_distance_are_taken_in_row_order_whatever_their_last_bits() -> None:
    from moduleprofiler.prediction.device_model import NEIGHBOURS, _Table, interpolate

    # six rows at distance 1 from the query (0, 0), the later ones closer by a few units in
    # the last place (what another CPU's vector logarithms make of a tie): rows 0-3 are taken
    epsilon = 4e-16
    features = np.array([[1.0 - i * epsilon, 0.0] for i in range(6)])
    us = np.array([1.0, 2.0, 4.0, 8.0, 16.0, 32.0])
    table = _Table(features=features, us=us, roof_us=np.ones(6), floor_us=0.0)
    assert NEIGHBOURS == 4
    # equal weights, a roofline ratio of 1: the geometric mean of 1, 2, 4 and 8 us is
    # 2 ** ((0 + 1 + 2 + 3) / 4) = 2 ** 1.5
    assert interpolate(table, np.zeros(2), 1.0) == pytest.approx(2 ** 1.5, rel=1e-9)


def test_a_grouped_product_has_its_rows_and_an_older_calibration_prices_a_layers() -> None:
    peaks = device_peaks("H100 SXM")
    # one expert's shape, 256 x 5632 x 1024, and all 8 experts' work and bytes (the rows,
    # every expert's weight and the output, bf16)
    flops = 2.0 * 8 * 256 * 5632 * 1024
    moved = 2.0 * 8 * (256 * 1024 + 1024 * 5632 + 256 * 5632)
    work = OpWork("aten._grouped_mm", "grouped_gemm",
                  grouped_gemm_features(8, 8 * 256, 5632, 1024, 2), "bf16", flops, moved, "gemm")
    grouped = Calibration("H100 SXM", "test", 132, "x", "today", {"bf16": {
        "grouped_gemm": [[8, 256, 5632, 1024, 48.0]], "gemm_nt": [[256, 5632, 1024, 9.0]]}})
    # the measured grouped shape at distance 0: its own time
    assert DeviceModel(grouped, peaks, peaks).op_us(work) == pytest.approx(48.0, rel=1e-6)
    older = Calibration("H100 SXM", "test", 132, "x", "today", {"bf16": {
        "gemm_nt": [[256, 5632, 1024, 9.0]]}})
    # a layer's product of one expert's rows, 9 us, scaled by us * (roof + floor) /
    # (roof_i + floor), floor 9 us; each roof max(FLOPs / 989.4 TFLOP/s, bytes / bandwidth),
    # the row's an eighth of the FLOPs and the bytes of one expert
    bandwidth = peaks.bytes_per_s / 1e6
    roof = max(flops / 989.4e6, moved / bandwidth)
    roof_i = max(flops / 8 / 989.4e6, 2.0 * (256 * 1024 + 1024 * 5632 + 256 * 5632) / bandwidth)
    expected = 9.0 * (roof + 9.0) / (roof_i + 9.0)
    model = DeviceModel(older, peaks, peaks)
    assert model.op_us(work) == pytest.approx(expected, rel=1e-6)
    assert model.unmeasured == {"grouped_gemm products over several experts"}
