"""nn.MultiheadAttention formulas against hand arithmetic and a decomposed FlopCounterMode run."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from torch.utils._python_dispatch import TorchDispatchMode

from moduleprofiler import ModuleProfiler, Profile
from moduleprofiler.formulas.attention import (
    multihead_attention_macs,
    multihead_attention_ops,
    softmax_ops,
)
from tests.conftest import decomposed_flops, ops_of, profile_of


def profile_call(module: nn.Module, *args: Any, eval: bool = True, **kwargs: Any) -> Profile:
    """Profile ``module(*args, **kwargs)`` (keyword arguments reach the hooks as kwargs)."""
    return ModuleProfiler().profile(
        module, args, pred_fn=lambda *a: module(*a, **kwargs), eval=eval
    )


# Shared tiny config: N=2, L=S=3, E=8, h=2 heads of d=4, bias on.
#   Q, K, V projections: 3 * rows 6 * 8 * (2*8-1 + 1 bias) = 3 * 768 = 2304
#   scale q: 6 * 8 = 48
#   scores Q·Kᵀ: N*h*L = 12 score rows * S 3 * (2*4 - 1) = 252
#   softmax: 12 * (4*3 - 1) = 132
#   A·V: 12 * d 4 * (2*3 - 1) = 240
#   out projection: 768
#   sum without weight averaging: 2304 + 48 + 252 + 132 + 240 + 768 = 3744
#   head average of returned weights: N*L*S*h = 2*3*3*2 = 36
BASE_OPS = 3744
HEAD_AVERAGE = 36
# macs: projections 2*6*8*8 + 6*8*(8+8) = 1536; Q·Kᵀ and A·V 2 * N*L*S*E = 2*2*3*3*8 = 288
BASE_MACS = 1824


def test_self_attention_with_weights() -> None:
    # default need_weights=True, average_attn_weights=True: 3744 + 36 = 3780
    x = torch.randn(3, 2, 8)
    assert ops_of(nn.MultiheadAttention(8, 2), x, x, x) == BASE_OPS + HEAD_AVERAGE == 3780


def test_need_weights_off_and_unaveraged_weights_skip_the_average() -> None:
    mha = nn.MultiheadAttention(8, 2)
    x = torch.randn(3, 2, 8)
    assert profile_call(mha, x, x, x, need_weights=False).records[0].self_ops == 3744
    assert profile_call(mha, x, x, x, average_attn_weights=False).records[0].self_ops == 3744


def test_macs() -> None:
    x = torch.randn(3, 2, 8)
    record = profile_of(nn.MultiheadAttention(8, 2), x, x, x).records[0]
    assert record.self_macs == BASE_MACS == 1824


@pytest.mark.parametrize("batch_first", [False, True])
def test_batch_first_gives_the_same_count(batch_first: bool) -> None:
    x = torch.randn(2, 3, 8)  # (N, L, E) or (L=2, N=3, E) -- transpose so N=2, L=3 either way
    x = x if batch_first else x.transpose(0, 1)
    mha = nn.MultiheadAttention(8, 2, batch_first=batch_first)
    assert ops_of(mha, x, x, x) == 3780


def test_masks_add_one_op_per_score_each() -> None:
    # each mask: one add on each of the N*h*L*S = 2*2*3*3 = 36 scores
    mha = nn.MultiheadAttention(8, 2)
    x = torch.randn(3, 2, 8)
    padding = torch.tensor([[False, False, True], [False, False, False]])
    causal = torch.ones(3, 3, dtype=torch.bool).triu(1)
    kw: dict[str, Any] = {"need_weights": False}
    padded = profile_call(mha, x, x, x, key_padding_mask=padding, **kw)
    assert padded.records[0].self_ops == 3744 + 36
    assert profile_call(mha, x, x, x, attn_mask=causal, **kw).records[0].self_ops == 3744 + 36
    both = profile_call(mha, x, x, x, attn_mask=causal, key_padding_mask=padding, **kw)
    assert both.records[0].self_ops == 3744 + 72


def test_cross_attention_with_kdim_vdim_and_other_source_length() -> None:
    # N=2, L=3, S=4, E=8, h=2, d=4, kdim=5, vdim=7, need_weights=False
    #   Q: 6 * 8 * 16 = 768; K: 8 * 8 * (2*5-1+1) = 640; V: 8 * 8 * (2*7-1+1) = 896
    #   scale 48; scores 12 * 4 * 7 = 336; softmax 12 * (4*4-1) = 180; A·V 12 * 4 * 7 = 336
    #   out 768; total 768 + 640 + 896 + 48 + 336 + 180 + 336 + 768 = 3972
    # macs: 6*8*8 + 8*8*5 + 8*8*7 + 2*2*3*4*8 + 6*8*8 = 384 + 320 + 448 + 384 + 384 = 1920
    mha = nn.MultiheadAttention(8, 2, kdim=5, vdim=7)
    q, k, v = torch.randn(3, 2, 8), torch.randn(4, 2, 5), torch.randn(4, 2, 7)
    record = profile_call(mha, q, k, v, need_weights=False).records[0]
    assert (record.self_ops, record.self_macs) == (3972, 1920)


def test_weight_dropout_counts_in_training_only() -> None:
    # as nn.Dropout in training: 3 ops per attention weight, 3 * N*h*L*S = 3 * 36 = 108
    mha, x = nn.MultiheadAttention(8, 2, dropout=0.1), torch.randn(3, 2, 8)
    assert profile_call(mha, x, x, x, need_weights=False).records[0].self_ops == 3744
    assert profile_call(mha, x, x, x, eval=False, need_weights=False).records[0].self_ops == 3852


def test_no_bias() -> None:
    # every projection loses rows * E bias adds: 4 * 6 * 8 = 192 fewer; 3744 - 192 = 3552
    x = torch.randn(3, 2, 8)
    mha = nn.MultiheadAttention(8, 2, bias=False)
    assert profile_call(mha, x, x, x, need_weights=False).records[0].self_ops == 3552


def test_bias_kv_and_zero_attn_add_key_rows() -> None:
    # S' = 3 + 1 (bias_k) + 1 (zero key) = 5 keys; projections still run on S = 3 rows
    #   projections 2304 + out 768; scale 48; scores 12 * 5 * 7 = 420
    #   softmax 12 * (4*5 - 1) = 228; A·V 12 * 4 * (2*5 - 1) = 432; head average 2*3*5*2 = 60
    #   total 2304 + 48 + 420 + 228 + 432 + 768 + 60 = 4260
    # macs: 1536 + 2 * 2*3*5*8 = 1536 + 480 = 2016
    mha = nn.MultiheadAttention(8, 2, add_bias_kv=True, add_zero_attn=True)
    x = torch.randn(3, 2, 8)
    record = profile_of(mha, x, x, x).records[0]
    assert (record.self_ops, record.self_macs) == (4260, 2016)


def test_unbatched_input_is_batch_one() -> None:
    # N=1, L=S=3: Q, K, V, out 4 * 3*8*16 = 1536; scale 24; scores 6 * 3 * 7 = 126
    #   softmax 6 * 11 = 66; A·V 6 * 4 * 5 = 120; head average 3*3*2 = 18
    #   total 1536 + 24 + 126 + 66 + 120 + 18 = 1890 (half of 3780)
    x = torch.randn(3, 8)
    for batch_first in (False, True):  # batch_first is ignored for unbatched input
        assert ops_of(nn.MultiheadAttention(8, 2, batch_first=batch_first), x, x, x) == 1890


def test_an_empty_key_sequence_costs_the_query_side_only() -> None:
    # L = 3, N = 2, E = 8, S = 0 keys: Q projection 6*8*(2*8 - 1 + 1) = 768, scale 6*8 = 48,
    # out projection 768; scores, softmax, A·V and the head average have nothing to compute:
    # 768 + 48 + 768 = 1584 (a softmax over no keys is not -1 op per row)
    module = nn.MultiheadAttention(8, 2)
    q, empty = torch.randn(3, 2, 8), torch.randn(0, 2, 8)
    profile = profile_of(module, q, empty, empty)
    assert profile.records[0].self_ops == 1584
    # macs: the two projections of the queries' 6 rows, 2 * 6*8*8 = 768
    assert profile.records[0].self_macs == 768
    assert decomposed_flops(lambda: module(q, empty, empty)) == 2 * 768


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype stage")
def test_nested_query_counts_each_sequence_at_its_length() -> None:
    # nn.TransformerEncoder hands its layers nested tensors (fused MHA path only). Per sequence
    # of length l (N=1, L=S=l), with weights averaged:
    #   4 projections 4 * l*8*16 = 512*l; scale 8*l; scores 2*l*l*7 = 14*l²
    #   softmax 2*l*(4*l - 1); A·V 2*l*4*(2*l - 1); average l*l*2
    #   l=2: 1024 + 16 + 56 + 28 + 48 + 8 = 1180; l=3: 1536 + 24 + 126 + 66 + 120 + 18 = 1890
    # macs per sequence: 4*l*64 + 2*l*l*8: l=2 512 + 64 = 576; l=3 768 + 144 = 912
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.nested.nested_tensor([torch.randn(2, 8), torch.randn(3, 8)])
    with torch.no_grad():
        out = mha(x, x, x)
    assert multihead_attention_ops(mha, (x, x, x), out) == 1180 + 1890
    assert multihead_attention_macs(mha, (x, x, x), out) == 576 + 912


def test_softmax_ops_matches_nn_softmax_convention() -> None:
    # rows * (4D - 1) = 12 * 11 = 132, as nn.Softmax(dim=-1) on a (12, 3) tensor
    assert softmax_ops(12, 3) == 132
    assert ops_of(nn.Softmax(dim=-1), torch.randn(12, 3)) == 132


class _OpRecorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.names.add(func.__name__)
        return func(*args, **(kwargs or {}))


def test_fast_path_and_decomposed_path_give_identical_profiles() -> None:
    mha = nn.MultiheadAttention(8, 2, batch_first=True, dropout=0.0)
    x = torch.randn(2, 3, 8)
    with _OpRecorder() as fused:
        fast = profile_of(mha, x, x, x)  # eval + no_grad + batch-first self-attention
    with _OpRecorder() as decomposed:
        slow = profile_of(mha, x, x, x, eval=False)  # training mode blocks the fast path
    assert "_native_multi_head_attention.default" in fused.names
    assert "_native_multi_head_attention.default" not in decomposed.names
    assert (fast.total_ops, fast.total_macs) == (slow.total_ops, slow.total_macs) == (3780, 1824)


_WEIGHTS = ("none", "averaged", "per_head")
# Every combination of the shape options; the weights mode cycles so each appears ~11 times.
_VARIANTS = [
    dict(zip(("batch_first", "kv_dims", "bias", "extra_keys", "masks"), combo),
         weights=_WEIGHTS[index % 3])
    for index, combo in enumerate(
        itertools.product([False, True], [None, (5, 7)], [True, False], [False, True],
                          [False, True])
    )
]


@pytest.mark.parametrize("variant", _VARIANTS, ids=lambda v: "-".join(f"{v[k]}" for k in v))
def test_two_macs_equal_decomposed_flop_counter(variant: dict[str, Any]) -> None:
    n, tgt, src, embed = 2, 3, 4, 8
    kdim, vdim = variant["kv_dims"] or (embed, embed)
    mha = nn.MultiheadAttention(
        embed, 2, bias=variant["bias"], add_bias_kv=variant["extra_keys"],
        add_zero_attn=variant["extra_keys"], kdim=kdim, vdim=vdim,
        batch_first=variant["batch_first"],
    )

    def seq(length: int, features: int) -> Tensor:
        shape = (n, length, features) if variant["batch_first"] else (length, n, features)
        return torch.randn(shape)

    q, k, v = seq(tgt, embed), seq(src, kdim), seq(src, vdim)
    kwargs: dict[str, Any] = {
        "need_weights": variant["weights"] != "none",
        "average_attn_weights": variant["weights"] == "averaged",
    }
    if variant["masks"]:
        kwargs["key_padding_mask"] = torch.zeros(n, src, dtype=torch.bool)
        kwargs["attn_mask"] = torch.zeros(tgt, src, dtype=torch.bool)
    profile = profile_call(mha, q, k, v, **kwargs)
    assert profile.total_flops == decomposed_flops(lambda: mha(q, k, v, **kwargs))
