"""``Profile.with_memory``: every pass's columns, each header naming its pass."""

from __future__ import annotations

import torch
from torch import nn

from moduleprofiler import ModuleProfiler
from moduleprofiler.memory import measure_memory


def _tiny() -> nn.Sequential:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def test_with_memory_shows_the_training_pass_and_labels_each_pass() -> None:
    model, x = _tiny(), torch.randn(2, 4)
    memory = measure_memory(model, x, train=True)
    profile = ModuleProfiler().profile(model, x).with_memory(memory)
    # Inference: parameters (4*8 + 8 + 8*2 + 2) * 4 = 232 B and x 2*4*4 = 32 B are live (264);
    # the first Linear adds 2*8*4 = 64 (328), the ReLU another 64 (392), its peak.
    assert [r.metrics["max_live_bytes"] for r in profile.records] == [392, 328, 392, 344]
    # The training pass's columns are there too, equal to the report's, call by call.
    for record, call in zip(profile.records, memory.records):
        for name in ("train_max_live_bytes", "backward_max_live_bytes"):
            assert record.metrics[name] == call.metrics[name]
    # The training peak (in the first Linear's backward) is the largest training value of
    # any row, above every inference value.
    backward = [r.metrics["backward_max_live_bytes"] for r in profile.records]
    assert memory.training is not None and memory.training.peak_call is not None
    peak = memory.training.peak_bytes
    assert max(b for b in backward if b) == peak > 392
    frame = profile.to_df("module").set_index("module")
    assert frame.loc[memory.training.peak_call.path, "backward_max_live_bytes"] == peak
    header = profile.tree(["max_live_bytes", "train_max_live_bytes",
                           "backward_max_live_bytes"]).to_text(width=0).splitlines()[0]
    assert "fwd max live" in header and "train fwd max live" in header
    assert "train bwd max live" in header


def test_with_memory_of_an_inference_report_adds_no_training_columns() -> None:
    model, x = _tiny(), torch.randn(2, 4)
    profile = ModuleProfiler().profile(model, x).with_memory(measure_memory(model, x))
    assert "train_max_live_bytes" not in profile.records[0].metrics
    assert profile.records[0].metrics["max_live_bytes"] == 392  # as above
