"""Transformer layers and stacks: own work only (residual adds, functional activation).

Tiny config throughout: d_model=8, nhead=2, dim_feedforward=16, dropout=0, sequences of 3,
batch 2, so every (sequence, batch) tensor has 6 rows and 48 elements. Component counts used
below (the children's own formulas):

* self-attention (MultiheadAttention, need_weights=False): 3744 (see test_attention.py)
* linear1 8->16: 6 rows * 16 * (2*8 - 1 + 1) = 1536; linear2 16->8: 6 * 8 * (2*16) = 1536
* LayerNorm(8): 6 rows * (7*8 + 4) = 360 (0.0.4's affine LayerNorm count)
* Dropout: 0
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from moduleprofiler import ModuleProfiler
from tests.conftest import decomposed_flops, profile_of

D_MODEL, NHEAD, FF = 8, 2, 16

# Encoder layer total with ReLU given as a function:
#   self-attention 3744 + linear1 1536 + linear2 1536 + 2 norms 720
#   + own: 2 residual adds * 48 + ReLU 6 rows * 16 = 96 + 96 = 192
#   = 3744 + 3072 + 720 + 192 = 7728
ENCODER_LAYER_OPS = 7728


def encoder_layer(**kwargs: Any) -> nn.TransformerEncoderLayer:
    return nn.TransformerEncoderLayer(D_MODEL, NHEAD, FF, dropout=0.0, **kwargs)


def sequence(length: int = 3, batch_first: bool = False) -> torch.Tensor:
    return torch.randn(2, length, D_MODEL) if batch_first else torch.randn(length, 2, D_MODEL)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
def test_encoder_layer_total_ops_is_the_sum_of_its_parts(norm_first: bool,
                                                         batch_first: bool) -> None:
    layer = encoder_layer(norm_first=norm_first, batch_first=batch_first)
    profile = profile_of(layer, sequence(batch_first=batch_first))
    assert profile.records[0].self_ops == 192  # own: 2*48 residual adds + 96 ReLUs
    assert profile.complete
    assert profile.total_ops == ENCODER_LAYER_OPS == 7728


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch_first", [False, True])
def test_encoder_layer_total_macs_equal_decomposed_flop_counter(norm_first: bool,
                                                                batch_first: bool) -> None:
    # The profiler's hooks force the layer's unfused path; FlopCounterMode sees the same work
    # only with grad on and the math SDPA backend (else the fused kernels count 0).
    layer = encoder_layer(norm_first=norm_first, batch_first=batch_first)
    x = sequence(batch_first=batch_first)
    profile = profile_of(layer, x)
    assert profile.records[0].self_macs == 0
    # macs: attention 1824 + linear1 6*8*16 = 768 + linear2 768 = 3360
    assert profile.total_macs == 3360
    assert profile.total_flops == decomposed_flops(lambda: layer(x))


def test_gelu_as_function_or_module_counts_the_same() -> None:
    # "gelu" -> F.gelu, 5 ops per element (erf form, as nn.GELU): own 96 + 96*5 = 576
    # total 7728 - 192 + 576 = 8112
    by_name = profile_of(encoder_layer(activation="gelu"), sequence())
    assert by_name.records[0].self_ops == 576
    assert by_name.total_ops == 8112
    # nn.GELU() is a child counted by its own formula (480); the layer keeps the 96 adds
    as_module = profile_of(encoder_layer(activation=nn.GELU()), sequence())
    assert as_module.records[0].self_ops == 96
    assert as_module.total_ops == 8112


def test_relu_function_passed_directly() -> None:
    assert profile_of(encoder_layer(activation=F.relu), sequence()).records[0].self_ops == 192


def test_unknown_activation_function_leaves_the_layer_to_operator_accounting() -> None:
    # The formula declines (None) rather than miss the activation's work ...
    layer, x = encoder_layer(activation=torch.sigmoid), sequence()
    alone = ModuleProfiler().profile(layer, x, operators=False)
    assert alone.records[0].self_ops is None
    assert not alone.complete
    # ... so, with operator accounting on, the layer's own operators are counted instead:
    # 2 residual adds * 48 + sigmoid 6 rows * 16 * 3 = 96 + 288 = 384
    counted = profile_of(layer, x)
    assert (counted.records[0].self_ops, counted.records[0].ops_source) == (384, "operator")
    assert counted.complete
    assert counted.total_ops == ENCODER_LAYER_OPS - 192 + 384 == 7920


def _without_layer_formula() -> ModuleProfiler:
    profiler = ModuleProfiler()
    del profiler.ops_fn_map[nn.TransformerEncoderLayer]
    del profiler.macs_fn_map[nn.TransformerEncoderLayer]
    return profiler


def test_silu_function_is_counted_not_lost() -> None:
    """Issue 23 item 1: with ``activation=F.silu`` the layer's own work was a silent 0 and the
    total, "complete", was lower than with ReLU."""
    x = torch.randn(2, 5, 16)  # 10 rows of 16: 160 elements
    relu = profile_of(nn.TransformerEncoderLayer(16, 2, 32, activation=F.relu,
                                                 batch_first=True), x)
    silu_layer = nn.TransformerEncoderLayer(16, 2, 32, activation=F.silu, batch_first=True)
    silu = profile_of(silu_layer, x)
    # ReLU, by the formula: 2 residual adds * 160 + 10 rows * 32 * 1 = 640
    assert (relu.records[0].self_ops, relu.records[0].ops_source) == (640, "formula")
    # SiLU, by its operators: 2 * 160 + 10 * 32 * 4 (x * sigmoid(x)) = 320 + 1280 = 1600
    assert (silu.records[0].self_ops, silu.records[0].ops_source) == (1600, "operator")
    assert silu.complete
    # the children are the same: the totals differ by 10 * 32 * (4 - 1) = 960
    assert relu.total_ops == 47400
    assert silu.total_ops == relu.total_ops + 960 == 48360
    # the independent count: the same layer with no formula at all, counted by its operators
    unregistered = _without_layer_formula().profile(silu_layer, x)
    assert unregistered.records[0].self_ops == 1600
    assert unregistered.total_ops == silu.total_ops
    # and the MACs (matmuls only) agree with FlopCounterMode
    assert silu.total_flops == decomposed_flops(lambda: silu_layer(x))


def test_decoder_layer() -> None:
    # tgt (3, 2, 8), memory (4, 2, 8). Cross-attention with L=3, S=4 (need_weights=False):
    #   Q 6*8*16 = 768; K, V 8*8*16 = 1024 each; scale 48; scores 12*4*7 = 336
    #   softmax 12*(4*4-1) = 180; A·V 12*4*(2*4-1) = 336; out 768 -> 4484
    # own: 3 residual adds * 48 + ReLU 96 = 240
    # total 3744 + 4484 + 1536 + 1536 + 3 norms 1080 + 240 = 12620
    layer = nn.TransformerDecoderLayer(D_MODEL, NHEAD, FF, dropout=0.0)
    tgt, memory = sequence(3), sequence(4)
    profile = profile_of(layer, tgt, memory)
    assert profile.records[0].self_ops == 240
    assert profile.total_ops == 12620
    assert profile.total_flops == decomposed_flops(lambda: layer(tgt, memory))


def test_encoder_stack_counts_only_its_children() -> None:
    # 2 layers * 7728 + final LayerNorm 360 = 15816; the stack itself: 0
    stack = nn.TransformerEncoder(encoder_layer(), 2, norm=nn.LayerNorm(D_MODEL),
                                  enable_nested_tensor=False)
    x = sequence()
    profile = profile_of(stack, x)
    assert (profile.records[0].self_ops, profile.records[0].self_macs) == (0, 0)
    assert profile.total_ops == 15816
    assert profile.total_flops == decomposed_flops(lambda: stack(x))


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
def test_transformer() -> None:
    # src = tgt = (3, 2, 8), one encoder and one decoder layer, final norms on both stacks:
    #   encoder 7728 + norm 360; decoder: self-attention 3744 + cross-attention (S=3) 3744
    #   + linears 3072 + 3 norms 1080 + own 240 = 11880, + norm 360
    #   total 7728 + 360 + 11880 + 360 = 20328
    model = nn.Transformer(D_MODEL, NHEAD, 1, 1, FF, dropout=0.0)
    src, tgt = sequence(), sequence()
    profile = profile_of(model, src, tgt)
    own = {record.path: record.self_ops for record in profile.records}
    assert own[""] == own["encoder"] == own["decoder"] == 0
    assert profile.total_ops == 20328
    assert profile.total_flops == decomposed_flops(lambda: model(src, tgt))


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_encoder_nested_tensor_path_counts_real_tokens() -> None:
    # eval + no_grad + batch_first + a padding mask: TransformerEncoder hands its layers a
    # nested tensor of the real tokens (lengths 2 and 3 -> 5 rows, 40 elements).
    # self-attention per sequence of length l: 510*l + 38*l² -> 1172 + 1872 = 3044
    # layer own: 2 residual adds * 40 + ReLU 5*16 = 160
    stack = nn.TransformerEncoder(encoder_layer(batch_first=True), 1)
    padding = torch.tensor([[False, False, True], [False, False, False]])
    profile = ModuleProfiler().profile(
        stack, {"src": sequence(batch_first=True), "src_key_padding_mask": padding}
    )
    own = {record.path: record.self_ops for record in profile.records}
    assert (own["layers.0"], own["layers.0.self_attn"]) == (160, 3044)
