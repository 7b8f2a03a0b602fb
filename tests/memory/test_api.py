"""The public surface of moduleprofiler.memory: an exact ``__all__``."""

from __future__ import annotations

import moduleprofiler.memory as memory


def test_all_is_exact() -> None:
    assert sorted(memory.__all__) == [
        "CallMemory", "LiveBytesListener", "MemoryReport", "PassMemory", "PeakCall",
        "SavedTensorsListener", "measure_memory",
        "memory_by_dtype", "model_summary", "module_bytes", "parameter_memory",
        "state_dict_bytes",
    ]
    for name in memory.__all__:
        assert getattr(memory, name).__doc__


def test_report_views() -> None:
    import torch
    from torch import nn

    report = memory.measure_memory(nn.Linear(2, 3), torch.randn(4, 2), train=True)
    totals = report.totals()
    assert totals["param_bytes"] == (2 * 3 + 3) * 4
    assert totals["training_peak_bytes"] == report.peak_bytes
    assert "training peak" in str(report)
    assert report.to_dict()["training"]["kind"] == "training"
    frame = report.to_df()
    assert list(frame.columns[:6]) == ["call", "parent", "depth", "module", "type", "call_number"]
