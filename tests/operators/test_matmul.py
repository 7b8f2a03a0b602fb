"""Matrix products and convolutions: hand arithmetic, FlopCounterMode, module formulas, meta."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from tests.conftest import macs_of, ops_of
from tests.operators.helpers import count, counter_of, fcm_flops, formula_count, on_meta

aten = torch.ops.aten


# -- 2-D and batched products ------------------------------------------------------------------

def test_mm() -> None:
    # 2*4 = 8 outputs, k = 3: ops 8*(2*3 - 1) = 40, macs 8*3 = 24
    a, b = torch.randn(2, 3), torch.randn(3, 4)
    assert count(torch.mm, a, b) == (40, 24)
    assert fcm_flops(torch.mm, a, b) == 2 * 24


def _adjacency() -> torch.Tensor:
    """A 3 x 3 sparse matrix with 4 stored entries: row 0 holds one (column 1), row 1 one
    (column 0), row 2 two (columns 2 and 1); every row and every column holds one."""
    indices = torch.tensor([[0, 1, 2, 2], [1, 0, 2, 1]])
    return torch.sparse_coo_tensor(indices, torch.ones(4), (3, 3), check_invariants=True)


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr, torch.sparse_csc])
def test_a_sparse_matrix_product_counts_its_stored_entries(layout: torch.layout) -> None:
    adjacency = _adjacency().coalesce() if layout is torch.sparse_coo \
        else _adjacency().to_sparse(layout=layout)
    h = torch.randn(3, 4)
    # sparse (3, 3) @ dense (3, 4): 4 entries x 4 columns = 16 macs (multiplies); row 2 sums
    # two products, 1 add x 4 columns: ops (2 * 4 - 3 rows) * 4 = 20 (dense: 12 * 5 = 60)
    assert count(torch.mm, adjacency, h) == (20, 16)
    assert count(torch.sparse.mm, adjacency, h) == (20, 16)  # aten._sparse_addmm, beta 0
    # dense (4, 3) @ sparse (3, 3): by columns, column 1 sums two products:
    # 4 rows x 4 entries = 16 macs, ops 4 x (2 * 4 - 3 columns) = 20
    assert count(torch.mm, h.t(), adjacency) == (20, 16)
    # addmm adds the 3 x 4 = 12 outputs of self
    assert count(torch.addmm, torch.ones(3, 4), adjacency, h) == (20 + 12, 16)
    # times a vector: one column, 4 macs, 2 * 4 - 3 = 5 ops (dense: 3 * 5 = 15 and 9)
    assert count(torch.mv, adjacency, torch.randn(3)) == (5, 4)


def test_the_sparse_products_of_other_names_count_the_same_entries() -> None:
    adjacency, h = _adjacency().coalesce(), torch.randn(3, 4)
    # hspmm: the same product as sparse @ dense (a hybrid sparse result): 20 ops, 16 macs
    assert count(torch.hspmm, adjacency, h) == (20, 16)
    # sspaddmm: beta * self + alpha * (adjacency @ h), sparse, its result storing self's 1
    # value and the product's 3 rows x 4 columns side by side (no adds): the product's 20 ops;
    # beta = 2 multiplies self's 1 value (+1), alpha = 3 the product's 12 values (+12)
    bias = torch.sparse_coo_tensor(torch.tensor([[0], [1]]), torch.ones(1), (3, 4))
    assert count(torch.sspaddmm, bias, adjacency, h) == (20, 16)
    assert count(lambda *a: torch.sspaddmm(*a, beta=2), bias, adjacency, h) == (21, 16)
    assert count(lambda *a: torch.sspaddmm(*a, alpha=3), bias, adjacency, h) == (32, 16)


def test_an_uncoalesced_sparse_matrix_sums_every_stored_entry() -> None:
    # entry (2, 2) stored twice: 5 stored entries in 3 rows: macs 5 x 2 = 10,
    # ops (2 * 5 - 3) * 2 = 14
    indices = torch.tensor([[0, 1, 2, 2, 2], [1, 0, 2, 1, 2]])
    adjacency = torch.sparse_coo_tensor(indices, torch.ones(5), (3, 3), check_invariants=True)
    assert count(torch.mm, adjacency, torch.randn(3, 2)) == (14, 10)


class _GraphLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(2, 4)

    def forward(self, adjacency: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.sparse.mm(adjacency, self.fc(x))


def test_a_graph_layer_s_adjacency_product_forward_and_backward() -> None:
    from moduleprofiler import Profiler

    profile = Profiler().profile(_GraphLayer(), (_adjacency().coalesce(), torch.randn(3, 2)),
                                 backward=True)
    # forward: the layer's own sparse product (3, 3) @ (3, 4), 20 ops and 16 macs as above
    assert (profile.records[0].self_ops, profile.records[0].self_macs) == (20, 16)
    assert profile.complete
    # backward: the gradient of fc's output is adjacencyᵀ @ grad, the transposed matrix's 4
    # entries in its 3 rows: 20 ops, 16 macs (a dense count would be 60 and 36)
    assert (profile.records[0].self_backward_ops, profile.records[0].self_backward_macs) == (
        20, 16)


def test_a_product_of_two_sparse_matrices_is_unknown_not_dense() -> None:
    adjacency = _adjacency().coalesce()
    counter = counter_of(torch.mm, adjacency, adjacency)
    assert dict(counter.missing) == {"aten.mm": 1}
    batched = counter_of(torch.bmm, torch.stack([adjacency, adjacency]), torch.randn(2, 3, 2))
    assert dict(batched.missing) == {"aten.bmm": 1}


def test_linear_with_bias_is_nn_linear() -> None:
    # rows = 2*3 = 6; 6*7*(2*5 - 1) + 6*7 bias = 378 + 42 = 420 ops; macs 6*5*7 = 210
    layer, x = nn.Linear(5, 7), torch.randn(2, 3, 5)
    assert count(layer, x) == (420, 210)
    assert (ops_of(layer, x), macs_of(layer, x)) == (420, 210)
    assert fcm_flops(layer, x) == 2 * 210


def test_linear_without_bias_is_mm() -> None:
    # 4*3 outputs * (2*5 - 1) = 108; macs 4*5*3 = 60
    layer, x = nn.Linear(5, 3, bias=False), torch.randn(4, 5)
    assert count(layer, x) == (108, 60)
    assert ops_of(layer, x) == 108


@pytest.mark.parametrize(
    ("beta", "alpha", "expected_ops"),
    [
        (1, 1, 48),  # 40 + 8 bias adds
        (2, 3, 64),  # 40 + 8 adds + 8 (beta *) + 8 (alpha *)
        (0, 1, 40),  # beta = 0: the bias is ignored
    ],
)
def test_addmm_beta_alpha(beta: float, alpha: float, expected_ops: int) -> None:
    bias, a, b = torch.randn(4), torch.randn(2, 3), torch.randn(3, 4)
    assert count(torch.addmm, bias, a, b, beta=beta, alpha=alpha) == (expected_ops, 24)


def test_bmm_and_baddbmm() -> None:
    # 2*3*5 = 30 outputs, k = 4: ops 30*7 = 210, macs 120; baddbmm adds 30
    a, b, c = torch.randn(2, 3, 4), torch.randn(2, 4, 5), torch.randn(2, 3, 5)
    assert count(torch.bmm, a, b) == (210, 120)
    assert count(torch.baddbmm, c, a, b) == (240, 120)
    assert fcm_flops(torch.bmm, a, b) == fcm_flops(torch.baddbmm, c, a, b) == 2 * 120


@pytest.mark.parametrize(
    ("a_shape", "b_shape", "expected", "fcm_sees_it"),
    [
        ((4,), (4,), (7, 4), False),  # dot: 2*4 - 1; FlopCounterMode has no formula for dot
        ((3, 4), (4,), (21, 12), False),  # mv: 3*(2*4 - 1); FlopCounterMode is blind to mv
        ((4,), (4, 5), (35, 20), True),  # (1, 4) @ (4, 5): 5*7
        ((2, 3, 4), (4, 5), (210, 120), True),  # folded into one mm: 30 outputs * 7
        ((3, 4), (2, 4, 5), (210, 120), True),  # broadcast to bmm: 30 outputs * 7
        ((2, 1, 3, 4), (5, 4, 6), (1260, 720), True),  # batch (2, 5): 2*5*3*6 = 180 outputs * 7
    ],
)
def test_matmul_shapes(a_shape: tuple[int, ...], b_shape: tuple[int, ...],
                       expected: tuple[int, int], fcm_sees_it: bool) -> None:
    a, b = torch.randn(a_shape), torch.randn(b_shape)
    assert count(torch.matmul, a, b) == expected
    assert count(torch.matmul, a, b, mode="inference_mode") == expected  # aten.matmul whole
    if fcm_sees_it:
        assert fcm_flops(torch.matmul, a, b) == 2 * expected[1]


def test_products_of_nested_tensors_sum_each_sequence_s_product() -> None:
    # sequences of 3 and 5 rows of 8 features; x @ xᵀ per sequence: 3*3 + 5*5 = 34 outputs,
    # each a length-8 dot: ops 34*(2*8 - 1) = 510, macs 34*8 = 272
    strided = torch.nested.nested_tensor([torch.randn(3, 8), torch.randn(5, 8)])
    assert count(torch.matmul, strided, strided.transpose(1, 2)) == (510, 272)
    assert count(torch.bmm, strided, strided.transpose(1, 2)) == (510, 272)
    # the oracle (FlopCounterMode cannot run nested products): the dense sequences' products
    assert sum(fcm_flops(torch.matmul, s, s.T) for s in strided.unbind()) == 2 * 272
    # a jagged batch through a dense weight: (3 + 5) rows x 3 outputs = 24 length-8 dots,
    # ops 24*15 = 360, macs 24*8 = 192
    jagged = torch.nested.nested_tensor([torch.randn(3, 8), torch.randn(5, 8)],
                                        layout=torch.jagged)
    weight = torch.randn(8, 3)
    assert count(torch.matmul, jagged, weight) == (360, 192)
    assert sum(fcm_flops(torch.matmul, s, weight) for s in jagged.unbind()) == 2 * 192


def test_vector_products() -> None:
    u, v, m = torch.randn(3), torch.randn(4), torch.randn(3, 4)
    assert count(torch.dot, v, v) == (7, 4)  # 4 multiplies + 3 adds
    assert count(torch.mv, m, v) == (21, 12)  # 3 dots of length 4
    assert count(torch.addmv, u, m, v) == (24, 12)  # + 3 adds
    # outer product: 12 multiplies, no accumulation; addr adds self: 12 more
    assert count(torch.outer, u, v) == (12, 0)
    assert count(torch.addr, torch.randn(3, 4), u, v) == (24, 0)


def test_addbmm() -> None:
    # 3*5 = 15 outputs, each a dot of length 2*4 = 8: 15*15 = 225, + 15 adds of self = 240
    # macs 2*3*4*5 = 120
    c, a, b = torch.randn(3, 5), torch.randn(2, 3, 4), torch.randn(2, 4, 5)
    assert count(torch.addbmm, c, a, b) == (240, 120)


@pytest.mark.parametrize("use_gelu", [False, True])
def test_addmm_activation(use_gelu: bool) -> None:
    # addmm 48 (see above) + 8 outputs * (15 for tanh-GELU, 1 for ReLU)
    bias, a, b = torch.randn(4), torch.randn(2, 3), torch.randn(3, 4)
    expected = 48 + 8 * (15 if use_gelu else 1)
    assert formula_count(aten._addmm_activation.default, bias, a, b, use_gelu=use_gelu,
                         out=torch.empty(2, 4)) == (expected, 24)


def test_scaled_mm_is_mm() -> None:
    # 8 outputs * (2*3 - 1) = 40, + 8 bias adds; scales cost nothing
    a, b, scale = torch.randn(2, 3), torch.randn(3, 4), torch.ones(())
    assert formula_count(aten._scaled_mm.default, a, b, scale, scale) == (40, 24)
    assert formula_count(aten._scaled_mm.default, a, b, scale, scale, bias=torch.randn(4)) == (
        48, 24)


# -- composites counted as their decomposition -------------------------------------------------

@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_einsum_lowers_to_bmm(mode: str) -> None:
    # bij,bjk->bik is one bmm: 30 outputs * (2*4 - 1) = 210, macs 120
    a, b = torch.randn(2, 3, 4), torch.randn(2, 4, 5)
    assert count(torch.einsum, "bij,bjk->bik", a, b, mode=mode) == (210, 120)
    # ij,ij->i: a batched dot: 3 dots of length 4 = 21, macs 12
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    assert count(torch.einsum, "ij,ij->i", x, y, mode=mode) == (21, 12)
    # ij->i: a plain sum: 3 rows * 3 adds = 9
    assert count(torch.einsum, "ij->i", x, mode=mode) == (9, 0)
    assert fcm_flops(torch.einsum, "bij,bjk->bik", a, b) == 240


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_tensordot(mode: str) -> None:
    # (2, 12) @ (12, 5): 10 outputs * (2*12 - 1) = 230, macs 120
    a, b = torch.randn(2, 3, 4), torch.randn(3, 4, 5)
    assert count(torch.tensordot, a, b, dims=2, mode=mode) == (230, 120)
    assert fcm_flops(torch.tensordot, a, b, dims=2) == 240


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_bilinear_is_nn_bilinear(mode: str) -> None:
    # rows 2, out 5: per output 4*(2*3 - 1) + (2*4 - 1) + 1 bias = 28: 280 ops; 2*5*(12 + 4) = 160
    layer, x1, x2 = nn.Bilinear(3, 4, 5), torch.randn(2, 3), torch.randn(2, 4)
    assert count(layer, x1, x2, mode=mode) == (280, 160)
    assert (ops_of(layer, x1, x2), macs_of(layer, x1, x2)) == (280, 160)


@pytest.mark.parametrize(
    ("fn", "args", "expected"),
    [
        # (2, 3) @ (3, 4) @ (4, 5): 8*5 + 10*7 = 110 ops, 24 + 40 = 64 macs
        (torch.linalg.multi_dot, ([torch.randn(2, 3), torch.randn(3, 4), torch.randn(4, 5)],),
         (110, 64)),
        (torch.linalg.matrix_power, (torch.randn(3, 3), 3), (90, 54)),  # 2 mm: 2*9*(2*3 - 1)
        (torch.kron, (torch.randn(2, 2), torch.randn(3, 3)), (36, 0)),  # 36 multiplies
        (torch.inner, (torch.randn(2, 4), torch.randn(3, 4)), (42, 24)),  # 6 dots of length 4
    ],
)
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_other_composite_products(fn: Callable[..., Any], args: tuple[Any, ...],
                                  expected: tuple[int, int], mode: str) -> None:
    assert count(fn, *args, mode=mode) == expected


# -- convolutions ------------------------------------------------------------------------------

CONVS = [
    # outputs 2*4*8*8 = 512, dot 3*9 = 27: 512*(2*27 - 1) + 512 = 27648; macs 512*27 = 13824
    (nn.Conv2d(3, 4, 3, padding=1), (2, 3, 8, 8), 27648, 13824),
    # grouped: out (1, 6, 4, 4) = 96, dot 2*9 = 18: 96*35 + 96 = 3456; macs 1728
    (nn.Conv2d(4, 6, 3, stride=2, groups=2), (1, 4, 9, 9), 3456, 1728),
    # depthwise, no bias: out (1, 4, 3, 3) = 36, dot 9: 36*17 = 612; macs 324
    (nn.Conv2d(4, 4, 3, groups=4, bias=False), (1, 4, 5, 5), 612, 324),
    # out (1, 3, 4) = 12, dot 2*2 = 4: 12*7 + 12 = 96; macs 48
    (nn.Conv1d(2, 3, 2), (1, 2, 5), 96, 48),
    # out (1, 2, 2, 2, 2) = 16, dot 8: 16*15 = 240; macs 128
    (nn.Conv3d(1, 2, 2, bias=False), (1, 1, 3, 3, 3), 240, 128),
    # unbatched (3, 8, 8): as a batch of 1, 256 outputs: 256*53 + 256 = 13824; macs 6912
    (nn.Conv2d(3, 4, 3, padding=1), (3, 8, 8), 13824, 6912),
    # padding="same" (aten._convolution_mode under inference_mode): as padding=1 above
    (nn.Conv2d(3, 4, 3, padding="same"), (2, 3, 8, 8), 27648, 13824),
]


@pytest.mark.parametrize(("layer", "shape", "expected_ops", "expected_macs"), CONVS)
def test_conv(layer: nn.Module, shape: tuple[int, ...], expected_ops: int,
              expected_macs: int) -> None:
    x = torch.randn(shape)
    assert count(layer, x) == (expected_ops, expected_macs)
    assert count(layer, x, mode="inference_mode") == (expected_ops, expected_macs)  # aten.conv2d
    assert (ops_of(layer, x), macs_of(layer, x)) == (expected_ops, expected_macs)
    assert fcm_flops(layer, x) == 2 * expected_macs


def test_complex_conv_counts_its_three_real_convolutions_in_every_grad_mode() -> None:
    c64 = torch.complex64
    x, w, b = torch.randn(2, 2, 7, dtype=c64), torch.randn(3, 2, 3, dtype=c64), \
        torch.randn(3, dtype=c64)
    # out (2, 3, 5) = 30 outputs, dot 2*3 = 6: one real conv 30*11 = 330 ops (+ 30 with a
    # bias), 180 macs. Gauss's trick: a = conv(xr, wr, br) 360, b = conv(xi, wi) 330,
    # c = conv(xr + xi, wr + wi, br + bi) 360, the sums 28 + 18 + 3; real a - b, imaginary
    # (c - a) - b, times i, plus: 5 * 30. 1050 + 49 + 150 = 1249 ops, 3 * 180 = 540 macs
    for mode in ("no_grad", "grad", "inference_mode"):
        assert count(F.conv1d, x, w, b, mode=mode) == (1249, 540), mode
    assert fcm_flops(F.conv1d, x, w, b) == 2 * 540
    # transposed: (2, 2, 7) by (2, 3, 3) -> (2, 3, 9); macs inputs * Cout * K = 28 * 3 * 3 = 252
    # per real conv, 3 * 252 = 756
    wt = torch.randn(2, 3, 3, dtype=c64)
    transposed = count(F.conv_transpose1d, x, wt)
    assert transposed[1] == 756 == fcm_flops(F.conv_transpose1d, x, wt) // 2
    assert count(F.conv_transpose1d, x, wt, mode="inference_mode") == transposed


def test_grouped_conv_backward_counts_each_gradient_as_the_forward() -> None:
    x = torch.randn(2, 8, 6, 6, requires_grad=True)
    w = torch.randn(8, 2, 3, 3, requires_grad=True)  # groups=4: 2 input channels per group
    counter = counter_of(lambda: F.conv2d(x, w, groups=4).sum().backward(), mode="grad")
    # forward: 2*8*4*4 = 256 outputs x (2 channels x 9 taps) = 4608 macs; the input and the
    # weight gradients 4608 each: 3 * 4608 = 13824
    assert counter.macs == 13_824
    with FlopCounterMode(display=False) as reference:
        F.conv2d(x, w, groups=4).sum().backward()
    # FlopCounterMode counts the weight gradient groups (4) times: 2 * 4608 * (1 + 1 + 4)
    assert reference.get_total_flops() == 2 * 4608 * 6 == 55_296


def test_conv_transpose_hand() -> None:
    # out (1, 4, 7, 7). Per dim: 3 inputs x 3 taps all land in [0, 7), covering all 7 positions:
    # landed 9*9 = 81, covered 7*7 = 49 per plane; Cin/g = 1; planes N*Cout = 4
    # ops 4*(2*1*81 - 49) = 452, + bias 4*49 = 196: 648. macs N*Cin*9*(Cout/g)*K = 2*9*2*9 = 324
    layer, x = nn.ConvTranspose2d(2, 4, 3, stride=2, groups=2), torch.randn(1, 2, 3, 3)
    assert count(layer, x) == (648, 324)
    assert fcm_flops(layer, x) == 2 * 324


@pytest.mark.parametrize(
    ("layer", "shape"),
    [
        (nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2),
         (2, 4, 5, 5)),
        (nn.ConvTranspose1d(3, 2, 4, stride=3, dilation=2, bias=False), (2, 3, 6)),
        (nn.ConvTranspose3d(2, 2, 2, stride=2), (1, 2, 2, 3, 2)),
        (nn.ConvTranspose2d(2, 3, 1, stride=3), (1, 2, 4, 4)),  # gaps: uncovered outputs
    ],
)
def test_conv_transpose_is_module_formula(layer: nn.Module, shape: tuple[int, ...]) -> None:
    x = torch.randn(shape)
    expected = (ops_of(layer, x), macs_of(layer, x))
    assert count(layer, x) == expected
    assert count(layer, x, mode="inference_mode") == expected  # aten.conv_transpose*d whole
    # macs: inputs * (Cout/g) * K, which is what FlopCounterMode counts for transposed convs
    weight = layer.get_parameter("weight")
    assert expected[1] == x.numel() * weight[0].numel()
    assert fcm_flops(layer, x) == 2 * expected[1]


def test_fused_conv_kernels() -> None:
    # The CUDA-only fusions, priced from their arguments: conv 27648 (see CONVS) + 512 ReLUs;
    # add_relu adds 512 adds, 512 multiplies (alpha = 2) and 512 ReLUs.
    x, w, b = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3), torch.randn(4)
    out = F.conv2d(x, w, b, padding=1)
    relu = formula_count(aten.cudnn_convolution_relu.default, x, w, b, [1, 1], [1, 1], [1, 1],
                         1, out=out)
    assert relu == (27648 + 512, 13824)
    add_relu = formula_count(aten.cudnn_convolution_add_relu.default, x, w, out, 2.0, b,
                             [1, 1], [1, 1], [1, 1], 1, out=out)
    assert add_relu == (27648 + 3 * 512, 13824)


def test_conv_tbc() -> None:
    # (T=5, B=2, Cin=3), kernel 2, Cout 4: out (4, 2, 4) = 32 outputs, dot 2*3 = 6
    # 32*(2*6 - 1) + 32 bias = 384; macs 192
    x, w, b = torch.randn(5, 2, 3), torch.randn(2, 3, 4), torch.randn(4)
    assert count(torch.conv_tbc, x, w, b) == (384, 192)


# -- meta device -------------------------------------------------------------------------------

META_CASES: list[tuple[Callable[..., Any], tuple[Any, ...]]] = [
    (torch.matmul, (torch.randn(2, 1, 3, 4), torch.randn(5, 4, 6))),
    (torch.addmm, (torch.randn(4), torch.randn(2, 3), torch.randn(3, 4))),
    (torch.baddbmm, (torch.randn(2, 3, 5), torch.randn(2, 3, 4), torch.randn(2, 4, 5))),
    (F.linear, (torch.randn(2, 3, 5), torch.randn(7, 5), torch.randn(7))),
    (F.conv2d, (torch.randn(1, 4, 9, 9), torch.randn(6, 2, 3, 3), None, 2, 0, 1, 2)),
    (F.conv_transpose2d, (torch.randn(2, 4, 5, 5), torch.randn(4, 3, 3, 3), None, 2, 1, 1, 2)),
    (lambda a, b: torch.einsum("bij,bjk->bik", a, b), (torch.randn(2, 3, 4), torch.randn(2, 4, 5))),
]


@pytest.mark.parametrize(("fn", "args"), META_CASES)
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_meta_device_counts_the_same(fn: Callable[..., Any], args: tuple[Any, ...],
                                     mode: str) -> None:
    assert count(fn, *on_meta(args), mode=mode) == count(fn, *args, mode=mode)


def test_grouped_mm_counts_what_flopcountermode_misses() -> None:
    from torch.utils.flop_counter import FlopCounterMode

    from moduleprofiler.operators.registry import lookup

    formula = lookup(torch.ops.aten._grouped_mm.default)
    experts = torch.randn(3, 8, 16)
    # rows of a (6, 8) token matrix routed to 3 experts by offsets 2, 4, 6:
    # 6 rows x 16 outputs = 96 dot products of length 8: macs 96 * 8 = 768,
    # ops 96 * (2 * 8 - 1) = 1440
    tokens, offs = torch.randn(6, 8), torch.tensor([2, 4, 6], dtype=torch.int32)
    routed = torch._grouped_mm(tokens, experts, offs=offs)
    assert formula((tokens, experts), {"offs": offs}, routed) == (1440, 768)
    # the same work as one mm per expert, which FlopCounterMode does count
    with FlopCounterMode(display=False) as counter:
        for group, (start, end) in enumerate([(0, 2), (2, 4), (4, 6)]):
            torch.mm(tokens[start:end], experts[group])
    assert counter.get_total_flops() == 2 * 768
    with FlopCounterMode(display=False) as counter:  # while it sees nothing here
        torch._grouped_mm(tokens, experts, offs=offs)
    assert counter.get_total_flops() == 0
    # (3, 4, 8) @ (3, 8, 16): 3 * 4 * 16 = 192 outputs of length 8: macs 1536
    batched = torch.randn(3, 4, 8)
    assert formula((batched, experts), {}, torch._grouped_mm(batched, experts))[1] == 1536


def test_scaled_matmuls_of_both_interfaces_count_as_mm() -> None:
    # float8 (16 x 32) @ (32 x 64) with one scale each, run on the CPU through the first and the
    # second scaled-matmul interface (scale lists and recipes: 0 is one scale per tensor):
    # 16 x 64 dot products of length 32, 1024 x 63 = 64512 ops, 16 x 32 x 64 = 32768 macs
    a = torch.randn(16, 32).to(torch.float8_e4m3fn)
    b = torch.randn(64, 32).to(torch.float8_e4m3fn).t()
    one = torch.tensor(1.0)
    assert count(torch._scaled_mm, a, b, one, one, out_dtype=torch.float32) == (64512, 32768)
    assert count(aten._scaled_mm_v2.default, a, b, [one], [0], [0], [one], [0], [0], None,
                 torch.float32) == (64512, 32768)
    # the grouped one (CUDA only), called directly: 2 experts' (8 x 32) @ (32 x 64)
    grouped = formula_count(aten._scaled_grouped_mm_v2.default, torch.empty(2, 8, 32),
                            torch.empty(2, 32, 64), [one], [0], [0], [one], [0], [0],
                            out=torch.empty(2, 8, 64))
    assert grouped == (2 * 8 * 64 * 63, 2 * 8 * 32 * 64)


def test_bilinear_backward_of_an_empty_batch_counts_zero_not_a_negative_count() -> None:
    from moduleprofiler import Profiler

    # 0 rows: the weight gradient's _trilinear writes 5 x 3 x 4 = 60 zeros from 0 terms (it
    # counted 3 * 0 - 60 = -60 ops and the profile raised); each input gradient has 0 rows
    layer, x1, x2 = nn.Bilinear(3, 4, 5), torch.randn(0, 3), torch.randn(0, 4)
    profile = Profiler().profile(layer, (x1, x2), backward=True)
    assert (profile.total_ops, profile.total_macs) == (0, 0)
    # the bias gradient sums 0 rows: 0 adds
    assert (profile.total_backward_ops, profile.total_backward_macs) == (0, 0)
    assert profile.complete


def test_a_sampled_product_computes_only_the_stored_entries() -> None:
    pattern = torch.eye(3).to_sparse_csr()  # 3 stored entries
    mat1, mat2 = torch.randn(3, 5), torch.randn(5, 3)
    # 3 dot products of length 5: 3 x 9 = 27 ops, 15 macs; + self: 3 adds (beta = 1)
    assert count(torch.sparse.sampled_addmm, pattern, mat1, mat2) == (30, 15)
    assert count(torch.sparse.sampled_addmm, pattern, mat1, mat2, beta=0.0) == (27, 15)
    assert count(torch.sparse.sampled_addmm, pattern, mat1, mat2, alpha=2.0) == (33, 15)
    # a dense product would be 9 outputs: 9 x 9 = 81 ops, 45 macs
    assert fcm_flops(torch.mm, mat1, mat2) == 2 * 45
