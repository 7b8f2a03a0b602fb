"""Element-wise arithmetic, activations, softmax, dropout and reductions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from moduleprofiler import ModuleProfiler
from moduleprofiler.operators.elementwise import power_ops
from tests.conftest import ops_of
from tests.operators.helpers import count, on_meta, ops

X = torch.randn(2, 3)  # 6 elements
Y = torch.randn(3)


# -- arithmetic --------------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        (lambda: X + Y, 6),  # 6 outputs after broadcasting (2, 3) + (3,)
        (lambda: X - 1.5, 6),  # a scalar other
        (lambda: 1 - X, 6),  # rsub
        (lambda: X * Y, 6),
        (lambda: X / Y, 6),
        (lambda: torch.add(X, Y, alpha=2), 12),  # x + 2*y: a multiply and an add per output
        (lambda: torch.div(X, Y, rounding_mode="floor"), 12),  # divide, then floor
        (lambda: X.clone().add_(Y), 6),  # in place
        (lambda: torch.add(X, Y, out=torch.empty(2, 3)), 6),  # out=
        (lambda: -X, 0),  # NB: a sign flip is free
        (lambda: X.abs(), 6),
        (lambda: X.exp().sqrt(), 12),  # 1 + 1 per element
        (lambda: X.clamp(min=0), 6),  # one comparison per bound
        (lambda: X.clamp(-1, 1), 12),
        (lambda: torch.maximum(X, Y), 6),
        (lambda: torch.max(X, Y.expand(2, 3)), 6),  # max.other is element-wise
        (lambda: X > 0, 6),
        (lambda: torch.addcmul(X, X, X), 12),  # t1 * t2 + self
        (lambda: torch.addcmul(X, X, X, value=0.5), 18),  # + the scale
        (lambda: torch.lerp(X, X, 0.3), 18),  # start + w * (end - start)
        (lambda: torch.where(X > 0, X, Y), 6),  # the comparison; the select is free
        (lambda: X.masked_fill(X > 0, 0.0), 6),  # the comparison; the fill is free
        (lambda: torch.square(X), 6),
        (lambda: X.sigmoid(), 18),  # 3 per element, as nn.Sigmoid
        (lambda: X.tanh(), 42),  # 7 per element, as nn.Tanh
        (lambda: X.logit(), 18),  # log(x / (1 - x)): subtract, divide, log: 3 * 6
        (lambda: X.logit(eps=1e-6), 30),  # + the clamp to [eps, 1 - eps]: 5 * 6
        (lambda: X.angle(), 6),  # one elementary function per element
        (lambda: torch.polar(X.abs(), X).angle(), 6 + 6 * 4 + 6),  # abs, polar (4), angle
        (lambda: torch.equal(X, X.clone()), 6),  # 6 element comparisons
        (lambda: torch.equal(X, Y), 0),  # shapes differ: nothing compared
    ],
)
def test_arithmetic(fn: Callable[[], Any], expected: int) -> None:
    assert count(fn) == (expected, 0)


@pytest.mark.parametrize(("eps", "per_element"), [(None, 3), (1e-6, 5)])
def test_logit_backward(eps: float | None, per_element: int) -> None:
    # forward logit (3 or 5 per element, above) and sum (5 adds), then the backward:
    # logit_backward g / (x * (1 - x)) is subtract, multiply, divide, + 2 comparisons with eps
    # (the gradient is 0 outside [eps, 1 - eps]): 6 * per_element each way
    x = torch.rand(2, 3, requires_grad=True)
    assert count(lambda: torch.logit(x, eps).sum().backward(), mode="grad") == (
        6 * per_element + 5 + 6 * per_element, 0)


@pytest.mark.parametrize(
    ("exponent", "per_element"),
    [(2, 1), (3, 2), (4, 2), (5, 3), (1, 0), (0, 0), (-1, 1), (-2, 2), (0.5, 1), (2.5, 1)],
)  # integers by repeated squaring (x**5 = (x**2)**2 * x: 3), + 1 reciprocal when negative
def test_pow_scalar_exponent(exponent: float, per_element: int) -> None:
    assert power_ops(exponent) == per_element
    assert ops(torch.pow, X, exponent) == 6 * per_element


def test_pow_tensor_exponent_and_scalar_base() -> None:
    assert ops(torch.pow, X, X) == 6
    assert ops(torch.pow, 2.0, X) == 6


def test_gpt2_gelu_is_nn_gelu_tanh() -> None:
    # HF's NewGELU: pow(x, 3) 2 + 5 multiplies/adds + tanh 7 + 1 = 15 per element, the price of
    # nn.GELU(approximate='tanh'): 6 elements * 15 = 90
    def new_gelu(x: torch.Tensor) -> torch.Tensor:
        inner = 0.7978845608 * (x + 0.044715 * torch.pow(x, 3.0))
        return 0.5 * x * (1.0 + torch.tanh(inner))

    assert ops(new_gelu, X) == 90
    assert ops_of(nn.GELU(approximate="tanh"), X) == 90


# -- activations: the operator costs what the module costs -------------------------------------

X4 = torch.randn(2, 3, 4, 5)  # 120 elements

ACTIVATIONS: list[tuple[nn.Module, int]] = [
    (nn.ReLU(), 1),  # max(0, x)
    (nn.ReLU6(), 2),  # hardtanh: min, max
    (nn.Hardtanh(), 2),
    (nn.Threshold(0.1, 0.0), 1),
    (nn.LeakyReLU(), 4),
    (nn.PReLU(3), 4),
    (nn.ELU(), 3),
    (nn.SELU(), 7),  # reaches the dispatcher as aten.elu with a scale
    (nn.CELU(2.0), 7),
    (nn.Sigmoid(), 3),
    (nn.Tanh(), 7),
    (nn.Softplus(), 5),
    (nn.LogSigmoid(), 3),
    (nn.SiLU(), 4),  # x * sigmoid(x)
    (nn.Mish(), 13),  # x * tanh(softplus(x)): 1 + 7 + 5
    (nn.Hardsigmoid(), 4),
    (nn.Hardswish(), 5),
    (nn.Hardshrink(), 2),
    (nn.Softshrink(), 3),
    (nn.Tanhshrink(), 8),  # x - tanh(x): F.tanhshrink runs tanh and sub
    (nn.Softsign(), 3),  # x / (1 + |x|): abs, add, div
    (nn.GELU(), 5),
    (nn.GELU(approximate="tanh"), 15),
    (nn.RReLU(), 4),  # eval: a fixed slope, as LeakyReLU
]


@pytest.mark.parametrize(("module", "per_element"), ACTIVATIONS, ids=repr)
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_activation_is_module_formula(module: nn.Module, per_element: int, mode: str) -> None:
    module.eval()
    assert count(module, X4, mode=mode) == (120 * per_element, 0)
    assert ops_of(module, X4) == 120 * per_element


def test_glu() -> None:
    # output (2, 3, 4, 5) -> halves along dim 1 is not even; use the last dim of (2, 3, 4, 6):
    # output 2*3*4*3 = 72 elements * (sigmoid 3 + multiply 1) = 288
    x = torch.randn(2, 3, 4, 6)
    assert ops(F.glu, x) == 288
    assert ops_of(nn.GLU(), x) == 288


def test_rrelu_in_training_draws_slopes() -> None:
    # 4 as LeakyReLU + 3 to draw the slope: 7 per element
    assert ops(F.rrelu, X4, training=True) == 120 * 7


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_softmax_family(mode: str) -> None:
    x = torch.randn(2, 3, 4)
    # rows 2*3 = 6, D 4: softmax 6*(4*4 - 1) = 90; log_softmax 6*4*4 = 96
    assert count(F.softmax, x, dim=-1, mode=mode) == (90, 0)
    assert count(F.log_softmax, x, dim=-1, mode=mode) == (96, 0)
    # softmin = softmax(-x), the negation is free; over dim 1 (D 3): rows 8*(4*3 - 1) = 88
    assert count(F.softmin, x, dim=1, mode=mode) == (88, 0)
    assert ops_of(nn.Softmin(dim=1), x) == 88
    assert ops_of(nn.Softmax(dim=-1), x) == 90


def test_softmax_of_a_nested_tensor_runs_over_each_sequence_s_own_length() -> None:
    # attention scores of sequences of 3 and 5: rows of 3 and of 5 keys,
    # softmax 3*(4*3 - 1) + 5*(4*5 - 1) = 33 + 95 = 128
    x = torch.nested.nested_tensor([torch.randn(3, 8), torch.randn(5, 8)])
    scores = torch.matmul(x, x.transpose(1, 2))
    assert count(torch.softmax, scores, -1) == (128, 0)
    # over the 8 features: 8 rows of 8, 8*(4*8 - 1) = 248 (strided and jagged layouts)
    assert count(torch.softmax, x, -1) == (248, 0)
    jagged = torch.nested.nested_tensor(list(x.unbind()), layout=torch.jagged)
    assert count(torch.softmax, jagged, -1) == (248, 0)


# -- dropout -----------------------------------------------------------------------------------

X_DROP = torch.randn(2, 3, 4, 4)  # 96 elements, 6 (sample, channel) pairs


@pytest.mark.parametrize(
    ("module", "expected"),
    [
        (nn.Dropout(0.5), 288),  # 2 per mask entry + 1 per element: 3*96
        (nn.Dropout2d(0.5), 108),  # mask 6: 2*6 + 96
        (nn.AlphaDropout(0.5), 672),  # 5*96 + 2*96
        (nn.FeatureAlphaDropout(0.5), 222),  # 5*6 + 2*96
        (nn.Dropout(0.0), 0),
    ],
    ids=repr,
)
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_dropout_in_training(module: nn.Module, expected: int, mode: str) -> None:
    module.train()
    assert count(module, X_DROP, mode=mode) == (expected, 0)
    assert ModuleProfiler().profile(module, X_DROP, eval=False).total_ops == expected


@pytest.mark.parametrize("dropout", [F.dropout, F.dropout2d, F.alpha_dropout,
                                     F.feature_alpha_dropout], ids=lambda f: f.__name__)
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_dropout_with_p_one_multiplies_by_zero(dropout: Callable[..., Any], mode: str) -> None:
    # p = 1: torch draws no mask, it multiplies the 96 elements by zero: 96 ops, on either path
    # (inference_mode used to price a drawn mask: 3 * 96 = 288 for F.dropout)
    assert count(dropout, X_DROP, 1.0, True, mode=mode) == (96, 0)
    module = nn.Dropout(1.0).train()
    assert ModuleProfiler().profile(module, X_DROP, eval=False).total_ops == 96


def test_native_dropout_with_p_one_still_draws_its_mask() -> None:
    # native_dropout draws a Bernoulli mask whatever p: 2 * 96 + 96 = 288
    assert count(torch.native_dropout, X_DROP, 1.0, True) == (288, 0)


def test_dropout_in_eval_is_free() -> None:
    assert count(nn.Dropout(0.5).eval(), X_DROP) == (0, 0)
    assert count(F.dropout, X_DROP, 0.5, False, mode="inference_mode") == (0, 0)


# -- reductions --------------------------------------------------------------------------------

R = torch.randn(2, 3, 4)  # 24 elements


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        (lambda: R.sum(), 23),  # 23 adds
        (lambda: R.sum(dim=1), 16),  # 8 outputs * 2 adds
        (lambda: R.mean(dim=1), 24),  # 8 outputs * (2 adds + 1 divide)
        (lambda: R.amax(dim=-1), 18),  # 6 outputs * 3 comparisons
        (lambda: R.max(dim=-1), 18),
        (lambda: R.max(), 23),
        (lambda: R.argmax(), 23),
        (lambda: R.prod(dim=0), 12),  # 12 outputs * 1 multiply
        (lambda: (R > 0).any(), 47),  # 24 comparisons, then 23 ors
        (lambda: torch.count_nonzero(R), 47),  # 24 tests + 23 adds
        (lambda: torch.aminmax(R), 46),  # 2 * 23 comparisons
        (lambda: R.var(dim=-1), 84),  # 6 outputs * (3*4 + 2)
        (lambda: R.std(dim=-1), 90),  # 6 * (3*4 + 3)
        (lambda: torch.var_mean(R, dim=-1), 84),
        (lambda: torch.std_mean(R, dim=-1), 90),
        (lambda: R.norm(dim=-1), 48),  # p=2: 6 * (4 squares + 3 adds + 1 sqrt)
        (lambda: R.norm(p=1, dim=-1), 42),  # 6 * (4 abs + 3 adds)
        (lambda: torch.linalg.vector_norm(R, 3.0, dim=-1), 72),  # 6 * (4 abs, 4 pow, 3 adds, root)
        (lambda: R.logsumexp(dim=-1), 78),  # 6 * (4 subtracts, 4 exps, 3 adds, log, add)
        (lambda: R.cumsum(dim=1), 16),  # 8 lines * 2 adds
    ],
)
def test_reductions(fn: Callable[[], Any], expected: int) -> None:
    assert count(fn) == (expected, 0)


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_vander_counts_its_cumulative_product(mode: str) -> None:
    # vander(x, 4) of 3 values: columns x^0..x^3 as a cumulative product of x repeated over 3
    # columns: 3 rows * 2 multiplies = 6 (inference_mode, where vander arrives whole, had it
    # unknown)
    assert count(torch.vander, torch.randn(3), 4, mode=mode) == (6, 0)


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_nanmean_counts_what_its_kernel_computes(mode: str) -> None:
    # nansum(R, 1) / (~isnan(R)).sum(1): 24 NaN tests and 24 negations, then per output of 3
    # values two sums of 2 adds and the divide: 48 + 8 * (2 + 2 + 1) = 88 = 8 * (4*3 - 1)
    # (inference_mode, where nanmean arrives whole, counted it as a mean: 8 * 3 = 24)
    assert count(torch.nanmean, R, 1, mode=mode) == (88, 0)
    # all 24: 48 + 23 + 23 + 1 = 95
    assert count(torch.nanmean, R, mode=mode) == (95, 0)


def test_scatter_accumulation() -> None:
    index = torch.tensor([[0, 1, 0]])
    # 3 values added into the target
    assert ops(torch.scatter_add, torch.zeros(2, 3), 0, index, torch.ones(1, 3)) == 3
    assert ops(torch.index_add, torch.zeros(4, 3), 0, torch.tensor([0, 2]), torch.ones(2, 3)) == 6
    assert ops(lambda: torch.zeros(3).index_put_((torch.tensor([0, 0]),), torch.ones(2),
                                                 accumulate=True)) == 2
    assert ops(torch.scatter, torch.zeros(2, 3), 0, index, torch.ones(1, 3)) == 0  # a write


# -- composites: the whole counts what its parts count ------------------------------------------

COMPOSITES: list[tuple[Callable[..., Any], tuple[Any, ...]]] = [
    (F.selu, (X4,)),
    (F.relu6, (X4,)),
    (F.prelu, (X4, torch.full((3,), 0.2))),
    (F.logsigmoid, (X4,)),
    (lambda x: F.softmax(x, 1), (X4,)),
    (lambda x: F.dropout(x, 0.5, True), (X4,)),
    (lambda x: F.dropout2d(x, 0.5, True), (X4,)),
    (lambda x: F.alpha_dropout(x, 0.5, True), (X4,)),
    (lambda x: torch.var(x, 1), (X4,)),
    (lambda x: torch.std_mean(x, 1), (X4,)),
    (torch.square, (X4,)),
    (torch.true_divide, (X4, 2.0)),
    (torch.float_power, (X4, 2)),
    (lambda x: torch.max(x, x), (X4,)),
    (F.cosine_similarity, (X4, X4)),
    (F.pairwise_distance, (X4, X4)),
]


@pytest.mark.parametrize(("fn", "args"), COMPOSITES)
def test_inference_mode_counts_what_no_grad_counts(fn: Callable[..., Any],
                                                   args: tuple[Any, ...]) -> None:
    assert count(fn, *args, mode="inference_mode") == count(fn, *args)


def test_cosine_similarity_counts_its_lowering() -> None:
    # NB: per row of D = 3: 2 norms (2D each), 2 clamps, 2 divides (D each), D multiplies,
    # D - 1 adds: 8D + 1 = 25; rows 2*4*5 = 40: 1000. nn.CosineSimilarity's formula says 6D + 3.
    assert ops(F.cosine_similarity, X4, X4) == 1000
    assert ops_of(nn.CosineSimilarity(), X4, X4) == 40 * 21


def test_pairwise_distance_is_module_formula() -> None:
    # rows 2*3*4 = 24, D 5: x1 - x2 + eps (2D), p=2 norm (2D): 24 * 20 = 480
    assert ops(F.pairwise_distance, X4, X4) == 480
    assert ops_of(nn.PairwiseDistance(), X4, X4) == 480


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_weight_norm(mode: str) -> None:
    # the Linear: 3 rows * 3 outputs * (2*4 - 1) + 9 bias = 72, macs 36; the weight (3, 4):
    # 3 row norms of 2*4, 3 divides g / norm, 12 multiplies = 39; total 111
    layer = nn.utils.parametrizations.weight_norm(nn.Linear(4, 3))
    assert count(layer, torch.randn(3, 4), mode=mode) == (111, 36)


# -- meta device -------------------------------------------------------------------------------

META_CASES: list[tuple[Callable[..., Any], tuple[Any, ...]]] = [
    (torch.add, (X4, X4[0])),
    (lambda x: F.gelu(x, approximate="tanh"), (X4,)),
    (F.silu, (X4,)),
    (lambda x: F.softmax(x, -1), (X4,)),
    (lambda x: x.var(dim=(1, 2)), (X4,)),
    (lambda x: x.pow(3).sum(), (X4,)),
    (lambda x: F.dropout(x, 0.5, True), (X4,)),
    (lambda x: x.cumsum(2), (X4,)),
]


@pytest.mark.parametrize(("fn", "args"), META_CASES)
def test_meta_device_counts_the_same(fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    assert count(fn, *on_meta(args)) == count(fn, *args)


# -- sparse operands: the stored values ----------------------------------------------------------

def _coo_with_four_entries() -> torch.Tensor:
    # a 3 x 3 matrix storing 4 of its 9 entries
    return torch.sparse_coo_tensor(torch.tensor([[0, 0, 1, 2], [0, 2, 1, 0]]),
                                   torch.tensor([1.0, 2.0, 3.0, 4.0]), (3, 3))


def test_elementwise_on_a_sparse_tensor_counts_its_stored_values() -> None:
    x = _coo_with_four_entries()
    # one multiply per stored value: 4 (the dense shape's 3 * 3 = 9 before)
    assert ops(lambda t: t * 2, x) == 4
    # sin costs 1 per element: 4 stored values of the CSR form, 4 ops
    assert ops(torch.sin, x.to_sparse_csr()) == 4


def test_elementwise_on_a_hybrid_sparse_tensor_counts_each_stored_row() -> None:
    # 2 stored entries of a (4, 3) tensor with one dense dim: values (2, 3), 6 multiplies
    # (12 for the dense shape)
    x = torch.sparse_coo_tensor(torch.tensor([[0, 2]]), torch.ones(2, 3), (4, 3))
    assert ops(lambda t: t * 2, x) == 6


def test_a_sparse_operand_added_into_a_dense_one_counts_its_stored_values() -> None:
    dense, sparse = torch.randn(3, 3), _coo_with_four_entries()
    # the dense matrix is copied and each of the 4 stored values added once: 4 adds (the
    # dense result's 9 elements before)
    assert ops(lambda a, b: a + b, dense, sparse) == 4
    assert ops(lambda a, b: a.add_(b), dense.clone(), sparse) == 4
    # with alpha = 2 each stored value is also multiplied: 8
    assert ops(lambda a, b: torch.add(a, b, alpha=2), dense, sparse) == 8
    # two dense operands: every element, 9
    assert ops(lambda a, b: a + b, dense, dense) == 9


def test_a_sparse_softmax_softmaxes_each_rows_stored_values() -> None:
    x = _coo_with_four_entries().coalesce()  # (0, 0), (0, 2), (1, 1), (2, 0)
    # along dim 1 the rows holding entries are 0 (2 values), 1 and 2 (1 each): each row of r
    # stored values costs 4r - 1, so 4 * 4 - 3 = 13; along dim 0 the columns 0 (2 values),
    # 1 and 2: 13 as well; log_softmax 4 per stored value: 16
    assert ops(lambda t: torch.sparse.softmax(t, 1), x) == 13
    assert ops(lambda t: torch.sparse.softmax(t, 0), x) == 13
    assert ops(lambda t: torch.sparse.log_softmax(t, 1), x) == 16


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_coalescing_adds_the_duplicate_entries(mode: str) -> None:
    # 5 stored entries, (0, 0) twice: coalescing merges them with 1 add, 4 left; asking
    # whether a tensor is coalesced is free (under inference_mode torch dispatches
    # ``coalesce`` itself, elsewhere its ``_coalesce``)
    x = torch.sparse_coo_tensor(torch.tensor([[0, 0, 1, 2, 0], [0, 2, 1, 0, 0]]),
                                torch.ones(5), (3, 3))
    assert ops(lambda t: t.coalesce(), x, mode=mode) == 1
    assert ops(lambda t: torch.ones(1) * t.is_coalesced(), x, mode=mode) == 1  # the multiply


def test_a_module_on_a_sparse_input_counts_its_stored_values() -> None:
    class Doubles(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x * 2

    profile = ModuleProfiler().profile(Doubles(), (_coo_with_four_entries(),))
    # 4 multiplies, and reading the stored values is not itself counted as an operator
    assert profile.total_ops == 4 and profile.complete


# -- norms, traces and exponent arithmetic -----------------------------------------------------

X3 = torch.randn(3, 4, 5)  # along dim 1: 4 slices of 3 * 5 = 15 elements


@pytest.mark.parametrize(
    ("fn", "args", "expected"),
    [
        # 4 slices: the 2-norm of 15 elements (2 * 15 = 30), its test against maxnorm, the add of
        # eps and the divide (3); then 60 multiplies: 4 * 33 + 60 = 192
        (torch.renorm, (X3, 2, 1, 1.0), 192),
        (torch.renorm, (X3, 1, 1, 1.0), 4 * (29 + 3) + 60),  # the 1-norm: 2 * 15 - 1
        (torch.renorm, (X3, 3, 0, 1.0), 3 * (60 + 3) + 60),  # 3 slices of 20: 3 * 20 each
        # 6 differences of the broadcast operands, then their 2-norm 2 * 6 = 12: 18
        (torch.dist, (X, Y), 18),
        (torch.dist, (X, Y, 1), 6 + 11),
        (torch.trace, (torch.randn(3, 5),), 2),  # the 3 diagonal elements: 2 adds
        (torch.trace, (torch.randn(1, 1),), 0),
        (torch.ldexp, (X, torch.tensor([1, 2, 3])), 12),  # x * 2 ** e: 2 per element
        (torch.frexp, (X,), 6),  # mantissa and exponent: 1 evaluation per element
        # 3 rows of 4 values combined into one hash each: 3 x 3; all 60 of X3 into one: 59
        (torch.hash_tensor, (torch.randn(3, 4), [1]), 9),
        (torch.hash_tensor, (X3,), 59),
    ],
)
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_norms_traces_and_exponents(fn: Callable[..., Any], args: tuple[Any, ...],
                                    expected: int, mode: str) -> None:
    assert count(fn, *args, mode=mode) == (expected, 0)


def test_put_and_masked_index_accumulate_their_values() -> None:
    x, index, source = torch.randn(5), torch.tensor([0, 1, 1]), torch.ones(3)
    assert ops(lambda: x.put(index, source, accumulate=True)) == 3  # 3 adds
    assert ops(lambda: x.put(index, source)) == 0  # a write
    mask = torch.tensor([True, False, True])
    # 3 values added (the masked one as a zero); the masked gather is a selection
    assert ops(torch.ops.aten._unsafe_masked_index_put_accumulate, x, mask, [index], source) == 3
    assert ops(torch.ops.aten._unsafe_masked_index, x, mask, [index], 0.0) == 0


A6 = torch.randn(2, 3)


@pytest.mark.parametrize(
    ("fn", "args"),
    [
        (torch.isclose, (A6, Y)), (torch.isreal, (A6,)), (torch.cov, (A6,)),
        (torch.corrcoef, (A6,)), (torch.quantile, (A6, 0.3)), (torch.nanquantile, (A6, 0.3)),
        (lambda t: torch.gradient(t)[0], (A6,)), (lambda t: t & (t > 0), (A6 > 0,)),
    ],
)
def test_composites_count_their_parts_under_inference_mode_too(fn: Callable[..., Any],
                                                              args: tuple[Any, ...]) -> None:
    # under inference_mode the composite arrives whole and is counted as its decomposition:
    # the parts no_grad counts
    assert count(fn, *args, mode="inference_mode") == count(fn, *args)


def test_allclose_is_isclose_and_its_all() -> None:
    # isclose of (2, 3) and (3,), as its parts count it, then 6 - 1 ands
    assert ops(torch.allclose, A6, Y) == ops(torch.isclose, A6, Y) + 5
    # isclose of (2, 3) with (3,): a == b 6; atol + |rtol * b| 3 + 3 + 3; |a - b| 6 + 6; its
    # finiteness (x == x) & (|x| != inf) 6 + 6 + 6 + 6; the comparison with the allowed error
    # 6; and-ing it in and or-ing with a == b 6 + 6: 69
    assert ops(torch.isclose, A6, Y) == 69
