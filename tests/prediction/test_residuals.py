"""The expected error band: held-out residuals of a calibration's tables, and the band every
prediction from it carries (per call, per pass, in the sweep and on the command line)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from moduleprofiler import Profiler
from moduleprofiler.cli import main
from moduleprofiler.efficiency.peaks import device_peaks
from moduleprofiler.prediction import Calibration, HostCosts, shipped_calibrations
from moduleprofiler.prediction.residuals import held_out_residuals
from tests.export.cli_models import tiny

HOST = HostCosts("test cpu", {"view": 1.0, "unary": 4.0, "binary": 4.0, "gemm": 11.0,
                              "module_call": 2.0, "cpu_op": 1.0})
ROOT = Path(__file__).resolve().parents[2]
TINY = f"{ROOT / 'tests/export/cli_models.py'}:tiny"


def _calibration(held_out: dict[str, dict[str, list[float]]] | None = None) -> Calibration:
    return Calibration("H100 SXM", "test", 132, "x", "today",
                       {"bf16": {"gemm": [[64, 64, 64, 3.0]],
                                 "mem_unary": [[1e3, 2.0], [1e9, 500.0]]}}, HOST,
                       held_out=held_out or {})


def test_held_out_residuals_by_hand() -> None:
    residuals = held_out_residuals(_calibration(), device_peaks("H100 SXM"))
    # gemm has one row: nothing to hold out. mem_unary: each row predicted from the other,
    # scaled by (roof + floor) / (roof_other + floor), floor = 2 us (the fastest row), roof =
    # bytes / 3350 GB/s: 1e3 B -> 2.985e-4 us, 1e9 B -> 298.5 us
    assert "gemm" not in residuals["bf16"]
    small, large = 1e3 / 3.35e12 * 1e6, 1e9 / 3.35e12 * 1e6
    ratios = sorted([2.0 / (500.0 * (small + 2.0) / (large + 2.0)),   # 0.601
                     500.0 / (2.0 * (large + 2.0) / (small + 2.0))])  # 1.664
    low, middle, high, rows = residuals["bf16"]["mem_unary"]
    assert rows == 2
    # numpy's linear percentiles of two values: p10 = a + 0.1 (b - a), ...
    assert [low, middle, high] == pytest.approx(
        [ratios[0] + f * (ratios[1] - ratios[0]) for f in (0.1, 0.5, 0.9)], abs=1e-4)
    assert list(np.round([low, high], 3)) == [0.707, 1.558]


def test_a_prediction_carries_its_band() -> None:
    band = {"bf16": {"gemm": [0.5, 1.0, 2.0, 10.0], "mem_unary": [0.9, 1.0, 1.1, 10.0]}}
    profile = Profiler().predict(nn.Linear(64, 64), torch.randn(64, 64),
                                 device=_calibration(band), dtype="bf16")
    # the one GEMM, 3 us, between 0.5 x 3 and 2 x 3 us (the transpose view launches nothing)
    assert profile.predicted_device_ms == pytest.approx(0.003, rel=1e-3)
    assert profile.predicted_device_ms_low == pytest.approx(0.0015, rel=1e-3)
    assert profile.predicted_device_ms_high == pytest.approx(0.006, rel=1e-3)
    row = profile.to_df("module").iloc[0]
    assert row["predicted_device_ms_low"] == pytest.approx(0.0015, rel=1e-3)
    assert row["predicted_device_ms_high"] == pytest.approx(0.006, rel=1e-3)
    assert not any("held-out" in note for note in profile.prediction_notes)


def test_a_calibration_without_residuals_has_no_band() -> None:
    profile = Profiler().predict(nn.Linear(64, 64), torch.randn(64, 64),
                                 device=_calibration(), dtype="bf16")
    assert profile.predicted_device_ms is not None  # the time itself is known
    assert profile.predicted_device_ms_low is None and profile.predicted_device_ms_high is None
    frame = profile.to_df("module")  # a column nobody knows is not shown (never as 0)
    assert "predicted_device_ms_low" not in frame or frame["predicted_device_ms_low"].isna().all()
    assert any("no held-out residuals for gemm" in note for note in profile.prediction_notes)


def test_every_shipped_table_has_its_residuals() -> None:
    for name, calibration in shipped_calibrations().items():
        for dtype, tables in calibration.tables.items():
            held_out = calibration.held_out[dtype]
            assert set(held_out) == {t for t, rows in tables.items() if len(rows) > 1}, name
            for low, middle, high, rows in held_out.values():
                assert 0 < low <= middle <= high and rows >= 2
    # on a shipped card every prediction has a band around it
    profile = Profiler().predict(tiny(), torch.randn(2, 4), "H200", dtype="bf16")
    assert profile.predicted_device_ms_low is not None
    assert profile.predicted_device_ms_high is not None
    assert profile.predicted_device_ms_low < profile.predicted_device_ms \
        < profile.predicted_device_ms_high


def test_the_band_in_the_sweep_json_and_command_line(capsys: pytest.CaptureFixture[str],
                                                     tmp_path: Path) -> None:
    band = {"bf16": {"gemm": [0.5, 1.0, 2.0, 10.0]}}
    sweep = Profiler().sweep(nn.Linear(64, 64), torch.randn(2, 64), _calibration(band), 64,
                             "bf16")
    row = sweep.frame.iloc[0]
    assert (row["predicted_device_ms_low"], row["predicted_device_ms_high"]) == pytest.approx(
        (0.0015, 0.006), rel=1e-3)
    python = Profiler().predict(tiny(), torch.randn(2, 4), "H100 SXM")
    assert main([TINY, "-i", "2x4", "--predict", "H100 SXM", "--width", "0"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"expected device time {python.predicted_device_ms_low:.3f} to " \
           f"{python.predicted_device_ms_high:.3f} ms" in out
    assert "predicted device low" in out and "predicted device high" in out
    assert main([TINY, "-i", "2x4", "--predict", "H100 SXM", "-o", str(tmp_path / "p.json")]) == 0
    saved = json.loads((tmp_path / "p.json").read_text())
    assert "self_predicted_device_ms_low" in saved["records"][0]["metrics"]


def test_held_out_rows_are_priced_with_the_memory_floor() -> None:
    # two rows from memory (>= 256 MiB): 2^28 bytes in 100 us, 2^29 bytes in 400 us
    calibration = Calibration("H100 SXM", "test", 132, "x", "today",
                              {"bf16": {"mem_unary": [[2 ** 28, 100.0], [2 ** 29, 400.0]]}})
    residuals = held_out_residuals(calibration, device_peaks("H100 SXM"))
    roof_small, roof_large = 2 ** 28 / 3.35e12 * 1e6, 2 ** 29 / 3.35e12 * 1e6  # 80.1, 160.3
    # the large row from the small one: the neighbour's scaling gives 100 * (160.3 + 100) /
    # (80.1 + 100) = 144.5 us, but the small row moves 2^28 bytes in 100 us from memory, so
    # 2^29 bytes take at least 200 us: measured / predicted = 400 / 200 = 2.0 (2.77 unfloored)
    large = 400.0 / 200.0
    # the small row from the large one: 400 * (80.1 + 100) / (160.3 + 100) = 276.8 us; the
    # large row's floor, 80.1 / (160.3 / 400) = 200 us, does not bind
    small = 100.0 / (400.0 * (roof_small + 100.0) / (roof_large + 100.0))
    assert round(small, 4) == 0.3612
    low, middle, high, rows = residuals["bf16"]["mem_unary"]
    assert rows == 2
    assert [low, middle, high] == pytest.approx(
        [small + f * (large - small) for f in (0.1, 0.5, 0.9)], abs=1e-4)
