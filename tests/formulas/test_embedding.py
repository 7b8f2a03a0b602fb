"""Embedding and EmbeddingBag formulas against hand arithmetic."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from moduleprofiler.formulas.embedding import embedding_bag_ops, embedding_ops
from tests.conftest import macs_of, ops_of

IDS = torch.tensor([[1, 2, 2], [3, 1, 5]])
FLAT = torch.tensor([1, 2, 3, 4, 5, 6, 7])
OFFSETS = torch.tensor([0, 2, 2, 5])  # bags of 2, 0, 3 and 2 entries


def test_embedding_lookup_is_free() -> None:
    module = nn.Embedding(10, 4)
    assert ops_of(module, IDS) == 0
    assert macs_of(module, IDS) == 0


def test_embedding_max_norm_counts_the_norm_check() -> None:
    # distinct rows {1, 2, 3, 5} = 4; per row norm 2*4 (4 powers, 3 adds, 1 root) + 1 compare = 9
    module = nn.Embedding(10, 4, max_norm=1.0)
    assert ops_of(module, IDS) == 36
    assert macs_of(module, IDS) == 0


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("sum", 16),  # 2 bags of 3: (3-1)*4 adds each -> 16
        ("mean", 24),  # 16 adds + 4 divisions per bag -> 24
        ("max", 16),  # (3-1)*4 comparisons per bag -> 16
    ],
)
def test_embedding_bag_2d_input(mode: str, expected: int) -> None:
    module = nn.EmbeddingBag(10, 4, mode=mode)
    assert ops_of(module, IDS) == expected
    assert macs_of(module, IDS) == 0


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("sum", 16),  # bags 2,0,3,2: (1+2+1)*4 = 16 adds; the empty bag costs nothing
        ("mean", 28),  # 16 adds + 3 non-empty bags * 4 divisions = 28
        ("max", 16),  # 16 comparisons
    ],
)
def test_embedding_bag_offsets(mode: str, expected: int) -> None:
    assert ops_of(nn.EmbeddingBag(10, 4, mode=mode), FLAT, OFFSETS) == expected


def test_embedding_bag_include_last_offset() -> None:
    # offsets [0,2,2,5,7] describe the same 4 bags: 16 adds as above
    module = nn.EmbeddingBag(10, 4, mode="sum", include_last_offset=True)
    assert ops_of(module, FLAT, torch.tensor([0, 2, 2, 5, 7])) == 16


def test_embedding_bag_single_offset_is_one_bag() -> None:
    # one bag of 7: 6*4 = 24 adds
    assert ops_of(nn.EmbeddingBag(10, 4, mode="sum"), FLAT, torch.tensor([0])) == 24


def test_embedding_bag_per_sample_weights() -> None:
    # 16 adds + 7 entries * 4 multiplies = 44
    module = nn.EmbeddingBag(10, 4, mode="sum")
    weights = torch.rand(7)
    assert ops_of(module, FLAT, OFFSETS, weights) == 44
    assert macs_of(module, FLAT, OFFSETS, weights) == 0


def test_embedding_bag_padding_idx_is_left_out_of_the_reduction() -> None:
    module = nn.EmbeddingBag(10, 4, mode="mean", padding_idx=0)
    ids = torch.tensor([[1, 0, 2], [0, 0, 0]])
    # PyTorch's own semantics: bag 0 averages rows 1 and 2 only, bag 1 is empty (zeros)
    out = module(ids).detach()
    torch.testing.assert_close(out[0], (module.weight[1] + module.weight[2]).detach() / 2)
    assert not out[1].any()
    # bag 0: 1*4 adds + 4 divisions = 8; bag 1 costs nothing
    assert ops_of(module, ids) == 8


def test_embedding_bag_padding_idx_with_offsets() -> None:
    # bags [0,1] and [2,0,3]: 1 and 2 kept entries; sum: (0 + 1)*4 = 4 adds
    module = nn.EmbeddingBag(10, 4, mode="sum", padding_idx=0)
    assert ops_of(module, torch.tensor([0, 1, 2, 0, 3]), torch.tensor([0, 2])) == 4


def test_embedding_bag_max_norm() -> None:
    # 16 adds (2 bags of 3) + distinct rows {1,2,3,5} * (2*4 + 1) = 16 + 36 = 52
    module = nn.EmbeddingBag(10, 4, mode="sum", max_norm=1.0)
    assert ops_of(module, IDS) == 52


def test_embedding_bag_empty_input() -> None:
    # no entries, three empty bags: nothing to reduce
    module = nn.EmbeddingBag(10, 4, mode="mean")
    empty = torch.tensor([], dtype=torch.long)
    assert ops_of(module, empty, torch.tensor([0, 0, 0])) == 0


def test_embedding_max_norm_any_index_shape() -> None:
    # 3-D indices, distinct {0, 1, 4} -> 3*(2*2 + 1) = 15; a 0-D index: 1*5 = 5
    module = nn.Embedding(5, 2, max_norm=2.0)
    assert ops_of(module, torch.tensor([[[0, 1], [1, 4]], [[4, 4], [0, 0]]])) == 15
    assert ops_of(module, torch.tensor(3)) == 5


class _OperatorRecorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


def test_formulas_dispatch_no_torch_operator() -> None:
    # The formulas read indices with tolist(), so a profiler that counts the operators run
    # around a module never sees the formula's own bookkeeping.
    module = nn.EmbeddingBag(10, 4, mode="sum", padding_idx=0, max_norm=1.0)
    ids = torch.tensor([0, 1, 2, 0, 3])
    offsets = torch.tensor([0, 2])
    lookup = nn.Embedding(10, 4, max_norm=1.0)
    out = module(ids, offsets)
    with _OperatorRecorder() as recorder:
        # bags [0,1], [2,0,3]: kept 1 and 2 -> 1*4 = 4 adds; distinct {0,1,2,3}*(2*4+1) = 36
        assert embedding_bag_ops(module, (ids, offsets, None), out) == 40
        assert embedding_ops(lookup, (ids,), out) == 36
    assert recorder.seen == []


def test_lookups_on_the_meta_device_take_the_common_case() -> None:
    # meta indices have no values: every index distinct, no padding, no empty bag (as the
    # operators do). Embedding(max_norm) on 6 indices: 6 * (2*4 + 1) = 54 (36 on real ids)
    with torch.device("meta"):
        embedding = nn.Embedding(10, 4, max_norm=1.0)
        bag = nn.EmbeddingBag(10, 4, mode="mean", padding_idx=0)
    assert ops_of(embedding, IDS.to("meta")) == 54
    # 7 entries in 4 bags (offsets 0, 2, 2, 5: one empty on real ids): 4 * (7 - 4) = 12 adds,
    # 4 * 4 = 16 divisions: 28
    assert ops_of(bag, FLAT.to("meta"), OFFSETS.to("meta")) == 28
    # a 2-D input: 2 bags of 3, padding not seen: 4 * (6 - 2) + 4 * 2 = 24
    assert ops_of(bag, IDS.to("meta")) == 24


def test_embedding_bag_counts_a_replaced_weight() -> None:
    module = nn.EmbeddingBag(10, 3, mode="sum")
    module.weight = nn.Parameter(torch.randn(10, 5))  # embedding_dim still says 3
    indices, offsets = torch.tensor([1, 2, 3, 4]), torch.tensor([0, 2])
    # two bags of 2 rows of 5: 5 * (4 - 2) = 10 adds (embedding_dim gave 3 * 2 = 6)
    assert ops_of(module, indices, offsets) == 10
