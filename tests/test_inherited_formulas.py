"""A formula registered for a class fits a subclass only while the subclass keeps its forward;
a subclass that replaces forward is counted by the operators it really runs."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from moduleprofiler import ModuleProfiler
from moduleprofiler.registry import formula_fits


def fcm_flops(model: nn.Module, x: torch.Tensor) -> int:
    with FlopCounterMode(display=False) as counter:
        model(x)
    return int(counter.get_total_flops())


class MaskedConv1d(nn.Conv1d):
    """Pads, convolves, and also convolves a mask; returns a tuple."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        mask = torch.ones_like(x[:, :1])
        y = super().forward(F.pad(x, (2, 0)))
        kernel = torch.ones(1, 1, self.kernel_size[0])
        return y, F.conv1d(F.pad(mask, (2, 0)), kernel)


class GroupedLinear(nn.Linear):
    """Block-diagonal projection: group ``g`` of the input meets rows ``g`` of the weight.

    Input ``(rows, groups, in)``, weight ``(out, in)`` seen as ``groups`` blocks of
    ``out / groups`` outputs; one ``bmm``."""

    def __init__(self, in_features: int, out_features: int, groups: int) -> None:
        super().__init__(in_features, out_features, bias=False)
        self.groups = groups

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight.view(self.groups, -1, self.in_features).transpose(1, 2)
        return torch.bmm(x.transpose(0, 1), weight).transpose(0, 1)


class Conv2dSame(nn.Conv2d):
    """timm-style: pads like TensorFlow's "SAME", then the plain convolution."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.conv2d(F.pad(x, (1, 1, 1, 1)), self.weight, self.bias, self.stride, 0)


def test_conv_subclass_returning_a_tuple_is_counted_by_its_operators() -> None:
    model = MaskedConv1d(4, 6, 3)
    profile = ModuleProfiler().profile(model, torch.randn(2, 4, 10))
    record = profile.records[0]
    assert record.ops_source == "operator" and profile.complete
    # main conv: 2 batches x 6 channels x 10 positions x (4 x 3) = 1440 MACs;
    # mask conv: 2 x 1 x 10 x (1 x 3) = 60 MACs
    assert record.self_macs == 1440 + 60
    assert 2 * profile.total_macs == fcm_flops(model, torch.randn(2, 4, 10))


def test_grouped_linear_subclass_is_not_priced_as_a_dense_linear() -> None:
    model = GroupedLinear(16, 64, groups=8)
    x = torch.randn(5, 8, 16)
    profile = ModuleProfiler().profile(model, x)
    # one bmm: 8 groups x 5 rows x 16 in x 8 out = 5120 MACs; the inherited Linear formula
    # would price 40 rows x 16 x 64 = 40960, eight times the real work
    assert profile.records[0].ops_source == "operator"
    assert profile.total_macs == 8 * 5 * 16 * 8
    assert 2 * profile.total_macs == fcm_flops(model, x)


def test_same_padding_conv_keeps_its_exact_count() -> None:
    model = Conv2dSame(3, 8, 3)
    x = torch.randn(1, 3, 8, 8)
    profile = ModuleProfiler().profile(model, x)
    # 8 channels x 8 x 8 outputs x (3 x 3 x 3) = 13824 MACs, as the plain Conv2d of the same
    # output; the bias adds 512 ops
    assert profile.total_macs == 13824
    # ops: each output is a 27-term dot product (27 multiplies + 26 adds) plus the bias add:
    # 512 outputs x 54 = 27648
    assert profile.total_ops == 512 * 54
    assert 2 * profile.total_macs == fcm_flops(model, x)


def test_formula_fits_its_class_and_torch_subclasses_only() -> None:
    assert formula_fits(nn.Linear, nn.Linear)
    assert formula_fits(nn.modules.linear.NonDynamicallyQuantizableLinear, nn.Linear)
    assert formula_fits(nn.LazyLinear, nn.Linear)
    assert not formula_fits(GroupedLinear, nn.Linear)

    class KeepsForward(nn.Linear):
        """A subclass that adds nothing to the forward keeps the formula."""

    assert formula_fits(KeepsForward, nn.Linear)
    assert ModuleProfiler().profile(KeepsForward(4, 2), torch.randn(1, 4)).records[0]\
        .ops_source == "formula"


def test_an_inherited_formula_that_fails_falls_back_to_operators() -> None:
    def picky_ops(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> int:
        if type(module) is not Picky:
            raise TypeError("only Picky modules")
        return 0

    class Picky(nn.Linear):
        """The class the picky formula is registered for."""

    class Child(Picky):
        """Inherits the picky formula, which refuses it."""

    profiler = ModuleProfiler()
    profiler.ops_fn_map[Picky] = picky_ops
    profile = profiler.profile(Child(4, 3), torch.randn(2, 4))
    record = profile.records[0]
    # counted by its operators instead: addmm of 2 rows x 4 in x 3 out = 24 MACs, and the note
    # says why
    assert (record.ops_source, record.self_macs) == ("operator", 24)
    assert len(profile.formula_fallbacks) == 1
    assert "counted by its operators" in profile.formula_fallbacks[0]
    assert "inherited formula 'picky_ops' raised TypeError" in str(profile)
    # the class the formula was registered for still gets it
    assert profiler.profile(Picky(4, 3), torch.randn(2, 4)).records[0].ops_source == "formula"
