"""How ``input`` becomes a call of the model, and the hint a list input gets when the call
fails (a list is spread into positional arguments, which list-taking models do not expect)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler, ProfilingError
from moduleprofiler.inputs import LIST_HINT, add_note


class TakesList(nn.Module):
    """Like torchvision's detection models: one argument, a list of images."""

    def forward(self, images: list[torch.Tensor]) -> torch.Tensor:
        if not isinstance(images, list):
            raise ValueError("images is expected to be a list")
        return images[0] * 2


class TakesTwo(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b


def test_a_failing_list_input_says_how_lists_are_spread() -> None:
    image = torch.ones(3)
    with pytest.raises(ProfilingError, match=r"images is expected to be a list; hint: input "
                                             r"was a list, so it was spread into 1 positional"):
        ModuleProfiler().profile(TakesList(), [image])
    # the list as one argument: 3 multiplies
    assert ModuleProfiler().profile(TakesList(), ([image],)).total_ops == 3


def test_a_list_of_arguments_still_spreads_and_other_errors_get_no_hint() -> None:
    # a list of two tensors is two arguments: 4 adds
    assert ModuleProfiler().profile(TakesTwo(), [torch.ones(4), torch.ones(4)]).total_ops == 4
    with pytest.raises(ProfilingError) as raised:  # a tuple is spread by intent: no hint
        ModuleProfiler().profile(TakesTwo(), (torch.ones(4),))
    assert "hint" not in str(raised.value)


def test_a_note_is_added_once() -> None:
    error = ValueError("x")
    add_note(error, LIST_HINT.format(count=2))
    add_note(error, LIST_HINT.format(count=2))
    assert error.__notes__ == [LIST_HINT.format(count=2)]
