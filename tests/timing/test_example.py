"""The documented example runs (fast mode) and prints what the docs say it prints."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest
import torch

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "training_timing.py"


def test_training_timing_example_runs(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("MODULEPROFILER_FAST", "1")
    threads = torch.get_num_threads()
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    out = capsys.readouterr().out
    assert "latency: median" in out and "95% CI" in out
    assert "__root__ (Sequential)" in out and "coverage" in out
    assert "time median" in out and "backward time median" in out and "8 (Linear)" in out
    assert torch.get_num_threads() == threads
