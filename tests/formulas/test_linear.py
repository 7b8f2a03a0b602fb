"""Linear, Bilinear and Identity formulas against hand arithmetic and FlopCounterMode."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn.modules.linear import NonDynamicallyQuantizableLinear
from torch.utils.flop_counter import FlopCounterMode

from tests.conftest import fcm_flops, macs_of, ops_of, profile_of

# -- Linear ------------------------------------------------------------------------------------

def test_linear_ops_3d_input() -> None:
    # rows = 2*3 = 6; per row 7*(2*5-1) + 7 = 70; total 420 (0.0.4: 2*rows*out*in = 2*6*7*5 = 420)
    assert ops_of(nn.Linear(5, 7), torch.randn(2, 3, 5)) == 420


def test_linear_ops_no_bias() -> None:
    # rows = 6; per row 7*(2*5-1) = 63; total 378 (0.0.4: rows*out*(2*in-1) = 6*7*9 = 378)
    assert ops_of(nn.Linear(5, 7, bias=False), torch.randn(2, 3, 5)) == 378


def test_linear_ops_1d_input_is_one_row() -> None:
    # rows = 1; 3*(2*4-1) + 3 = 24
    assert ops_of(nn.Linear(4, 3), torch.randn(4)) == 24


def test_linear_macs() -> None:
    # rows*in*out = 6*5*7 = 210 (bias excluded)
    assert macs_of(nn.Linear(5, 7), torch.randn(2, 3, 5)) == 210


def test_linear_input_as_keyword() -> None:
    # linear(input=x): the formula still sees x; rows = 4; 4*(3*(2*2-1) + 3) = 48
    from moduleprofiler import ModuleProfiler

    profile = ModuleProfiler().profile(nn.Linear(2, 3), {"input": torch.randn(4, 2)})
    assert profile.records[0].self_ops == 48


@pytest.mark.parametrize(
    ("module", "shape"),
    [
        (nn.Linear(5, 7), (2, 3, 5)),
        (nn.Linear(5, 7, bias=False), (4, 5)),
        (nn.Linear(4, 3), (4,)),
        (nn.Linear(6, 2), (2, 2, 3, 6)),
    ],
)
def test_linear_macs_match_flop_counter(module: nn.Linear, shape: tuple[int, ...]) -> None:
    x = torch.randn(*shape)
    assert 2 * macs_of(module, x) == fcm_flops(module, x)


def test_linear_subclass_resolves_through_mro() -> None:
    # MultiheadAttention's out_proj class; same numbers as nn.Linear(5, 7): 420 ops, 210 macs
    module = NonDynamicallyQuantizableLinear(5, 7)
    x = torch.randn(2, 3, 5)
    assert ops_of(module, x) == 420
    assert macs_of(module, x) == 210


def test_lazy_linear_after_materialisation() -> None:
    module = nn.LazyLinear(7)
    module(torch.randn(1, 5))  # materialise: in_features = 5, the class becomes nn.Linear
    # rows = 6; 6*(7*(2*5-1) + 7) = 420
    assert ops_of(module, torch.randn(2, 3, 5)) == 420


# -- Bilinear ----------------------------------------------------------------------------------

def test_bilinear_ops() -> None:
    # rows = 2; per output: in2 dots of length in1 = 4*(2*3-1) = 20, one of length in2 = 2*4-1 = 7,
    # bias 1 -> 28; total 2*5*28 = 280
    assert ops_of(nn.Bilinear(3, 4, 5), torch.randn(2, 3), torch.randn(2, 4)) == 280


def test_bilinear_ops_no_bias_and_leading_dims() -> None:
    # rows = 2*3 = 6; per output 20 + 7 = 27; total 6*5*27 = 810
    module = nn.Bilinear(3, 4, 5, bias=False)
    assert ops_of(module, torch.randn(2, 3, 3), torch.randn(2, 3, 4)) == 810


def test_bilinear_unbatched() -> None:
    # rows = 1; 5*28 = 140 ops; 5*(3*4 + 4) = 80 macs
    module = nn.Bilinear(3, 4, 5)
    x1, x2 = torch.randn(3), torch.randn(4)
    assert ops_of(module, x1, x2) == 140
    assert macs_of(module, x1, x2) == 80


def test_bilinear_macs() -> None:
    # rows*out*(in1*in2 + in2) = 2*5*(12 + 4) = 160
    assert macs_of(nn.Bilinear(3, 4, 5), torch.randn(2, 3), torch.randn(2, 4)) == 160


@pytest.mark.parametrize(("in1", "in2", "out", "rows"), [(3, 4, 5, 2), (6, 2, 3, 4), (1, 7, 2, 3)])
def test_bilinear_macs_match_flop_counter_on_decomposed_path(
    in1: int, in2: int, out: int, rows: int
) -> None:
    # FlopCounterMode is blind to aten._trilinear (it counts 0 for nn.Bilinear), so it counts the
    # same computation spelled out as ATen's _trilinear does it: for each output k,
    # (x1 @ A_k) -> (rows, in2), then a batched dot with x2.
    module = nn.Bilinear(in1, in2, out, bias=False)
    x1, x2 = torch.randn(rows, in1), torch.randn(rows, in2)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        columns = []
        for k in range(out):
            left = torch.bmm(x1.unsqueeze(0), module.weight[k].unsqueeze(0)).squeeze(0)
            columns.append(torch.bmm(left.unsqueeze(1), x2.unsqueeze(2)).reshape(rows))
        decomposed = torch.stack(columns, dim=1)
    torch.testing.assert_close(decomposed, module(x1, x2).detach())
    assert 2 * macs_of(module, x1, x2) == counter.get_total_flops()


# -- Identity ----------------------------------------------------------------------------------

def test_identity_is_free() -> None:
    x = torch.randn(3, 4)
    assert ops_of(nn.Identity(), x) == 0
    assert macs_of(nn.Identity(), x) == 0


def test_linear_with_no_input_features_costs_only_its_bias() -> None:
    # an empty dot product costs 0; the bias add is 1 per output: 3 rows x 4 outputs = 12
    layer, x = nn.Linear(0, 4), torch.randn(3, 0)
    assert (ops_of(layer, x), macs_of(layer, x)) == (12, 0)


# -- feature sizes from the call's tensors -----------------------------------------------------

class _FirstHalfRows(nn.Module):
    """A parametrization that keeps the first half of the weight's rows (changes its shape)."""

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return weight[: weight.shape[0] // 2]


def test_linear_counts_the_weight_an_unsafe_parametrization_made() -> None:
    from torch.nn.utils import parametrize

    module = nn.Linear(10, 4, bias=False)
    parametrize.register_parametrization(module, "weight", _FirstHalfRows(), unsafe=True)
    x = torch.randn(5, 10)
    # the call multiplies by a (2, 10) weight while out_features still says 4:
    # rows 5, out 2, in 10: 5 * 2 * (2 * 10 - 1) = 190 ops, 5 * 2 * 10 = 100 MACs
    # (out_features gave 5 * 4 * 19 = 380 and 200)
    assert ops_of(module, x) == 190
    assert macs_of(module, x) == 100
    # the oracle runs with grad on: its module tracker fails on a parametrized module under
    # no_grad
    with FlopCounterMode(display=False) as counter:
        module(x)
    assert counter.get_total_flops() == 2 * 100


def test_linear_counts_a_replaced_weight() -> None:
    module = nn.Linear(6, 3)
    module.weight = nn.Parameter(torch.randn(3, 4))  # in_features still says 6
    x = torch.randn(2, 4)
    # rows 2, out 3, in 4: 2 * 3 * (2 * 4 - 1 + 1 bias) = 48 (in_features gave 2 * 3 * 12 = 72)
    assert ops_of(module, x) == 48
    assert 2 * macs_of(module, x) == fcm_flops(module, x) == 48  # 2 * 2 * 3 * 4


class _Doubled(nn.Module):
    def forward(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor * 2


def test_parametrized_bias_is_not_computed_again_by_the_formula() -> None:
    from torch.nn.utils import parametrize

    module = nn.Linear(10, 4)
    parametrize.register_parametrization(module, "bias", _Doubled())
    profile = profile_of(module, torch.randn(5, 10))
    # the layer 5 * 4 * (2 * 10 - 1 + 1) = 400, the parametrization's bias * 2 once: 4 multiplies;
    # total 404 (reading module.bias after the forward ran the parametrization again: 408)
    assert [r.path for r in profile.records].count("parametrizations.bias.0") == 1
    assert profile.records[0].ops == 404


def test_bilinear_counts_replaced_weights() -> None:
    module = nn.Bilinear(3, 4, 5)
    module.weight = nn.Parameter(torch.randn(2, 6, 7))  # in1, in2, out still say 3, 4, 5
    module.bias = nn.Parameter(torch.randn(2))
    x1, x2 = torch.randn(4, 6), torch.randn(4, 7)
    # rows 4, out 2, in1 6, in2 7: per output 7 * (2 * 6 - 1) + (2 * 7 - 1) + 1 = 91;
    # 4 * 2 * 91 = 728 ops; MACs 4 * 2 * (6 * 7 + 7) = 392
    assert ops_of(module, x1, x2) == 728
    assert macs_of(module, x1, x2) == 392
