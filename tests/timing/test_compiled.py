"""Timing a torch.compile'd model: what is timed is said, never a silent distortion."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from moduleprofiler.codepaths import CodePathWarning
from moduleprofiler.timing import time_modules

FAST = {"num_iters": 4, "drop_first": 1, "warmup_seconds": 0.0, "progress": False,
        "measure_overhead": False}


def test_a_compiled_wrapper_is_timed_as_its_eager_original_and_says_so():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    # torch.compile compiles lazily, on the first call: wrapping costs nothing here, and the
    # timing never calls the compiled graph
    compiled = torch.compile(model)
    with pytest.warns(CodePathWarning, match="original module run eagerly"):
        timing = time_modules(compiled, torch.randn(2, 4), **FAST)
    # the eager original's tree: its paths, not the wrapper's "_orig_mod." ones
    assert tuple(info.path for info in timing.modules) == ("", "0", "1")
    assert any("torch.compile" in note for note in timing.warnings)
    assert not compiled._forward_hooks and not model[0]._forward_hooks


def test_a_module_compiled_in_place_is_refused_naming_it():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    model[0].compile()
    with pytest.raises(ValueError, match="'0' was compiled in place"):
        time_modules(model, torch.randn(2, 4), **FAST)
