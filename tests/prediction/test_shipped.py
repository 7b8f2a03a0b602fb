"""The shipped calibrations: "H200" is predicted from its own measured tables, not from the
H100's achieved fractions on the H200's datasheet peaks."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler
from moduleprofiler.efficiency.peaks import device_peaks
from moduleprofiler.prediction import shipped_calibrations
from moduleprofiler.prediction.predict import DeviceSpec, resolve_device

# a TF32 GEMM both shipped calibrations measured: (64 x 16384) @ (16384 x 8192), fp32
ROWS, INNER, OUT = 64, 16384, 8192
H200_US = 171.103  # the H200 calibration's row [64, 8192, 16384]
H100_US = 214.849  # the H100 SXM calibration's row [64, 8192, 16384]


class _MatMul(nn.Module):
    """``x @ w`` with ``w`` row-major: the ``gemm`` table (``nn.Linear``'s ``x @ w.T`` has
    its own, ``gemm_nt``)."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(INNER, OUT))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight


def _gemm_us(device: DeviceSpec) -> tuple[float, tuple[str, ...]]:
    with torch.device("meta"):  # 512 MiB of weight: never allocated
        model = _MatMul()
    profile = ModuleProfiler().predict(model, torch.empty(ROWS, INNER, device="meta"),
                                       device=device, dtype="fp32", tf32=True)
    assert profile.predicted_device_ms is not None
    return profile.predicted_device_ms * 1e3, profile.prediction_notes


def test_h200_resolves_to_its_shipped_measured_calibration() -> None:
    shipped = shipped_calibrations()
    assert {"H100 SXM", "H200"} <= set(shipped)
    assert shipped["H200"].device_name == "NVIDIA H200"
    for name in ("H200", "NVIDIA H200"):  # the table name and the name CUDA reports
        model, notes = resolve_device(name)
        assert model.calibration is shipped["H200"]
        assert not model.transferred and notes == []


def test_h200_predicts_its_own_measurement_not_the_borrowed_one() -> None:
    measured, notes = _gemm_us("H200")
    # the shape is a calibration row: its own time (weight 1000 against < 1 for the others)
    assert measured == pytest.approx(H200_US, rel=0.01)
    assert not any("datasheet peaks only" in note for note in notes)
    assert _gemm_us("H100 SXM")[0] == pytest.approx(H100_US, rel=0.01)
    # the same peaks under another name: the H100's tables on the H200's roofline. The GEMM
    # is memory-bound: 4 * (64 * 16384 + 16384 * 8192 + 64 * 8192) = 543,162,368 bytes,
    # 162.14 us at 3350 GB/s, 113.16 us at 4800 GB/s -> 214.849 * 113.16 / 162.14 = 149.9 us
    borrowed, notes = _gemm_us(dataclasses.replace(device_peaks("H200"), name="H200 sheet"))
    assert borrowed == pytest.approx(214.849 * 113.16 / 162.14, rel=0.01)
    assert any("datasheet peaks only" in note for note in notes)
    assert borrowed < 0.9 * measured  # the measured H200 is 12 % slower than the sheet says


def test_a_linear_layer_is_priced_from_the_h200s_own_linear_table() -> None:
    # nn.Linear(8192, 8192) on 64 rows, fp32: x @ w.T, the H200's gemm_nt row
    # [64, 8192, 8192, 72.575] (its gemm row for x @ w is 76.256 us)
    with torch.device("meta"):
        model = nn.Linear(8192, 8192, bias=False)
    profile = ModuleProfiler().predict(model, torch.empty(64, 8192, device="meta"),
                                       device="H200", dtype="fp32", tf32=True)
    assert profile.predicted_device_ms is not None
    assert profile.predicted_device_ms * 1e3 == pytest.approx(72.575, rel=0.01)


def test_the_h100_borrows_the_tables_its_calibration_lacks_from_the_h200() -> None:
    # the H100 calibration has no gemm_nt table: the H200's row [64, 8192, 8192, 72.575] on
    # the H100's peaks. Memory-bound: 4 * (64 * 8192 + 8192 * 8192 + 64 * 8192) = 272,629,760
    # bytes, 81.38 us at 3350 GB/s, 56.80 us at 4800 GB/s; with the table's floor (its
    # fastest row, 2.176 us): 72.575 * (81.38 + 2.176) / (56.80 + 2.176) = 102.82 us
    with torch.device("meta"):
        model = nn.Linear(8192, 8192, bias=False)
    profile = ModuleProfiler().predict(model, torch.empty(64, 8192, device="meta"),
                                       device="H100 SXM", dtype="fp32", tf32=True)
    assert profile.predicted_device_ms is not None
    assert profile.predicted_device_ms * 1e3 == pytest.approx(102.82, rel=0.005)
    assert any("no gemm_nt tables" in note and "H200" in note
               for note in profile.prediction_notes)
