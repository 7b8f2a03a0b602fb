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


def test_report_is_a_profile_and_calls_is_the_profiles() -> None:
    import torch
    from torch import nn

    from moduleprofiler import Profile

    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
    report = memory.measure_memory(model, torch.randn(3, 4), train=True)
    assert isinstance(report, Profile)
    # calls(path), as on every profile: the ReLU's one record, which saves its 3 x 8 float32
    # output for backward, 3 * 8 * 4 = 96 bytes
    (relu,) = report.calls("1")
    assert relu.metrics["self_saved_bytes"] == 96
    # report.calls is that method on a memory report too (no tuple of CallMemory any more)
    assert type(report).calls is Profile.calls
    assert "training peak" in report.notes()[2] and "training peak" in str(report)


def test_a_peak_is_said_in_one_wording_by_the_report_and_the_command_line() -> None:
    import torch
    from torch import nn

    from moduleprofiler.cli import memory_notes

    report = memory.measure_memory(nn.Sequential(nn.Linear(2, 3), nn.ReLU()),
                                   torch.randn(4, 2), train=True)
    assert report.training is not None
    # inference: parameters (2 * 3 + 3) * 4 = 36 B and the input 4 * 2 * 4 = 32 B, then the
    # two 4 x 3 float outputs of 48 B each: peak 68 + 96 = 164 B, +96 B above them
    inference = ("inference peak 164 B (+96 B above the parameters and inputs) at 1 (ReLU), "
                 "call 1 of 1, forward")
    assert inference in report.notes()
    assert memory_notes(report)[1] == inference + " [columns: fwd max live]"
    training = memory_notes(report)[0]
    assert training.startswith("training peak ")
    assert training.removesuffix(" [columns: saved, train fwd/bwd max live]") in report.notes()
