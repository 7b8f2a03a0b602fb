"""The zero-cost set, and the registry's bookkeeping for the operator families."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from moduleprofiler.operators import (
    FREE_OPERATORS,
    OPERATOR_FORMULAS,
    lookup,
    register_operator,
    unregister_operator,
)
from moduleprofiler.operators._common import UNAVAILABLE
from moduleprofiler.operators.registry import MISSING
from tests.operators.helpers import count, counter_of, formula_count

aten = torch.ops.aten
X = torch.randn(2, 3, 4)

FREE_NAMES = (
    "view", "_unsafe_view", "reshape", "expand", "permute", "transpose", "t", "contiguous",
    "clone", "copy_", "_to_copy", "detach", "alias", "slice", "select", "index_select", "cat",
    "stack", "split", "chunk", "unsqueeze", "squeeze", "flatten", "empty", "empty_like",
    "zeros", "ones", "full", "fill_", "zero_", "arange", "lift_fresh", "_reshape_alias",
    "as_strided", "unbind", "narrow", "split_with_sizes", "new_empty", "new_zeros",
    "scalar_tensor", "_local_scalar_dense", "sym_size", "where", "masked_fill", "gather",
    "embedding", "constant_pad_nd", "upsample_nearest2d", "tril", "to_padded_tensor",
    "poisson", "binomial", "_standard_gamma", "_sample_dirichlet",  # random draws
)  # fmt: skip


@pytest.mark.parametrize("name", FREE_NAMES)
def test_declared_free(name: str) -> None:
    packet = getattr(aten, name)
    for overload in packet.overloads():
        assert lookup(getattr(packet, overload)) is None


def _sparse_parts(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    if x.layout is torch.sparse_coo:
        return x._indices(), x._values(), x.coalesce().indices(), x.coalesce().values()
    return x.crow_indices(), x.col_indices(), x.values()


MOVES: list[Callable[[], Any]] = [
    lambda: X.view(6, 4).t().contiguous(),
    lambda: X.reshape(-1).unsqueeze(0).squeeze(0),
    lambda: X.permute(2, 0, 1).flatten(1).clone(),
    lambda: X.transpose(0, 1).expand(3, 2, 4)[1:, :, ::2],
    lambda: torch.cat([X, X], dim=1).split(2, dim=1),
    lambda: torch.stack([X, X]).chunk(3, dim=-1),
    lambda: X.unbind(0) + X.narrow(1, 0, 2).split_with_sizes([1, 1], dim=1),
    lambda: X.to(torch.float64).detach().select(0, 1),
    lambda: X[torch.tensor([1, 0])].index_select(2, torch.tensor([3, 0])),
    lambda: torch.gather(X, 2, torch.zeros(2, 3, 1, dtype=torch.long)),
    lambda: X.repeat(2, 1, 1).flip(0).roll(1, 2),
    lambda: F.pad(X, (1, 2)),
    lambda: (torch.zeros(3), torch.ones(2, 2), torch.full((2,), 1.0), torch.arange(5),
             torch.empty(4), torch.empty_like(X), X.new_zeros(3), torch.rand(3)),
    lambda: torch.zeros(3).fill_(2.0).zero_(),
    lambda: torch.tril(torch.ones(3, 3)),
    # a complex tensor from its parts, conjugated (a sign flip, free as negation is), and
    # chunks concatenated; conversions to a sparse layout select the nonzeros, as nonzero
    lambda: torch.complex(X, X).conj_physical(),
    lambda: torch._chunk_cat([X, X], 1, 2),
    lambda: (X.to_sparse(), X[0].to_sparse_csr()),
    # a sparse tensor assembled from indices and values, and its parts read back
    lambda: _sparse_parts(torch.sparse_coo_tensor(torch.tensor([[0, 2]]), torch.ones(2), (4,))),
    lambda: _sparse_parts(torch.sparse_csr_tensor(torch.tensor([0, 1, 2]), torch.tensor([0, 1]),
                                                  torch.ones(2), (2, 2))),
    # in-place forms of a view and a fill (whole under inference_mode: they were unknown there)
    lambda: X.clone().swapaxes_(0, 1).swapdims_(1, 2),
    lambda: torch.zeros(3, 3).fill_diagonal_(1.0),
    lambda: X.sum().item(),  # the sum costs 23 adds; reading the scalar nothing
]


@pytest.mark.parametrize("fn", MOVES)
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_data_movement_costs_nothing(fn: Callable[[], Any], mode: str) -> None:
    expected = (23, 0) if fn is MOVES[-1] else (0, 0)
    assert count(fn, mode=mode) == expected


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_one_hot_counts_its_index_checks(mode: str) -> None:
    # one_hot validates its indices: min and max of 2 values, 1 comparison each; the scatter
    # of ones is free
    assert count(F.one_hot, torch.tensor([0, 2]), 3, mode=mode) == (2, 0)


def test_data_movement_on_meta_costs_nothing() -> None:
    x = X.to("meta")
    assert count(lambda: torch.cat([x.view(6, 4).t(), x.reshape(4, 6)], 1).chunk(2)) == (0, 0)
    assert count(lambda: x.permute(2, 0, 1).contiguous().flatten()[::2].clone()) == (0, 0)
    assert count(lambda: (torch.zeros(3, device="meta"), x.new_empty(2), x.expand(2, 2, 3, 4)))\
        == (0, 0)


def test_no_operator_is_both_free_and_counted() -> None:
    assert not set(OPERATOR_FORMULAS) & FREE_OPERATORS


def test_every_formula_documents_its_formula() -> None:
    undocumented = [str(key) for key, fn in OPERATOR_FORMULAS.items()
                    if not (fn.__doc__ or "").strip()]
    assert not undocumented


def test_every_requested_operator_exists_in_this_torch() -> None:
    # the families skip names a torch build lacks; on the pinned torch there are none
    assert UNAVAILABLE == []


def test_unknown_operator_is_missing() -> None:
    assert lookup(aten.special_chebyshev_polynomial_t.default) is MISSING


def test_overloads_with_different_positions_are_registered_one_by_one() -> None:
    # lstm.input and lstm.data put different arguments at position 1
    assert aten.lstm not in OPERATOR_FORMULAS
    assert aten.lstm.input in OPERATOR_FORMULAS and aten.lstm.data in OPERATOR_FORMULAS
    assert aten.mm in OPERATOR_FORMULAS  # one schema layout: the packet


def test_arguments_are_read_by_name_whether_positional_or_keyword() -> None:
    # add.Scalar takes alpha positionally, add.Tensor by keyword: 6 * (add + multiply)
    v = torch.randn(2, 3)
    assert formula_count(aten.add.Scalar, v, 2.0, 3, out=v) == (12, 0)
    assert formula_count(aten.add.Tensor, v, v, alpha=3, out=v) == (12, 0)
    assert formula_count(aten.add.Tensor, v, v, out=v) == (6, 0)  # default alpha 1


def test_a_composite_counted_as_its_decomposition_is_unknown_when_a_part_has_no_formula() -> None:
    kron = (torch.randn(2, 2), torch.randn(3, 3))
    # under inference_mode kron arrives whole, counted as its decomposition: 36 multiplies
    assert count(torch.kron, *kron, mode="inference_mode") == (36, 0)
    mul = torch.ops.aten.mul
    formula = OPERATOR_FORMULAS[mul]
    unregister_operator(mul)
    try:
        counter = counter_of(torch.kron, *kron, mode="inference_mode")
        # its multiplies have no formula now: the kron is unknown and listed, never the 0 of
        # the parts that are left
        assert dict(counter.missing) == {"aten.kron": 1} and counter.ops == 0
        assert dict(counter_of(torch.kron, *kron).missing) == {"aten.mul": 1}  # as no_grad
    finally:
        register_operator(mul)(formula)


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_selections_that_compute_on_indices_count_it_on_every_path(mode: str) -> None:
    # take_along_dim wraps each of its 25 indices into range (a remainder each): 25
    # (inference_mode, where it arrives whole, counted it free: 0)
    source, indices = torch.randn(5, 5), torch.randint(0, 5, (5, 5))
    assert count(torch.take_along_dim, source, indices, 1, mode=mode) == (25, 0)
    # combinations of 4 values in pairs: a 4 x 4 comparison of index pairs and its mask
    # product: 16 + 16 = 32 (0 under inference_mode)
    assert count(lambda x: torch.combinations(x, 2), torch.randn(4), mode=mode) == (32, 0)
