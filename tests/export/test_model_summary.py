"""``summary``: several profiles, one row per model (:mod:`moduleprofiler.export.model_summary`)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler, Profile
from moduleprofiler.export import summary
from moduleprofiler.export.figures import plot_summary


@pytest.fixture(scope="module")
def linear() -> Profile:
    return ModuleProfiler().profile(nn.Linear(3, 3), torch.randn(2, 3))


@pytest.mark.parametrize("write", [summary, plot_summary])
def test_what_is_no_collection_of_profiles_is_refused_by_name(write, linear: Profile) -> None:
    # one profile iterates over its call records: summary(profile) raised
    # AttributeError: 'CallRecord' object has no attribute 'modules'
    with pytest.raises(TypeError, match=r"got Profile \(one profile: summary\(\[profile\]\)"):
        write(linear)
    with pytest.raises(TypeError, match=r"profiles\['b'\] must be a profile .* got int"):
        write({"a": linear, "b": 3})   # was AttributeError: 'int' has no attribute '_frames'
    with pytest.raises(TypeError, match=r"profiles\[1\] must be a profile .* got NoneType"):
        write([linear, None])
    with pytest.raises(TypeError, match="got str"):
        write("ab")
    with pytest.raises(ValueError, match=r"profiles .* is empty"):
        write({})  # was KeyError: unknown column(s) ['model', ...]; available: []


class _MatrixExp(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.matrix_exp(x)  # an operator without a formula


def test_an_iterator_of_profiles_is_read_once(linear: Profile) -> None:
    partial = ModuleProfiler().profile(nn.Sequential(nn.Linear(3, 3), _MatrixExp()),
                                       torch.randn(3, 3))
    view = summary(profile for profile in [linear, partial])
    # Linear(3, 3) on 2 rows: 2 * 3 * 3 = 18 MACs; on 3 rows 27, and the exponential's unknown
    assert view.df["model"].tolist() == ["Linear", "Sequential"]
    assert view.df["macs"].tolist() == [18, 27]
    # the note naming the partial model was lost: the iterator was read a second time for it
    assert view.notes and view.notes[0].startswith("Sequential: ops, MACs and FLOPs are lower")


def test_plot_summary_reads_an_iterator_of_profiles_once(linear: Profile) -> None:
    partial = ModuleProfiler().profile(nn.Sequential(nn.Linear(3, 3), _MatrixExp()),
                                       torch.randn(3, 3))
    figure = plot_summary(profile for profile in [linear, partial])
    macs = figure.axes[1]  # params, MACs, FLOPs: the partial model's MACs are a lower bound
    assert [label.get_text() for label in macs.get_yticklabels()] == ["Linear", "≥ Sequential"]


class _Named(nn.Sequential):
    def __repr__(self) -> str:  # a custom repr names nothing: the class does
        return "something else"


@pytest.mark.parametrize("wrap", [lambda model: model, torch.compile], ids=["eager", "compiled"])
def test_every_view_names_the_model_by_its_root_class(wrap) -> None:
    from moduleprofiler.export.report import report_context
    profile = ModuleProfiler().profile(wrap(_Named(nn.Linear(3, 3))), torch.randn(2, 3))
    # one rule (the root's class; torch.compile's wrapper is not the model) in every view
    assert profile.summary()["model"].tolist() == ["_Named"]
    assert summary([profile]).df["model"].tolist() == ["_Named"]
    assert profile.tree().title == "_Named module tree"
    assert report_context(profile)["title"] == "_Named profile"
