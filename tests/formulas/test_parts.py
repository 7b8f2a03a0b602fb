"""A composite module's parts are priced as the profiler prices their layer types: a
profiler's own ``nn.Linear`` formula prices ``nn.MultiheadAttention``'s projections and a
recurrent step's gate products, its own ``nn.Sigmoid`` the gates, its own ``nn.ReLU`` a
transformer layer's activation function; another profiler is not affected."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from moduleprofiler import ModuleProfiler
from moduleprofiler.formulas.parts import Parts


def thousand(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> int:
    """A user's own formula: 1000 a call, whatever the shapes."""
    return 1000


def without_bias(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> int:
    """A user's own Linear convention: rows * out * (2 * in - 1), the bias add not counted."""
    x: Tensor = inputs[0]
    return int(x.shape[:-1].numel()) * int(output.shape[-1]) * (2 * int(x.shape[-1]) - 1)


def own(**entries: Any) -> ModuleProfiler:
    profiler = ModuleProfiler()
    for name, formula in entries.items():
        profiler.ops_fn_map[getattr(nn, name)] = formula
    return profiler


# nn.MultiheadAttention(8, 2) on one sequence of 4 (L = S = 4, N = 1, E = 8, h = 2, d = 4),
# need_weights on (the default), so averaged weights are returned:
#   scale q:       N*L*E = 1*4*8                     =  32
#   scores Q·Kᵀ:   N*h*L * S * (2d - 1) = 8 * 4 * 7  = 224
#   softmax:       8 rows * (4*4 - 1)                = 120
#   A·V:           8 rows * d 4 * (2*4 - 1)          = 224
#   head average:  N*L*S*h = 4*4*2                   =  32
#   without the projections:                           632
#   each projection built in: 4 rows * 8 * (2*8 - 1 + 1 bias) = 512; four of them: 2048
MHA_OWN_WORK = 632
MHA_BUILT_IN = MHA_OWN_WORK + 4 * 512  # 2680


def mha_inputs() -> tuple[Tensor, Tensor, Tensor]:
    x = torch.randn(4, 1, 8)
    return x, x, x


def test_multihead_attention_prices_its_projections_with_a_profilers_linear_formula() -> None:
    mha = nn.MultiheadAttention(8, 2)
    # Q, K, V and out projections at the user's 1000 each: 632 + 4 * 1000 = 4632
    assert own(Linear=thousand).profile(mha, mha_inputs()).total_ops == 4632
    # another profiler, and a new one, still count the built-in 632 + 4 * 512 = 2680
    assert ModuleProfiler().profile(mha, mha_inputs()).total_ops == MHA_BUILT_IN == 2680


def test_the_projections_cost_what_the_profilers_linear_layers_cost() -> None:
    # the user's convention drops the bias add: 4 rows * 8 * (2*8 - 1) = 480 a projection, as
    # for an nn.Linear(8, 8) on the same rows; 632 + 4 * 480 = 2552
    profiler = own(Linear=without_bias)
    x = torch.randn(1, 4, 8)
    assert profiler.profile(nn.Linear(8, 8), x).total_ops == 480
    assert profiler.profile(nn.MultiheadAttention(8, 2), mha_inputs()).total_ops == 2552


def test_multihead_attention_macs_follow_a_profilers_linear_macs() -> None:
    profiler = ModuleProfiler()
    profiler.macs_fn_map[nn.Linear] = lambda module, inputs, output: 100
    # Q·Kᵀ and A·V: 2 * N*L*S*E = 2 * 1*4*4*8 = 256, plus 4 projections at 100: 656
    mha = nn.MultiheadAttention(8, 2)
    assert profiler.profile(mha, mha_inputs()).total_macs == 656
    # built in: 256 + 4 * (4 rows * 8 * 8) = 256 + 1024 = 1280
    assert ModuleProfiler().profile(mha, mha_inputs()).total_macs == 1280


def test_multihead_attention_prices_its_softmax_with_a_profilers_softmax_formula() -> None:
    # the built-in softmax (120) replaced by the user's 1000: 2680 - 120 + 1000 = 3560
    mha = nn.MultiheadAttention(8, 2)
    assert own(Softmax=thousand).profile(mha, mha_inputs()).total_ops == 3560


def test_multihead_attention_prices_its_dropout_with_a_profilers_dropout_formula() -> None:
    mha = nn.MultiheadAttention(8, 2, dropout=0.5)
    # in training the weights' dropout is built in at 3 ops per weight: 8 rows * 4 keys * 3 =
    # 96, so 2680 + 96 = 2776; with the user's 1000: 2680 + 1000 = 3680; in eval it is 0
    assert ModuleProfiler().profile(mha, mha_inputs(), eval=False).total_ops == 2776
    assert own(Dropout=thousand).profile(mha, mha_inputs(), eval=False).total_ops == 3680
    assert own(Dropout=thousand).profile(mha, mha_inputs()).total_ops == 2680


def test_the_fused_and_decomposed_attention_paths_agree_with_own_formulas() -> None:
    # batch-first self-attention in eval under no_grad takes the fused kernel; with grad on
    # the decomposed path runs: the formula prices the module, not the kernel
    mha = nn.MultiheadAttention(8, 2, batch_first=True)
    x = torch.randn(1, 4, 8)
    profiler = own(Linear=thousand)
    fused = profiler.profile(mha, (x, x, x)).total_ops
    decomposed = profiler.profile(mha, (x, x, x), backward=True).total_ops
    assert fused == decomposed == 4632


def test_a_part_type_removed_from_the_map_leaves_the_composite_unknown() -> None:
    profiler = ModuleProfiler()
    del profiler.ops_fn_map[nn.Linear]
    profile = profiler.profile(nn.MultiheadAttention(8, 2), mha_inputs())
    # the projections have no formula in this profiler: their work is unknown, never 0
    assert profile.records[0].self_ops is None and not profile.complete


# nn.LSTM(5, 7) on a (4, 3, 5) input: rows = 4 * 3 = 12, g = 4 gates, H = 7.
#   input product W_i x + b_i:  12 * 28 * (2*5 - 1 + 1) = 3360
#   recurrent product W_h h + b_h: 12 * 28 * (2*7 - 1 + 1) = 4704
#   gate arithmetic: 12 * 7 * 31 = 2604, of which sigmoids 3 * 12 * 7 * 3 = 756 and tanh
#   2 * 12 * 7 * 7 = 1176
#   built in: 3360 + 4704 + 2604 = 10668 (12 * 889, as in test_recurrent)
LSTM_BUILT_IN = 10668


def test_lstm_prices_its_gate_products_with_a_profilers_linear_formula() -> None:
    lstm, x = nn.LSTM(5, 7), torch.randn(4, 3, 5)
    # the two products at 1000 each (one call each over all 12 rows), the gates built in:
    # 2 * 1000 + 2604 = 4604
    assert own(Linear=thousand).profile(lstm, x).total_ops == 4604
    assert ModuleProfiler().profile(lstm, x).total_ops == LSTM_BUILT_IN


def test_lstm_prices_its_gate_functions_with_a_profilers_sigmoid_and_tanh() -> None:
    lstm, x = nn.LSTM(5, 7), torch.randn(4, 3, 5)
    # three sigmoids (i, f, o) at 1000 each instead of 756: 10668 - 756 + 3000 = 12912
    assert own(Sigmoid=thousand).profile(lstm, x).total_ops == 12912
    # two tanh (g, tanh(c')) at 1000 each instead of 1176: 10668 - 1176 + 2000 = 11492
    assert own(Tanh=thousand).profile(lstm, x).total_ops == 11492


def test_a_bidirectional_two_layer_gru_prices_each_layer_and_direction() -> None:
    gru, x = nn.GRU(5, 7, num_layers=2, bidirectional=True), torch.randn(4, 3, 5)
    built_in = ModuleProfiler().profile(gru, x).total_ops
    # per layer and direction: two products; 2 layers * 2 directions * 2 = 8 products.
    # Built in, layer 0 reads 5 features, layer 1 reads 2 * 7 = 14; 12 rows, 3 * 7 = 21 gate
    # units: layer 0: 12*21*(2*5) + 12*21*(2*7) = 2520 + 3528 = 6048, layer 1: 12*21*(2*14) +
    # 3528 = 7056 + 3528 = 10584; both directions: 2 * (6048 + 10584) = 33264 of products
    assert own(Linear=thousand).profile(gru, x).total_ops == built_in - 33264 + 8 * 1000


def test_lstm_cell_prices_its_parts_like_the_layer() -> None:
    # nn.LSTMCell(5, 7) on a batch of 3: 3 * 889 = 2667 built in; with the user's Linear the
    # two products 2 * 1000 and the gates 3 * 7 * 31 = 651: 2651
    cell, x = nn.LSTMCell(5, 7), torch.randn(3, 5)
    assert ModuleProfiler().profile(cell, x).total_ops == 2667
    assert own(Linear=thousand).profile(cell, x).total_ops == 2651


def test_lstm_macs_follow_a_profilers_linear_macs() -> None:
    profiler = ModuleProfiler()
    profiler.macs_fn_map[nn.Linear] = lambda module, inputs, output: 100
    # two products at 100 macs each; the gates have none
    assert profiler.profile(nn.LSTM(5, 7), torch.randn(4, 3, 5)).total_macs == 200


def test_a_transformer_layer_prices_its_activation_function_as_the_profilers_module() -> None:
    # TransformerEncoderLayer(8, 2, dim_feedforward=16) on (1, 4, 8), activation "relu" (the
    # function F.relu): its own work is 2 residual adds * 32 elements = 64 plus the ReLU on
    # 4 rows * 16 = 64 elements (1 op each) = 128; with the user's ReLU: 64 + 1000 = 1064, as
    # a child nn.ReLU would count
    layer = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True)
    x = torch.randn(1, 4, 8)
    assert ModuleProfiler().profile(layer, x).records[0].self_ops == 128
    assert own(ReLU=thousand).profile(layer, x).records[0].self_ops == 1064
    as_module = nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, batch_first=True,
                                           activation=nn.ReLU())
    by_module = own(ReLU=thousand).profile(as_module, x)
    activation = next(r for r in by_module.records if r.path == "activation")
    assert by_module.records[0].self_ops + activation.self_ops == 1064


def test_parts_without_own_entries_use_the_built_in_arithmetic() -> None:
    # a profiler's map without entries for the part types binds nothing: the formula is the
    # registered one, and no part is priced by a call
    assert not Parts(ModuleProfiler().ops_fn_map)
    assert Parts(own(Linear=thousand).ops_fn_map)
