"""The records' own definitions (:mod:`moduleprofiler.records`)."""

from __future__ import annotations

import torch
from torch import nn

from moduleprofiler import ModuleProfiler
from moduleprofiler.records import module_statuses
from moduleprofiler.timing import time_modules


class _Stack(nn.Module):
    """GPT-2's shape: a ``ModuleList`` whose blocks the parent calls one by one, and a module
    that never runs."""

    def __init__(self) -> None:
        super().__init__()
        self.h = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])
        self.unused = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.h:
            x = block(x)
        return x


def test_module_statuses_one_definition() -> None:
    statuses = module_statuses(["", "h", "h.0", "h.1", "unused", "script.sub"],
                               called={"", "h.0"}, unhooked={"script.sub"})
    assert statuses == {"": "called", "h": "grouping", "h.0": "called", "h.1": "uncalled",
                        "unused": "uncalled", "script.sub": "unhooked"}


def test_a_grouping_whose_children_ran_is_not_uncalled_anywhere() -> None:
    model = _Stack()
    x = torch.randn(2, 4)
    profile = ModuleProfiler().profile(model, x)
    # profile.uncalled listed "h" while the tree and to_dict() left it out
    assert profile.uncalled == ("unused",) and profile.groupings == ("h",)
    assert profile.to_dict()["uncalled"] == ["unused"]
    assert profile.to_dict()["groupings"] == ["h"]
    tree = profile.tree().to_text(width=0)
    assert tree is not None
    assert "h (ModuleList) [not called]" not in tree and "unused (ReLU) [not called]" in tree

    timing = time_modules(model, x, num_iters=3, drop_first=0, warmup_seconds=0,
                          measure_overhead=False)
    assert timing.uncalled == ("unused",)  # listed "h" too
    assert timing.to_dict()["uncalled"] == ["unused"]
    summary = timing.report()
    assert "h (ModuleList) [not called]" not in summary  # the timing tree said so
    assert "|-- h (ModuleList)" in summary and "`-- unused (ReLU) [not called]" in summary


def test_a_model_whose_root_only_groups_its_children() -> None:
    blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(2)])

    def run(x: torch.Tensor) -> torch.Tensor:
        return blocks[1](blocks[0](x))

    profile = ModuleProfiler().profile(blocks, torch.randn(2, 4), pred_fn=run)
    assert profile.uncalled == () and profile.groupings == ("",)  # was uncalled == ("",)
