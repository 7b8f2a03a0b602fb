"""The note that host costs come after kernel-record sessions of this process."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from moduleprofiler.timing import device_trace as trace_module
from moduleprofiler.timing.device_trace import (
    KernelClockUnavailable,
    after_sessions_notes,
    sessions_entered,
)


def test_no_note_before_any_session(monkeypatch: Any) -> None:
    monkeypatch.setattr(trace_module, "_sessions", 0)
    assert after_sessions_notes("the host costs") == []


def test_the_note_counts_the_sessions(monkeypatch: Any) -> None:
    monkeypatch.setattr(trace_module, "_sessions", 1)
    (one,) = after_sessions_notes("the host costs")
    assert one.startswith("the host costs measured after 1 kernel-record session in this "
                          "process: CUPTI stays attached")
    monkeypatch.setattr(trace_module, "_sessions", 3)
    (three,) = after_sessions_notes("the host costs")
    assert three.startswith("the host costs measured after 3 kernel-record sessions in")


def test_a_refused_session_is_not_counted() -> None:
    before = sessions_entered()
    with pytest.raises(KernelClockUnavailable), trace_module.device_trace(torch.device("cpu")):
        pass
    assert sessions_entered() == before
