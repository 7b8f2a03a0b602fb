"""Operators that cost nothing: they move, view, copy, select, allocate or describe data.

"Free" is a statement, not a default: an operator is listed here because it does no arithmetic
on values (``docs/operators.md``), so it is counted as 0 ops and 0 macs and is never reported as
unsupported. Anything not listed and without a formula *is* reported.

NB conventions that put an operator here:

* a selection driven by a condition already computed (``where``, ``masked_fill``, ``tril``) is
  data movement: the comparison that made the condition was counted where it ran;
* random draws (``rand``, ``uniform_``, ``normal_``, ``poisson``, ``binomial``) are free, as
  in the dropout convention, where only the Bernoulli test ``u < p`` costs an op
  (``bernoulli`` is not free);
* filling a range (``arange``, ``linspace``) writes index values and counts as allocation.
"""

from __future__ import annotations

import torch

from moduleprofiler.operators._common import free
from moduleprofiler.operators.registry import register_free

_VIEWS = (
    "view", "_unsafe_view", "view_as", "reshape", "reshape_as", "_reshape_alias", "flatten",
    "unflatten", "expand", "expand_as", "broadcast_to", "broadcast_tensors", "permute",
    "transpose", "transpose_", "swapaxes", "swapaxes_", "swapdims", "swapdims_", "movedim",
    "moveaxis", "t", "t_",
    "numpy_T", "mT", "mH", "adjoint", "matrix_H", "unsqueeze", "unsqueeze_", "squeeze",
    "squeeze_", "select", "slice", "narrow", "as_strided", "as_strided_", "unfold", "diagonal",
    "alias", "detach", "detach_", "lift", "lift_fresh", "real", "imag", "view_as_real",
    "view_as_complex", "conj", "_conj", "resolve_conj", "resolve_neg", "_neg_view",
    "split", "split_with_sizes", "unsafe_split", "unsafe_split_with_sizes", "chunk",
    "unsafe_chunk", "tensor_split", "hsplit", "vsplit", "dsplit", "unbind", "atleast_1d",
    "atleast_2d", "atleast_3d", "_nested_tensor_size", "_nested_tensor_strides",
)  # fmt: skip
_VIEW_COPIES = (  # the functionalized (copying) forms of the views above
    "view_copy", "expand_copy", "permute_copy", "transpose_copy",
    "t_copy", "unsqueeze_copy", "squeeze_copy", "select_copy", "slice_copy", "narrow_copy",
    "as_strided_copy", "unfold_copy", "diagonal_copy", "alias_copy", "detach_copy",
    "split_copy", "split_with_sizes_copy", "unbind_copy", "lift_fresh_copy", "_reshape_copy",
    "select_scatter", "slice_scatter", "as_strided_scatter", "diagonal_scatter",
)  # fmt: skip
_COPIES = (
    "clone", "contiguous", "copy", "copy_", "_copy_from", "_copy_from_and_resize", "_to_copy",
    "to", "type_as", "_to_dense", "to_dense", "to_padded_tensor", "_pin_memory", "pin_memory",
    "_autocast_to_reduced_precision", "_autocast_to_full_precision", "cat", "concat",
    "concatenate", "stack", "_stack", "hstack", "vstack", "dstack", "column_stack",
    "row_stack", "repeat", "repeat_interleave", "tile", "roll", "flip", "fliplr", "flipud",
    "rot90", "constant_pad_nd", "pad", "_pad_enum", "_pad_circular", "reflection_pad1d",
    "reflection_pad2d", "reflection_pad3d", "replication_pad1d", "replication_pad2d",
    "replication_pad3d", "pixel_shuffle", "pixel_unshuffle", "channel_shuffle",
    "native_channel_shuffle", "diag", "diag_embed", "block_diag",
    "_nested_tensor_from_mask", "_nested_tensor_from_mask_left_aligned",
    "_nested_tensor_from_tensor_list", "_nested_from_padded", "_nested_view_from_buffer",
    "_cast_Byte", "_cast_Char", "_cast_Double", "_cast_Float", "_cast_Half", "_cast_Int",
    "_cast_Long", "_cast_Short", "chalf", "ravel", "_reshape_from_tensor", "_shape_as_tensor",
    "meshgrid", "cartesian_prod", "flatten_dense_tensors",
    "unflatten_dense_tensors", "pad_sequence", "_pad_packed_sequence", "diagflat", "_dim_arange",
    "_to_cpu", "_unpack_dual", "data",
    # a concatenation of chunks; a complex tensor from its parts; conjugation, a sign flip (free
    # as negation is); conversions to a sparse layout, which select the nonzeros as ``nonzero``
    "_chunk_cat", "complex", "_conj_physical", "conj_physical", "conj_physical_",
    "_to_sparse", "_to_sparse_csr", "_to_sparse_csc",
    "_to_sparse_bsr", "_to_sparse_bsc",
    # a sparse tensor assembled from given indices and values (``torch.sparse_coo_tensor``,
    # a sparse ``nn.Embedding``'s gradient), and its parts read back
    "sparse_coo_tensor", "_sparse_coo_tensor_unsafe", "_sparse_coo_tensor_with_dims",
    "_sparse_coo_tensor_with_dims_and_tensors", "sparse_compressed_tensor",
    "_sparse_compressed_tensor_unsafe", "_sparse_compressed_tensor_with_dims",
    "sparse_csr_tensor", "_sparse_csr_tensor_unsafe", "sparse_csc_tensor",
    "_sparse_csc_tensor_unsafe", "sparse_bsr_tensor", "_sparse_bsr_tensor_unsafe",
    "sparse_bsc_tensor", "_sparse_bsc_tensor_unsafe", "_indices", "_values", "indices",
    "values", "crow_indices", "col_indices", "ccol_indices", "row_indices",
)  # fmt: skip
_SELECTIONS = (
    "index", "_unsafe_index", "index_select", "gather", "take",
    "masked_select", "masked_fill", "masked_fill_", "masked_scatter", "masked_scatter_",
    "where", "index_fill", "index_fill_", "index_copy", "index_copy_", "tril", "tril_",
    "triu", "triu_", "nonzero", "nonzero_static", "argwhere", "_unsafe_masked_index",
    "sparse_mask",  # the values of a dense tensor at a sparse tensor's stored positions
)  # fmt: skip
_ALLOCATIONS = (
    "empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided",
    "new_zeros", "new_ones", "new_full", "zeros", "zeros_like", "ones", "ones_like", "full",
    "full_like", "fill", "fill_", "zero_", "scalar_tensor", "arange", "range", "linspace",
    "logspace", "eye", "tril_indices", "triu_indices", "rand", "rand_like", "randn",
    "randn_like", "randint", "randint_like", "randperm", "uniform_", "normal", "normal_",
    "random_", "exponential_", "geometric_", "cauchy_", "log_normal_", "poisson", "binomial",
    "_standard_gamma", "_sample_dirichlet", "set_", "resize_", "resize_as_", "_resize_output_",
    "_efficientzerotensor", "fill_diagonal_",
    # the functional forms of the in-place fills above (functionalized graphs run them)
    "zero", "uniform", "normal_functional", "random", "exponential", "geometric", "cauchy",
    "log_normal", "resize", "resize_as",
)  # fmt: skip
_METADATA = (
    "_local_scalar_dense", "item", "sym_size", "sym_stride", "sym_numel",
    "sym_storage_offset", "size", "stride", "numel", "dim", "is_contiguous",
    "sym_is_contiguous", "is_strides_like_format", "is_non_overlapping_and_dense",
    "storage_offset", "is_coalesced", "is_nonzero", "is_same_size", "is_pinned", "_assert_async",
    "_assert_scalar", "_assert_tensor_metadata", "_functional_assert_async",
    "_functional_assert_scalar", "record_stream", "_has_same_storage_numel", "is_set_to",
    "_version", "_is_any_true", "_is_all_true", "get_device", "is_complex", "is_conj",
    "is_floating_point", "is_inference", "is_leaf", "is_neg", "is_signed", "output_nr",
    "result_type", "can_cast", "promote_types", "retain_grad", "retains_grad", "set_data",
    "_is_zerotensor", "_has_compatible_shallow_copy_type", "_debug_has_internal_overlap",
)  # fmt: skip

free(*_VIEWS, *_VIEW_COPIES, *_COPIES, *_SELECTIONS, *_ALLOCATIONS, *_METADATA)

# TorchScript's ``prim`` namespace: device/layout queries some kernels dispatch.
register_free(*(getattr(torch.ops.prim, name) for name in ("layout", "device")
                if hasattr(torch.ops.prim, name)))

# Bookkeeping: packing a padded batch for an RNN (and its gradient) moves rows into the packed
# layout; ``torch.profiler.record_function`` (which ``nn.DataParallel`` also opens around its
# forward) enters and leaves a named range. No arithmetic on values.
free("_pack_padded_sequence", "_pack_padded_sequence_backward", "_use_cudnn_ctc_loss")
register_free(*(getattr(torch.ops.profiler, name) for name in (
    "_record_function_enter", "_record_function_enter_new", "_record_function_exit",
    "_call_end_callbacks_on_jit_fut",
) if hasattr(torch.ops.profiler, name)))
