"""Operator classes of language-model blocks: the calibration table an operator is priced
from follows the layout of its operands, and a gather is priced on the rows it returns."""

from __future__ import annotations

import math
from typing import Any

import torch

from moduleprofiler.prediction.op_classes import ODD_GROUP_WIDTH, OpWork, classify

META = torch.device("meta")
aten = torch.ops.aten


def _work(func: Any, *args: Any) -> OpWork:
    return classify(func, args, {}, func(*args))


def _heads(batch: int = 2, seq: int = 8, heads: int = 4, dim: int = 16) -> torch.Tensor:
    """(batch, heads, seq, dim) transposed from (batch, seq, heads, dim), as attention does."""
    return torch.empty(batch, seq, heads, dim, device=META,
                       dtype=torch.bfloat16).transpose(1, 2)


def test_contiguous_elementwise_keeps_the_vectorised_tables() -> None:
    x = torch.empty(4, 32, device=META, dtype=torch.bfloat16)
    work = _work(aten.mul.Tensor, x, x.clone())
    assert work.table == "mem_binary"
    assert work.moved_bytes == 3 * 4 * 32 * 2  # two reads and a write of 128 bf16 elements
    assert _work(aten.neg.default, x).table == "mem_unary"


def test_a_broadcast_operand_is_priced_per_output_element() -> None:
    x = torch.empty(4, 32, device=META, dtype=torch.bfloat16)
    weight = torch.empty(32, device=META, dtype=torch.bfloat16)
    work = _work(aten.mul.Tensor, weight, x)  # RMSNorm's weight * hidden
    assert work.table == "mem_broadcast"
    assert work.moved_bytes == 2 * 4 * 32 * 2  # 2 x the output's 128 bf16 elements
    rows = torch.empty(4, 1, device=META, dtype=torch.bfloat16)
    assert _work(aten.mul.Tensor, x, rows).table == "mem_broadcast"
    # a one-element operand is a scalar to the kernel: still vectorised
    one = torch.empty(1, device=META, dtype=torch.bfloat16)
    assert _work(aten.mul.Tensor, x, one).table == "mem_binary"


def test_a_permuted_operand_is_strided() -> None:
    heads = _heads()
    cos = torch.empty(1, 1, 8, 16, device=META, dtype=torch.bfloat16)
    work = _work(aten.mul.Tensor, heads, cos)  # rotary: q * cos
    assert work.table == "mem_strided"
    assert work.moved_bytes == 2 * 2 * 4 * 8 * 16 * 2  # 2 x 1024 output elements x 2 bytes
    assert _work(aten.add.Tensor, heads, heads.contiguous()).table == "mem_strided"
    assert _work(aten.neg.default, heads[..., :8]).table == "mem_strided"  # rotate_half


def test_copies_by_the_layout_and_dtype_of_their_source() -> None:
    x = torch.empty(4, 32, device=META, dtype=torch.bfloat16)
    assert _work(aten.clone.default, x).table == "mem_copy"
    assert _work(aten.clone.default, _heads()).table == "mem_permute_copy"
    assert _work(aten.clone.default, x.t()).table == "mem_transpose_copy"
    up = classify(aten._to_copy.default, (x,), {"dtype": torch.float32},
                  aten._to_copy.default(x, dtype=torch.float32))
    assert up.table == "mem_convert" and up.dtype == "fp32"
    assert up.moved_bytes == 4 * 32 * (2 + 4)  # read bf16, write fp32


def test_concatenations_of_permuted_heads() -> None:
    heads = _heads()
    empty = torch.empty(2, 4, 0, 16, device=META, dtype=torch.bfloat16)
    assert _work(aten.cat.default, [empty, heads], -2).table == "mem_strided_cat"  # KV cache
    half = heads[..., :8]
    assert _work(aten.cat.default, [half.contiguous(), half], -1).table == \
        "mem_strided_inner_cat"  # rotate_half
    x = torch.empty(4, 32, device=META, dtype=torch.bfloat16)
    assert _work(aten.cat.default, [x, x]).table == "mem_cat"


def test_an_embedding_is_priced_on_the_rows_it_gathers() -> None:
    table = torch.empty(32000, 64, device=META, dtype=torch.bfloat16)
    ids = torch.empty(2, 8, device=META, dtype=torch.int64)
    work = _work(aten.embedding.default, table, ids)
    assert work.table == "mem_gather"
    # 16 rows of 64 bf16 read and written (2 * 16 * 64 * 2 = 4096) plus 16 int64 indices
    # (128): never the table's 32000 * 64 * 2 = 4,096,000 bytes
    assert work.moved_bytes == 4096 + 128


def test_a_linear_layers_transposed_weight_has_its_own_gemm_table() -> None:
    x = torch.empty(8, 64, device=META, dtype=torch.bfloat16)
    weight = torch.empty(32, 64, device=META, dtype=torch.bfloat16)
    linear = _work(aten.mm.default, x, weight.t())
    assert linear.table == "gemm_nt"
    assert linear.flops == 2 * 8 * 32 * 64
    assert _work(aten.mm.default, x, weight.t().contiguous()).table == "gemm"
    bias = torch.empty(32, device=META, dtype=torch.bfloat16)
    # with a bias cuBLAS runs yet other kernels (its epilogue adds the bias)
    assert _work(aten.addmm.default, bias, x, weight.t()).table == "gemm_bias_nt"
    assert _work(aten.addmm.default, bias, x, weight.t().contiguous()).table == "gemm_bias"


def test_operands_permuted_alike_stay_vectorised() -> None:
    # channels-last feature maps: every operand and the output in one permuted layout
    x = torch.empty(2, 8, 4, 4, device=META, dtype=torch.bfloat16).to(
        memory_format=torch.channels_last)
    assert _work(aten.add.Tensor, x, x.clone()).table == "mem_binary"
    assert _work(aten.relu.default, x).table == "mem_unary"
    scale = torch.empty(8, 1, 1, device=META, dtype=torch.bfloat16)
    assert _work(aten.mul.Tensor, scale, x).table == "mem_strided"  # broadcast, permuted


def test_norms_and_softmaxes_carry_the_width_of_their_rows() -> None:
    x = torch.empty(10, 96, device=META, dtype=torch.float32)
    weight = torch.empty(96, device=META)
    norm = _work(aten.native_layer_norm.default, x, [96], weight, weight, 1e-5)
    assert norm.table == "mem_layer_norm"
    assert norm.features[1] == math.log2(96)
    scores = torch.empty(4, 49, device=META, dtype=torch.bfloat16)
    softmax = _work(aten._softmax.default, scores, -1, False)
    assert softmax.table == "mem_softmax"
    assert softmax.features[1] == math.log2(49)


def test_roll_has_its_own_table() -> None:
    x = torch.empty(2, 14, 14, 96, device=META, dtype=torch.bfloat16)
    work = _work(aten.roll.default, x, [3, 3], [1, 2])
    assert work.table == "mem_roll"
    assert work.moved_bytes == 2 * 2 * 14 * 14 * 96 * 2  # read and written once, bf16


def test_a_channels_last_convolution_is_set_apart() -> None:
    x = torch.empty(2, 32, 14, 14, device=META)
    weight = torch.empty(32, 1, 7, 7, device=META)
    args = (weight, None, [1, 1], [3, 3], [1, 1], False, [0, 0], 32)
    first = _work(aten.convolution.default, x, *args)
    last = _work(aten.convolution.default, x.to(memory_format=torch.channels_last), *args)
    assert first.features[:-1] == last.features[:-1]
    assert (first.features[-1], last.features[-1]) == (0.0, 8.0)


def test_attention_is_priced_on_whole_sequence_tiles() -> None:
    q = torch.empty(2, 6, 197, 64, device=META)
    work = _work(aten._scaled_dot_product_efficient_attention.default, q, q, q, None, False)
    # fp32 tiles of 64 tokens: 197 runs as 256; 4 * 2 * 6 * 256 * 256 * 64 FLOPs
    assert work.features[1] == math.log2(256)
    assert work.flops == 4 * 2 * 6 * 256 * 256 * 64
    bf16 = _work(aten._scaled_dot_product_efficient_attention.default,
                 *(q[:, :, :145].bfloat16(),) * 3, None, False)
    assert bf16.features[1] == math.log2(256)  # bf16's forward tiles are 128: 145 -> 256


def test_a_batched_product_of_odd_sequences_is_misaligned() -> None:
    q = torch.empty(8, 49, 32, device=META)
    scores = _work(aten.bmm.default, q, q.transpose(1, 2))
    # n = 49 fp32 elements = 196 bytes a row, no multiple of 16
    assert scores.table == "bmm" and scores.features[-1] == 6.0
    aligned = torch.empty(8, 48, 32, device=META)
    assert _work(aten.bmm.default, aligned, aligned.transpose(1, 2)).features[-1] == 0.0


def test_a_pointwise_convolution_of_one_pixel_is_a_matrix_product() -> None:
    pooled = torch.empty(8, 48, 1, 1, device=META)
    weight = torch.empty(1152, 48, 1, 1, device=META)
    args = (None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    work = _work(aten.convolution.default, pooled, weight, *args)
    # (8 x 48) @ (48 x 1152): 2 * 8 * 48 * 1152 = 884736 FLOPs
    assert (work.table, work.flops) == ("gemm", 884736.0)
    image = torch.empty(8, 48, 7, 7, device=META)
    assert _work(aten.convolution.default, image, weight, *args).table == "conv"


def test_a_layer_norm_of_transposed_tokens_copies_its_input_first() -> None:
    # an MLP mixer's residual stream: (batch, tokens, channels) transposed from channels
    tokens = torch.empty(8, 768, 196, device=META, dtype=torch.bfloat16).transpose(1, 2)
    weight = torch.empty(768, device=META, dtype=torch.bfloat16)
    norm = _work(aten.native_layer_norm.default, tokens, [768], weight, weight, 1e-6)
    assert norm.table == "mem_layer_norm"
    copy = norm.prelude
    assert copy is not None and copy.table == "mem_transpose_copy"
    # read and written once: 2 * 8 * 196 * 768 elements * 2 bytes = 4,816,896 bytes
    assert copy.moved_bytes == 4_816_896
    assert copy.features == (math.log2(4_816_896),)
    contiguous = _work(aten.native_layer_norm.default, tokens.contiguous(), [768], weight,
                       weight, 1e-6)
    assert contiguous.prelude is None
    # an image permuted to channels last: a convolution's output, channels-last on a GPU
    # (so contiguous once permuted) where the meta device keeps it channels-first
    image = torch.empty(8, 96, 56, 56, device=META, dtype=torch.bfloat16).permute(0, 2, 3, 1)
    small = torch.empty(96, device=META, dtype=torch.bfloat16)
    assert _work(aten.native_layer_norm.default, image, [96], small, small, 1e-6).prelude is None


def test_a_convolutions_bias_is_added_by_a_kernel_of_its_own() -> None:
    # cuDNN convolves, then PyTorch adds the bias: one broadcast kernel over the output
    image = torch.empty(8, 336, 14, 14, device=META, dtype=torch.bfloat16)
    weight = torch.empty(96, 336, 1, 1, device=META, dtype=torch.bfloat16)
    bias = torch.empty(96, device=META, dtype=torch.bfloat16)
    args = ([1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    work = _work(aten.convolution.default, image, weight, bias, *args)
    add = work.prelude
    assert work.table == "conv" and add is not None and add.table == "mem_broadcast"
    # the output read and written once: 2 * 8 * 96 * 14 * 14 elements * 2 bytes = 602,112
    assert add.moved_bytes == 602_112
    assert add.features == (math.log2(602_112),)
    assert _work(aten.convolution.default, image, weight, None, *args).prelude is None


def test_a_squeeze_and_excitation_projections_bias_is_added_apart() -> None:
    pooled = torch.empty(8, 336, 1, 1, device=META)
    weight = torch.empty(84, 336, 1, 1, device=META)
    bias = torch.empty(84, device=META)
    work = _work(aten.convolution.default, pooled, weight, bias, [1, 1], [0, 0], [1, 1],
                 False, [0, 0], 1)
    # a GEMM, then the bias over 8 x 84 fp32 outputs: 2 * 672 * 4 = 5376 bytes
    assert work.table == "gemm" and work.prelude is not None
    assert work.prelude.moved_bytes == 5376


def test_pytorchs_depthwise_kernel_adds_the_bias_itself() -> None:
    image = torch.empty(8, 336, 14, 14, device=META)
    weight = torch.empty(336, 1, 3, 3, device=META)
    bias = torch.empty(336, device=META)
    args = ([1, 1], [1, 1], [1, 1], False, [0, 0], 336)
    assert _work(aten.convolution.default, image, weight, bias, *args).prelude is None
    # channels-last: cuDNN's depthwise kernel, and the addition after it
    last = image.to(memory_format=torch.channels_last)
    work = _work(aten.convolution.default, last, weight, bias, *args)
    assert work.prelude is not None
    assert work.prelude.moved_bytes == 2 * 8 * 336 * 14 * 14 * 4  # 4,214,784


def test_a_group_width_no_power_of_two_is_a_feature_of_its_own() -> None:
    # RegNetY: 336 channels in 14 groups of 24; ResNeXt: 256 channels in 8 groups of 32
    image = torch.empty(8, 336, 14, 14, device=META)
    args = (None, [1, 1], [1, 1], [1, 1], False, [0, 0])
    odd = _work(aten.convolution.default, image, torch.empty(336, 24, 3, 3, device=META),
                *args, 14)
    assert odd.features[1] == math.log2(24) and odd.features[-2] == ODD_GROUP_WIDTH
    even = _work(aten.convolution.default, torch.empty(8, 256, 14, 14, device=META),
                 torch.empty(256, 32, 3, 3, device=META), *args, 8)
    assert even.features[-2] == 0.0
    # dense and depthwise convolutions are neither: 336 channels dense, 336 depthwise
    dense = _work(aten.convolution.default, image, torch.empty(336, 336, 3, 3, device=META),
                  *args, 1)
    depthwise = _work(aten.convolution.default, image, torch.empty(336, 1, 3, 3, device=META),
                      *args, 336)
    assert dense.features[-2] == 0.0 and depthwise.features[-2] == 0.0


def test_cudnn_copies_a_weight_into_a_channels_last_inputs_layout() -> None:
    # ConvNeXt's downsampling: a channels-last image, a 2 x 2 weight stored channels-first
    image = torch.empty(1, 96, 56, 56, device=META,
                        dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    weight = torch.empty(192, 96, 2, 2, device=META, dtype=torch.bfloat16)
    bias = torch.empty(192, device=META, dtype=torch.bfloat16)
    args = ([2, 2], [0, 0], [1, 1], False, [0, 0], 1)
    work = _work(aten.convolution.default, image, weight, bias, *args)
    add = work.prelude
    assert add is not None and add.table == "mem_broadcast"
    copy = add.prelude
    # read and written once: 2 * (192 * 96 * 2 * 2 = 73,728 elements) * 2 bytes = 294,912
    assert copy is not None and copy.moved_bytes == 294_912
    assert copy.table == "mem_permute_copy"
    # without a bias the copy is the convolution's own prelude
    plain = _work(aten.convolution.default, image, weight, None, *args)
    assert plain.prelude is not None and plain.prelude.moved_bytes == 294_912
    # a channels-first input, or a 1 x 1 weight (channels-last already): no copy
    first = torch.empty(1, 96, 56, 56, device=META, dtype=torch.bfloat16)
    assert _work(aten.convolution.default, first, weight, None, *args).prelude is None
    pointwise = torch.empty(192, 96, 1, 1, device=META, dtype=torch.bfloat16)
    assert _work(aten.convolution.default, image, pointwise, None, [1, 1], [0, 0], [1, 1],
                 False, [0, 0], 1).prelude is None


def test_safe_softmax_prices_its_masking_kernels() -> None:
    # unfused attention's softmax of (1, 16, 128, 128) fp32 scores: 262144 elements, 2048
    # rows of 128
    scores = torch.empty(1, 16, 128, 128, device=META)
    work = _work(aten._safe_softmax.default, scores, -1)
    assert work.table == "mem_softmax"
    where = work.prelude
    assert where is not None and where.table == "mem_broadcast"
    assert where.moved_bytes == 2 * 262144 * 4 + 2048  # the output read and written, flags
    rows_all = where.prelude
    assert rows_all is not None and rows_all.table == "mem_reduction"
    assert rows_all.moved_bytes == 262144 + 2048  # a byte per element read, one per row
    flags = rows_all.prelude
    assert flags is not None and flags.table == "mem_unary" and flags.prelude is None
    assert flags.moved_bytes == 262144 * (4 + 1)  # the scores read, a byte each written
    # a plain softmax runs one kernel
    assert _work(aten._softmax.default, scores, -1, False).prelude is None


def test_a_grouped_product_is_priced_at_one_experts_shape_with_all_the_work() -> None:
    # 8 experts, 2,048 rows in all (256 each), x (2048 x 1024) @ w[e].T (1024 x 5632)
    rows = torch.empty(2048, 1024, device=META, dtype=torch.bfloat16)
    weight = torch.empty(8, 5632, 1024, device=META, dtype=torch.bfloat16)
    offsets = torch.arange(1, 9, device=META, dtype=torch.int32) * 256
    work = _work(aten._grouped_mm.default, rows, weight.transpose(-2, -1), offsets)
    assert work.table == "grouped_gemm"
    assert work.features[:3] == (8.0, math.log2(5632), 10.0)  # 256 rows, n, k
    assert work.features[-1] == 3.0  # over 8 experts
    assert work.flops == 2 * 2048 * 5632 * 1024


def test_a_routers_sort_and_top_k_have_their_own_tables() -> None:
    ids = torch.empty(2048, device=META, dtype=torch.int64)
    work = _work(aten.sort.default, ids)
    assert work.table == "mem_sort"
    assert work.moved_bytes == 3 * 2048 * 8  # ids read, sorted ids and positions written
    scores = torch.empty(1024, 8, device=META)
    work = _work(aten.topk.default, scores, 2)
    assert work.table == "mem_topk"
    # 1024 x 8 fp32 scores read; 1024 x 2 fp32 values and int64 positions written
    assert work.moved_bytes == 1024 * 8 * 4 + 1024 * 2 * 4 + 1024 * 2 * 8


def test_an_empty_result_launches_no_kernel() -> None:
    rows = torch.empty(0, 64, device=META)  # a batch of 0
    weight = torch.empty(32, 64, device=META)
    for work in (_work(aten.addmm.default, torch.empty(32, device=META), rows, weight.t()),
                 _work(aten.relu.default, rows),
                 _work(aten.convolution.default, torch.empty(0, 3, 8, 8, device=META),
                       torch.empty(4, 3, 3, 3, device=META), None, [1, 1], [0, 0], [1, 1],
                       False, [0, 0], 1)):
        assert (work.table, work.host, work.moved_bytes, work.prelude) == (None, "view", 0.0,
                                                                           None)
    # an empty inner dimension still writes a result (zeros): not left out
    assert _work(aten.mm.default, torch.empty(4, 0, device=META),
                 torch.empty(0, 5, device=META)).table is not None


def test_an_operator_without_a_class_is_priced_by_the_elementwise_rule_and_marked() -> None:
    x = torch.empty(8, 64, device=META)
    product = _work(aten.cumprod.default, x, 1)
    assert product.table == "mem_unary" and product.by_rule
    assert not _work(aten.sort.default, x).by_rule  # a router's sort has its own table
    assert not _work(aten.relu.default, x).by_rule
    assert not _work(aten.add.Tensor, x, x.clone()).by_rule


def test_a_nested_tensor_is_priced_by_its_kind() -> None:
    # a nested tensor has no strides to read (an eval TransformerEncoder over padded rows runs
    # on them): asking ended the prediction; its components are one packed buffer
    rows = torch.nested.nested_tensor([torch.randn(3, 4), torch.randn(2, 4)])
    work = _work(aten.mul.Tensor, rows, rows.clone())
    assert work.table == "mem_binary"
    assert work.moved_bytes == 3 * (3 + 2) * 4 * 4  # two reads and a write of 20 fp32 elements
    assert _work(aten.relu.default, rows).table == "mem_unary"
