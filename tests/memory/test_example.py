"""examples/memory_planning.py runs (fast mode) and finds a batch size."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "memory_planning.py"


def test_memory_planning_example_fast(monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", [str(EXAMPLE), "--fast"])
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    out = capsys.readouterr().out
    assert "training peak" in out
    assert "largest batch of 32 tokens within 0.05 GiB:" in out
    assert int(out.rsplit(":", 1)[1]) > 1
