"""Attention kernels: SDPA variants, fused multi-head attention and the fused encoder layer."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from tests.conftest import profile_of
from tests.operators.helpers import count, counter_of, fcm_flops, formula_count, on_meta

aten = torch.ops.aten

# B=2, H=4, L=3, S=5, E=Ev=8: 8 (batch x head) rows, 120 scores.
#   scale   8*(3 + 5)*8      = 512  (queries and keys, as the math reference)
#   Q·Kᵀ    120*(2*8 - 1)    = 1800
#   softmax 24*(4*5 - 1)     = 456
#   A·V     8*3*8*(2*5 - 1)  = 1728
#   total 4496; macs 120*8 + 120*8 = 1920; a mask adds 120
PLAIN = (4496, 1920)
MASKED = (4616, 1920)


def qkv(heads_kv: int = 4, v_dim: int = 8) -> tuple[torch.Tensor, ...]:
    return (torch.randn(2, 4, 3, 8), torch.randn(2, heads_kv, 5, 8),
            torch.randn(2, heads_kv, 5, v_dim))


SDPA_CASES: list[tuple[dict[str, Any], tuple[int, int]]] = [
    ({}, PLAIN),
    ({"attn_mask": torch.randn(3, 5)}, MASKED),
    ({"attn_mask": torch.rand(3, 5) > 0.5}, MASKED),  # bool -> float: a free `where`
    ({"is_causal": True}, MASKED),  # the causal mask is added to every score
    ({"scale": 0.5}, PLAIN),
]


@pytest.mark.parametrize(("kwargs", "expected"), SDPA_CASES)
@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_sdpa(kwargs: dict[str, Any], expected: tuple[int, int], mode: str) -> None:
    # no_grad: aten._scaled_dot_product_flash_attention_for_cpu; inference_mode: the composite
    assert count(F.scaled_dot_product_attention, *qkv(), **kwargs, mode=mode) == expected


@pytest.mark.parametrize(("kwargs", "expected"), SDPA_CASES)
def test_sdpa_meta_math_path_counts_the_same(kwargs: dict[str, Any],
                                             expected: tuple[int, int]) -> None:
    # On meta SDPA runs the math reference, decomposed: mul, mul, bmm, add, _safe_softmax, bmm.
    counter = counter_of(F.scaled_dot_product_attention, *on_meta((*qkv(), kwargs))[:3],
                         **on_meta(kwargs))
    assert counter.calls["aten.bmm.default"] == 2
    assert (counter.ops, counter.macs) == expected


def test_sdpa_macs_match_flop_counter_on_the_math_path() -> None:
    # FlopCounterMode is blind to the CPU flash kernel; on the math backend it sees two bmm.
    with sdpa_kernel(SDPBackend.MATH):
        assert fcm_flops(F.scaled_dot_product_attention, *qkv()) == 2 * PLAIN[1]


def test_sdpa_grouped_query_attention() -> None:
    # 2 key/value heads serve 4 query heads; keys are scaled after the expansion: as PLAIN
    q, k, v = qkv(heads_kv=2)
    assert count(F.scaled_dot_product_attention, q, k, v, enable_gqa=True) == PLAIN
    meta = on_meta((q, k, v))
    assert count(F.scaled_dot_product_attention, *meta, enable_gqa=True) == PLAIN


def test_sdpa_keys_broadcast_over_the_batch() -> None:
    # keys and values of batch 1 serve both queries: the keys are scaled once, 4*5*8 = 160
    # instead of 320: 4496 - 160 = 4336 (CPU and meta alike)
    q, k, v = qkv()
    k, v = k[:1], v[:1]
    assert count(F.scaled_dot_product_attention, q, k, v) == (4336, 1920)
    assert count(F.scaled_dot_product_attention, *on_meta((q, k, v))) == (4336, 1920)


def test_sdpa_value_dim() -> None:
    # Ev = 6: A·V 8*3*6*9 = 1296; total 512 + 1800 + 456 + 1296 = 4064; macs 960 + 720
    q, k, v = qkv(v_dim=6)
    assert count(F.scaled_dot_product_attention, q, k, v) == (4064, 1680)


def test_sdpa_dropout() -> None:
    # + 3 per score (mask draw, scale, multiply, as native_dropout): 4496 + 360
    q, k, v = qkv()
    assert count(F.scaled_dot_product_attention, q, k, v, dropout_p=0.5) == (4856, 1920)


def test_sdpa_math_op() -> None:
    q, k, v = qkv()
    math = aten._scaled_dot_product_attention_math.default
    assert count(math, q, k, v) == PLAIN  # decomposed
    assert count(math, q, k, v, mode="inference_mode") == PLAIN  # whole


def test_cuda_sdpa_kernels() -> None:
    # The CUDA kernels take (B, H, L, E) like SDPA and count the same.
    q, k, v = qkv()
    bias = torch.randn(3, 5)
    assert formula_count(aten._scaled_dot_product_flash_attention.default, q, k, v) == PLAIN
    assert formula_count(aten._scaled_dot_product_flash_attention.default, q, k, v, 0.0,
                         True) == MASKED
    efficient = aten._scaled_dot_product_efficient_attention.default
    assert formula_count(efficient, q, k, v, None, False) == PLAIN
    assert formula_count(efficient, q, k, v, bias, False) == MASKED
    cudnn = aten._scaled_dot_product_cudnn_attention.default
    assert formula_count(cudnn, q, k, v, bias, False) == MASKED


def test_flash_attention_forward_dense_and_varlen() -> None:
    flash = aten._flash_attention_forward.default
    # dense (B, L, H, E): the PLAIN problem
    q, k, v = (t.transpose(1, 2) for t in qkv())
    assert formula_count(flash, q, k, v, None, None, 3, 5, 0.0, False, False) == PLAIN
    # packed: 2 heads, E 4, sequences (L, S) = (3, 4) and (5, 6)
    #   (3, 4): scale 2*7*4 = 56, Q·Kᵀ 24*7 = 168, softmax 6*15 = 90, A·V 2*3*4*7 = 168 -> 482
    #   (5, 6): scale 2*11*4 = 88, Q·Kᵀ 60*7 = 420, softmax 10*23 = 230, A·V 2*5*4*11 = 440
    #   -> 1178; total 1660; macs 24*8 + 60*8 = 672
    q, k, v = torch.randn(8, 2, 4), torch.randn(10, 2, 4), torch.randn(10, 2, 4)
    cum_q, cum_k = torch.tensor([0, 3, 8]), torch.tensor([0, 4, 10])
    assert formula_count(flash, q, k, v, cum_q, cum_k, 5, 6, 0.0, False, False) == (1660, 672)
    # on meta the lengths are unknown: every sequence counts at the maximum (5, 6): 2*1178
    meta = on_meta((q, k, v, cum_q, cum_k))
    assert formula_count(flash, *meta, 5, 6, 0.0, False, False) == (2356, 960)
    efficient = aten._efficient_attention_forward.default
    assert formula_count(efficient, q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), None,
                         cum_q, cum_k, 5, 6, 0.0, 0) == (1660, 672)
    # custom_mask_type 1 (causal): + one add per score, 24 + 60
    assert formula_count(efficient, q.unsqueeze(0), k.unsqueeze(0), v.unsqueeze(0), None,
                         cum_q, cum_k, 5, 6, 0.0, 1) == (1744, 672)


# -- nn.MultiheadAttention's fused kernel ------------------------------------------------------

# N=2, L=S=5, E=16, 2 heads of 8 (self-attention):
#   projections 4*10*16*(2*16) = 20480; q scale 160; Q·Kᵀ 100*15 = 1500; softmax 20*19 = 380;
#   A·V 20*8*9 = 1440 -> 23960; macs 4*10*16*16 + 2*100*8 = 11840
#   averaged weights: + N*L*S*h = 100; each mask: + 100

@pytest.mark.parametrize(
    ("kwargs", "expected_ops"),
    [
        ({"need_weights": False}, 23960),
        ({}, 24060),  # need_weights=True, averaged over heads
        ({"average_attn_weights": False}, 23960),
        ({"need_weights": False, "key_padding_mask": torch.tensor([[False] * 5,
                                                                   [False] * 3 + [True] * 2])},
         24060),
    ],
)
def test_native_multi_head_attention_is_module_formula(kwargs: dict[str, Any],
                                                       expected_ops: int) -> None:
    mha, x = nn.MultiheadAttention(16, 2, batch_first=True).eval(), torch.randn(2, 5, 16)
    counter = counter_of(mha, x, x, x, **kwargs)
    assert counter.calls["aten._native_multi_head_attention.default"] == 1
    assert (counter.ops, counter.macs) == (expected_ops, 11840)
    module = profile_of(mha, x, x, x, kwargs.get("key_padding_mask"),
                        kwargs.get("need_weights", True), None,
                        kwargs.get("average_attn_weights", True))
    assert (module.total_ops, module.total_macs) == (expected_ops, 11840)


# -- nn.TransformerEncoderLayer's fused kernel -------------------------------------------------

# One layer, N=2, L=5, E=16, 2 heads, dim_ff 32: attention 23960 (above), 2 LayerNorms
# 2*10*(7*16 + 4) = 2320, linear1 10*32*32 = 10240, linear2 10*16*64 = 10240, ReLU 320,
# residuals 2*160 = 320 -> 47400; macs 11840 + 2*10*16*32 = 22080. GELU: 5*320 instead of 320.

@pytest.mark.parametrize(
    ("options", "expected_ops"),
    [({}, 47400), ({"activation": "gelu"}, 48680), ({"norm_first": True}, 47400)],
)
def test_transformer_encoder_layer_is_sum_of_module_formulas(options: dict[str, Any],
                                                             expected_ops: int) -> None:
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True, **options).eval()
    x = torch.randn(2, 5, 16)
    counter = counter_of(layer, x)
    assert counter.calls["aten._transformer_encoder_layer_fwd.default"] == 1
    assert (counter.ops, counter.macs) == (expected_ops, 22080)
    module = profile_of(layer, x)  # hooked: the layer runs its children, each by its formula
    assert (module.total_ops, module.total_macs) == (expected_ops, 22080)


def test_transformer_encoder_layer_with_padding_mask() -> None:
    # one mask, added to every score: + 100
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True).eval()
    x, mask = torch.randn(2, 5, 16), torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    assert count(layer, x, src_key_padding_mask=mask) == (47500, 22080)
    module = profile_of(layer, x, None, mask)
    assert (module.total_ops, module.total_macs) == (47500, 22080)


def test_nested_encoder_counts_each_sequence() -> None:
    # With a padding mask TransformerEncoder packs the batch into a nested tensor: each sequence
    # costs what it costs alone (lengths 5 and 3); inverting the (2, 5) mask twice costs 20 ops.
    encoder = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 2, enable_nested_tensor=True
    ).eval()
    x, mask = torch.randn(2, 5, 16), torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    nested = count(encoder, x, src_key_padding_mask=mask)
    alone = [count(encoder, x[:1]), count(encoder, x[1:, :3])]
    assert nested == (alone[0][0] + alone[1][0] + 20, alone[0][1] + alone[1][1])


def test_cudnn_attention_backward_counts_as_the_cpu_kernels() -> None:
    # cuDNN's kernel runs on CUDA only: its formula is called directly, against the CPU flash
    # kernel's backward run for real on the same (B, H, L, E) problem. B * H = 4 heads of
    # L = S = 3, E = Ev = 4: 36 scores; dV, dP, dQ, dK 4 products of 36 x 4 = 576 macs; ops
    # 2 * 576 + 4 * 36 (softmax gradient) = 1296
    q, k, v = (torch.randn(2, 2, 3, 4, requires_grad=True) for _ in range(3))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        out = F.scaled_dot_product_attention(q, k, v)
    counter = counter_of(torch.autograd.grad, out.sum(), [q, k, v], mode="grad")
    assert (counter.ops, counter.macs) == (1296, 576)
    grad, lse, empty = torch.ones(2, 2, 3, 4), torch.zeros(2, 2, 3), torch.empty(0)
    assert formula_count(aten._cudnn_attention_backward.default, grad, q, k, v, out, lse, empty,
                         empty, empty, empty, empty, 3, 3, 0.0, False) == (1296, 576)


def test_a_masked_softmax_and_its_gradient_count_as_softmax() -> None:
    # the fast paths' masked softmax (nn.MultiheadAttention / TransformerEncoderLayer in
    # inference): 2 x 3 rows of 4, 6 x (4 x 4 - 1) = 90 ops; the mask is a selection, free
    x = torch.randn(2, 3, 4, requires_grad=True)
    mask = torch.zeros(2, 3, 4, dtype=torch.bool)
    mask[..., -1] = True
    assert count(torch._masked_softmax, x.detach(), mask, -1, 0) == (90, 0)
    # its gradient y * (g - sum(g * y)): 4 per element, 4 x 24 = 96, the softmax's rule
    counter = counter_of(
        lambda: torch.autograd.grad(torch._masked_softmax(x, mask, -1, 0), x,
                                    torch.ones(2, 3, 4)), mode="grad")
    assert not counter.missing and counter.ops == 90 + 96
