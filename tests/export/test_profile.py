"""``Profile``'s own methods (:mod:`moduleprofiler.export.profile`)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler


def test_with_metrics_reads_the_root_as_every_output_names_it() -> None:
    profile = ModuleProfiler().profile(nn.Sequential(nn.Linear(3, 3)), torch.randn(2, 3))
    # "__root__" was kept as a path of no module: its value showed nowhere, without a word
    attached = profile.with_metrics({"__root__": {"my_count": 7}, "0": {"my_count": 2}})
    assert attached.to_df("module")["my_count"].tolist() == [7, 2]
    assert attached.module_metrics == {"": {"my_count": 7}, "0": {"my_count": 2}}


def test_with_metrics_refuses_a_path_of_no_module() -> None:
    profile = ModuleProfiler().profile(nn.Sequential(nn.Linear(3, 3)), torch.randn(2, 3))
    with pytest.raises(KeyError, match="no module 'o' in this profile"):
        profile.with_metrics({"o": {"my_count": 1}})  # a typo: dropped without a word
    with pytest.raises(TypeError, match=r"path must be a module path string .* got int 0"):
        profile.with_metrics({0: {"my_count": 1}})  # type: ignore[dict-item]
