"""Matrix products and convolutions: ``mm`` / ``addmm`` / ``bmm`` / ``matmul`` / ``linear`` / ...
and every convolution kernel (``convolution``, cuDNN, oneDNN, slow and depthwise variants,
transposed and grouped).

Each output element of a product is one dot product of length ``k``: ``k`` multiplies and
``k - 1`` adds, ``2k - 1`` ops, and ``k`` macs. A bias (``addmm``'s ``self``) adds one op per
output element; ``alpha`` / ``beta`` other than 1 add one multiply per output element each. So
``addmm(b, x, Wᵀ)`` counts exactly what ``nn.Linear`` with bias counts, and ``mm`` what it
counts without. Convolutions count like ``nn.Conv*d`` / ``nn.ConvTranspose*d``
(``formulas/conv.py``), whose helper for the products a transposed convolution keeps is reused.

A product of a 2-D sparse matrix (COO, CSR or CSC) and a dense one counts the stored entries
only (:func:`sparse_product_count`): a graph network's adjacency product is ``nnz`` rows of work,
not ``n * k``. Products of other sparse layouts (blocked, hybrid, batched, two sparse operands)
are unknown, never counted as dense.

Composite products (``einsum``, ``tensordot``, ``kron``, ``bilinear``, ``chain_matmul``, ...)
are counted as the sum of their decomposition, which is what the dispatcher shows outside
``inference_mode``: ``einsum`` lowers to ``bmm`` (and ``sum`` for indices summed out alone).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor, nn

from moduleprofiler.formulas.activation import GELU_TANH, PER_ELEMENT
from moduleprofiler.formulas.conv import transposed_reach
from moduleprofiler.formulas.distance import dot_ops
from moduleprofiler.operators._common import (
    ZERO,
    Args,
    BoundFormula,
    Count,
    add_counts,
    aten,
    by_decomposition,
    complex_by_decomposition,
    first_tensor,
    ints,
    named,
    numel,
    out_numel,
    register,
    with_inplace,
)
from moduleprofiler.operators.registry import MISSING


def product_count(outputs: int, inner: int) -> Count:
    """``outputs`` dot products of length ``inner``: (outputs * (2*inner - 1), outputs * inner)."""
    return outputs * dot_ops(inner), outputs * inner


def _epilogue_ops(args: Args, outputs: int) -> int:
    """Ops after the product in ``beta * self + alpha * (a @ b)``: the add of ``self`` (skipped
    when beta == 0), and one multiply for each of beta, alpha that is not 1."""
    beta, alpha = args.get("beta", 1), args.get("alpha", 1)
    per_output = int(alpha != 1)
    if beta != 0 and args.first() is not None:
        per_output += 1 + int(beta != 1)
    return per_output * outputs


def _dims(x: Any) -> tuple[int, ...]:
    return tuple(int(s) for s in x.shape) if isinstance(x, Tensor) else ()


def _sparse(x: Any) -> bool:
    """Whether ``x`` is a tensor of a sparse layout (its shape is not its work)."""
    return isinstance(x, Tensor) and x.layout is not torch.strided


def _occupied(sparse: Tensor, dim: int) -> int | None:
    """How many rows (``dim`` 0) or columns (``dim`` 1) of a 2-D sparse matrix hold a stored
    entry, read from its indices; ``None`` where they cannot be read (a blocked or hybrid
    layout, the meta device)."""
    if sparse.dim() != 2 or sparse.dense_dim() != 0 or sparse.device.type == "meta":
        return None
    layout = sparse.layout
    if layout is torch.sparse_coo:
        return int(sparse._indices()[dim].unique().numel())
    compressed, plain = {torch.sparse_csr: (0, 1), torch.sparse_csc: (1, 0)}.get(
        layout, (None, None))
    if dim == compressed:  # a compressed dimension: the slots whose pointers move
        pointers = sparse.crow_indices() if layout is torch.sparse_csr \
            else sparse.ccol_indices()
        return int((pointers.diff() > 0).sum())
    if dim == plain:
        indices = sparse.col_indices() if layout is torch.sparse_csr else sparse.row_indices()
        return int(indices.unique().numel())
    return None


def sparse_product_count(a: Any, b: Any) -> Count | None:
    """(ops, macs) of ``a @ b`` where one of two 2-D matrices is sparse, from its stored
    entries; ``None`` when that cannot be said (both sparse, another layout).

    A sparse ``(n, k)`` with ``nnz`` stored entries times a dense ``(k, m)``: each entry
    multiplies a row of ``m``, and an output row sums the products of its ``r`` entries
    (``r - 1`` adds per column): macs ``nnz * m``, ops ``(2 * nnz - rows) * m`` with ``rows``
    the rows holding an entry (an empty row's zeros cost nothing). A dense ``(n, k)`` times a
    sparse ``(k, m)``: the same by columns, ops ``n * (2 * nnz - columns)``.
    """
    if not isinstance(a, Tensor) or not isinstance(b, Tensor) or a.dim() != 2 or b.dim() != 2:
        return None
    if _sparse(a) and not _sparse(b):
        sparse, dim, width = a, 0, int(b.shape[1])
    elif _sparse(b) and not _sparse(a):
        sparse, dim, width = b, 1, int(a.shape[0])
    else:
        return None
    occupied = _occupied(sparse, dim)
    if occupied is None:
        return None
    stored = int(sparse._nnz())
    return (2 * stored - occupied) * width, stored * width


# -- 2-D and batched products ------------------------------------------------------------------

@register(*aten("mm", "_scaled_mm", "_scaled_mm_v2", "hspmm"))
def mm_ops(args: Args, out: Any) -> Count:
    """(n, k) @ (k, m): ops n*m*(2k - 1), macs n*k*m (_scaled_mm, _v2: + n*m with a bias); with a
    sparse operand (``hspmm``'s first always), :func:`sparse_product_count`."""
    a, b = args.first(), args.get("mat2")
    if _sparse(a) or _sparse(b):
        counted = sparse_product_count(a, b)
        return MISSING if counted is None else counted  # type: ignore[return-value]
    (n, k), m = _dims(a), _dims(b)[-1]
    ops, macs = product_count(n * m, k)
    if args.tensor("bias") is not None:  # _scaled_mm's optional bias
        ops += n * m
    return ops, macs


@register(*with_inplace("addmm"), *aten("_sparse_addmm"))
def addmm_ops(args: Args, out: Any) -> Count:
    """beta*self + alpha*(n, k)@(k, m): n*m*(2k - 1) + n*m (bias add); macs n*k*m.

    With a bias this is ``2*n*k*m`` ops, nn.Linear's count with bias. With a sparse operand
    (``_sparse_addmm`` is ``torch.sparse.mm``), the product is :func:`sparse_product_count`.
    """
    a, b = args.get("mat1"), args.get("mat2")
    (n, k), m = _dims(a), _dims(b)[-1]
    if _sparse(a) or _sparse(b):
        counted = sparse_product_count(a, b)
        if counted is None:
            return MISSING  # type: ignore[return-value]
        return counted[0] + _epilogue_ops(args, n * m), counted[1]
    ops, macs = product_count(n * m, k)
    return ops + _epilogue_ops(args, n * m), macs


@register(*aten("sspaddmm"))
def sspaddmm_ops(args: Args, out: Any) -> Count:
    """beta * self + alpha * (sparse @ dense), all sparse: :func:`sparse_product_count` for the
    product; the result stores ``self``'s values and the product's side by side (uncoalesced:
    no adds), each scaled by its factor where that is not 1."""
    counted = sparse_product_count(args.get("mat1"), args.get("mat2"))
    if counted is None:
        return MISSING  # type: ignore[return-value]
    beta, alpha = args.get("beta", 1), args.get("alpha", 1)
    own = numel(args.first()) if beta != 0 else 0
    products = numel(first_tensor(out)) - own
    return counted[0] + own * int(beta not in (0, 1)) + products * int(alpha != 1), counted[1]


@register(*aten("_addmm_activation"))
def addmm_activation_ops(args: Args, out: Any) -> Count:
    """addmm, then ReLU (1 per output) or GELU (15 per output).

    NB: the fused GELU epilogue (cuBLASLt) is the tanh approximation, priced as
    ``nn.GELU(approximate='tanh')``.
    """
    ops, macs = addmm_ops(args, out)
    per = GELU_TANH if args.flag("use_gelu") else PER_ELEMENT[nn.ReLU]
    return ops + per * out_numel(out), macs


@register(*aten("bmm"))
def bmm_ops(args: Args, out: Any) -> Count:
    """(b, n, k) @ (b, k, m): ops b*n*m*(2k - 1), macs b*n*k*m (a sparse operand: unknown)."""
    a, c = args.first(), args.get("mat2")
    if _sparse(a) or _sparse(c):
        return MISSING  # type: ignore[return-value]
    pairs = nested_pairs(a, c)
    if pairs is not None:  # one (n_i, k_i) @ (k_i, m_i) product per sequence
        return add_counts(*(product_count(*_matmul_shape(x, y)) for x, y in pairs))
    (b, n, k), m = _dims(a), _dims(c)[-1]
    return product_count(b * n * m, k)


@register(*aten("_grouped_mm", "_scaled_grouped_mm", "_scaled_grouped_mm_v2"))
def grouped_mm_ops(args: Args, out: Any) -> Count:
    """Grouped matmul (mixture-of-experts layers): every output element is one dot product
    of length K (``a @ b`` per group; ``(G, M, K) @ (G, K, N)``, or rows of ``(T, K)`` routed
    to the ``(G, K, N)`` experts by ``offs``). When the groups split the reduction dimension
    (2-D @ 2-D with ``offs``), the G groups' lengths add up to K. + one add per output with a
    bias.

    NB: with ``offs``, rows past the last offset (padding) are counted too: offsets are values,
    which the meta device does not have."""
    a, b = args.first(), args.get("mat2")
    if not isinstance(a, Tensor) or not isinstance(b, Tensor) or not isinstance(out, Tensor):
        return ZERO
    outputs = int(out.numel())
    if a.dim() == 2 and b.dim() == 2:  # (M, K) @ (K, N) in G slices of K -> (G, M, N)
        groups = int(out.shape[0]) if out.dim() == 3 else 1
        macs = (outputs // max(groups, 1)) * int(a.shape[-1])
        ops = 2 * macs - outputs
    else:
        ops, macs = product_count(outputs, int(a.shape[-1]))
    if args.tensor("bias") is not None:
        ops += outputs
    return ops, macs


@register(*with_inplace("baddbmm"))
def baddbmm_ops(args: Args, out: Any) -> Count:
    """beta*self + alpha*bmm: b*n*m*(2k - 1) + b*n*m (add of self); macs b*n*k*m."""
    (b, n, k), m = _dims(args.get("batch1")), _dims(args.get("batch2"))[-1]
    ops, macs = product_count(b * n * m, k)
    return ops + _epilogue_ops(args, b * n * m), macs


@register(*with_inplace("addbmm"))
def addbmm_ops(args: Args, out: Any) -> Count:
    """self + sum_b batch1[b] @ batch2[b]: n*m dots of length b*k (+ n*m); macs b*n*k*m."""
    (b, n, k), m = _dims(args.get("batch1")), _dims(args.get("batch2"))[-1]
    ops, macs = product_count(n * m, b * k)
    return ops + _epilogue_ops(args, n * m), macs


@register(*aten("dot", "vdot"))
def dot_op_ops(args: Args, out: Any) -> Count:
    """Length-k vectors: ops 2k - 1, macs k."""
    return product_count(1, numel(args.first()))


@register(*aten("mv"))
def mv_ops(args: Args, out: Any) -> Count:
    """(n, k) @ (k,): ops n*(2k - 1), macs n*k; a sparse matrix as a sparse product with one
    column."""
    matrix = args.first()
    if _sparse(matrix):
        return _sparse_vector_product(matrix, args.get("vec"))
    n, k = _dims(matrix)
    return product_count(n, k)


def _sparse_vector_product(matrix: Tensor, vector: Any) -> Count:
    """:func:`sparse_product_count` of a sparse matrix and a dense vector (one column)."""
    counted = None if not isinstance(vector, Tensor) or vector.dim() != 1 \
        else sparse_product_count(matrix, vector.unsqueeze(1))
    return MISSING if counted is None else counted  # type: ignore[return-value]


@register(*with_inplace("addmv"))
def addmv_ops(args: Args, out: Any) -> Count:
    """beta*self + alpha*(n, k)@(k,): n*(2k - 1) + n; macs n*k (a sparse matrix: as ``mv``)."""
    matrix = args.get("mat")
    n, k = _dims(matrix)
    if _sparse(matrix):
        counted = _sparse_vector_product(matrix, args.get("vec"))
        if counted is MISSING:
            return counted
        ops, macs = counted
    else:
        ops, macs = product_count(n, k)
    return ops + _epilogue_ops(args, n), macs


@register(*with_inplace("addr"))
def addr_ops(args: Args, out: Any) -> Count:
    """beta*self + alpha*outer(u, v): n*m multiplies + n*m adds; macs 0.

    NB: an outer product multiplies without accumulating, so like ``outer`` (which lowers to
    ``mul``) it is element-wise work, not macs.
    """
    outputs = out_numel(out)
    return outputs + _epilogue_ops(args, outputs), 0


def _matmul_shape(a: Sequence[int], b: Sequence[int]) -> tuple[int, int]:
    """(outputs, k) of ``torch.matmul`` of operands of shapes ``a`` and ``b`` under its 1-D and
    broadcasting rules."""
    k = int(a[-1])
    rows = int(a[-2]) if len(a) >= 2 else 1
    cols = int(b[-1]) if len(b) >= 2 else 1
    batch = torch.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2]))  # type: ignore[no-untyped-call]
    return math.prod(int(s) for s in batch) * rows * cols, k


def nested_pairs(a: Tensor, b: Tensor) -> list[tuple[tuple[int, ...], tuple[int, ...]]] | None:
    """The operand shapes of each sequence's product when ``a`` or ``b`` is a nested tensor
    (``None`` when neither is): a nested tensor's ``i``-th component, paired with the other
    operand's ``i``-th component, its ``i``-th batch entry (a dense operand of the nested one's
    rank) or the whole of it (a lower-rank dense operand, broadcast to every sequence).

    A nested tensor's sequences have lengths of their own, so its shape (none for the strided
    layout, a symbolic ragged dim for the jagged one) does not give the product's size."""
    if not (a.is_nested or b.is_nested):
        return None
    nested = a if a.is_nested else b
    count = int(nested.size(0))

    def shapes(x: Tensor) -> list[tuple[int, ...]]:
        if x.is_nested:
            return [tuple(int(s) for s in part.shape) for part in x.unbind()]
        per_entry = tuple(int(s) for s in x.shape[1:]) if x.dim() == nested.dim() else _dims(x)
        return [per_entry] * count

    return list(zip(shapes(a), shapes(b), strict=True))


@register(*aten("matmul", "linalg_matmul"))
def matmul_ops(args: Args, out: Any) -> Count:
    """outputs * (2k - 1), macs outputs * k: what the mm / bmm / mv / dot it lowers to count
    (with a nested operand: the sum of each sequence's product)."""
    a, b = args.first(), args.get("other")
    if not isinstance(a, Tensor) or not isinstance(b, Tensor) or a.dim() == 0:
        return ZERO
    pairs = nested_pairs(a, b)
    if pairs is not None:
        return add_counts(*(product_count(*_matmul_shape(x, y)) for x, y in pairs))
    return product_count(*_matmul_shape(a.shape, b.shape))


@register(*aten("linear"))
def linear_ops(args: Args, out: Any) -> Count:
    """rows * out * (2 * in - 1), plus rows * out with bias; macs rows * in * out (nn.Linear)."""
    x, weight = args.first(), args.tensor("weight")
    if not isinstance(x, Tensor) or weight is None or x.dim() == 0:
        return ZERO
    in_features = int(weight.shape[-1])
    out_features = int(weight.shape[0]) if weight.dim() == 2 else 1
    outputs = (numel(x) // in_features if in_features else 0) * out_features
    ops, macs = product_count(outputs, in_features)
    if args.tensor("bias") is not None:
        ops += outputs
    return ops, macs


def _expanded(x: Any, expand: Any, rank: int) -> list[int]:
    """Shape of a ``_trilinear`` operand after unsqueezing it at ``expand``."""
    shape = list(_dims(x))
    for dim in sorted(int(d) for d in expand or ()):
        shape.insert(dim, 1)
    return shape + [1] * (rank - len(shape))


@register(*aten("_trilinear"))
def trilinear_ops(args: Args, out: Any) -> Count:
    """nn.Bilinear's product, (x1ᵀ A_k) x2 per output k: rows*out*(in2*(2*in1 - 1) + 2*in2 - 1);
    macs rows*out*(in1*in2 + in2).

    ``F.bilinear`` (torch's only caller) passes ``x1 (rows, in1), weight (out, in1, in2),
    x2 (rows, in2)``. NB: any other layout (its backward's) is priced naively: every term of
    the broadcast product costs 2 multiplies and is accumulated (one mac), plus the adds of the
    sums (``terms - outputs``, 0 when there are no terms).
    """
    x1, weight, x2 = args.get("i1"), args.get("i2"), args.get("i3")
    if _dims(x1)[-1:] and len(_dims(weight)) == 3 and len(_dims(x1)) == len(_dims(x2)) == 2:
        rows, (outs, in1, in2) = _dims(x1)[0], _dims(weight)
        ops = rows * outs * (in2 * dot_ops(in1) + dot_ops(in2))
        return ops, rows * outs * (in1 * in2 + in2)
    operands = [(x1, args.get("expand1")), (weight, args.get("expand2")),
                (x2, args.get("expand3"))]
    rank = max(len(_dims(x)) + len(expand or ()) for x, expand in operands)
    shapes = [_expanded(x, expand, rank) for x, expand in operands]
    terms = math.prod(max(sizes) for sizes in zip(*shapes))
    # the sums add terms - outputs; an output no term reaches (an empty batch summed out: the
    # weight gradient of zero rows) is a zero written, not a negative add
    return 2 * terms + max(terms - out_numel(out), 0), terms


@register(*aten("sparse_sampled_addmm"))
def sampled_addmm_ops(args: Args, out: Any) -> Count:
    """``beta * self + alpha * (mat1 @ mat2)`` at the stored entries of the sparse ``self``
    only: one dot product of length ``k`` per stored entry, ``nnz * (2k - 1)`` ops and
    ``nnz * k`` macs, and the epilogue per entry as ``addmm``'s per output."""
    sparse, mat1 = args.first(), args.tensor("mat1")
    if not isinstance(sparse, Tensor) or mat1 is None or mat1.dim() == 0:
        return ZERO
    entries = numel(sparse)  # its stored values
    ops, macs = product_count(entries, int(mat1.shape[-1]))
    return ops + _epilogue_ops(args, entries), macs


by_decomposition(*aten(
    "einsum", "tensordot", "inner", "outer", "ger", "kron", "chain_matmul", "linalg_multi_dot",
    "matrix_power", "linalg_matrix_power", "linalg_vecdot", "bilinear", "_sparse_mm",
))  # fmt: skip


# -- convolutions ------------------------------------------------------------------------------

def _transposed_ops(args: Args, x: Tensor, weight: Tensor, out: Tensor) -> int:
    """Ops of a transposed convolution, without bias: N*Cout * (2*(Cin/g)*landed - covered)."""
    dims = weight.dim() - 2
    return transposed_conv_ops(
        x, weight, out, ints(args.get("stride"), dims, 1), ints(args.get("padding"), dims, 0),
        ints(args.get("dilation"), dims, 1), int(args.get("groups", 1) or 1))


def transposed_conv_ops(x: Tensor, weight: Tensor, out: Tensor, stride: Sequence[int],
                        padding: Sequence[int], dilation: Sequence[int], groups: int) -> int:
    """Ops of a transposed convolution of ``x`` by ``weight`` (``(Cin, Cout/g, *K)``) into
    ``out``, without bias: N*Cout * (2*(Cin/g)*landed - covered); one entry of ``stride``,
    ``padding`` and ``dilation`` per spatial dim of ``weight``."""
    dims = weight.dim() - 2
    spatial_out = math.prod(int(s) for s in out.shape[-dims:])
    planes = numel(out) // spatial_out if spatial_out else 0  # N * Cout
    covered, landed = 1, 1
    for d in range(dims):
        dim_covered, dim_landed = transposed_reach(
            int(x.shape[d - dims]), int(out.shape[d - dims]), stride[d], padding[d],
            dilation[d], int(weight.shape[2 + d]),
        )
        covered *= dim_covered
        landed *= dim_landed
    products = int(weight.shape[0]) // groups * landed
    return planes * (2 * products - covered)


def conv(transposed: bool | None) -> BoundFormula:
    """A convolution formula; ``transposed=None`` reads the operator's ``transposed`` flag."""

    def formula(args: Args, out: Any) -> Count:
        x, weight = args.first(), args.tensor("weight")
        if not isinstance(x, Tensor) or weight is None or not isinstance(out, Tensor):
            return ZERO
        outputs = numel(out)
        bias_ops = outputs if args.tensor("bias") is not None else 0
        is_transposed = args.flag("transposed") if transposed is None else transposed
        if is_transposed:
            # weight (Cin, Cout/g, *K): every input element meets Cout/g * K taps.
            macs = numel(x) * numel(weight[0])
            return _transposed_ops(args, x, weight, out) + bias_ops, macs
        # weight (Cout, Cin/g, *K): every output element is a dot product of Cin/g * K terms.
        ops, macs = product_count(outputs, numel(weight[0]))
        return ops + bias_ops, macs

    return named(formula, "conv_transpose_ops" if transposed else "conv_ops",
                 "outputs * (2 * (Cin/g) * K - 1) (+ outputs with bias); macs outputs * (Cin/g) "
                 "* K. Transposed: N*Cout * (2*(Cin/g)*landed - covered) (+ bias); macs inputs "
                 "* (Cout/g) * K.")


register(*aten(
    "convolution", "_convolution", "convolution_overrideable",
))(conv(transposed=None))
# NB: torch runs a complex convolution as three real ones (Gauss's trick: a = conv(xr, wr),
# b = conv(xi, wi), c = conv(xr + xi, wr + wi); real a - b, imaginary c - a - b), which the
# operators count (3 real macs per complex multiply-accumulate, as FlopCounterMode); the
# composites below arrive whole under inference_mode, and count the same parts there
complex_by_decomposition(*aten("conv1d", "conv2d", "conv3d", "_convolution_mode"))(
    conv(transposed=False))
complex_by_decomposition(*aten("conv_transpose1d", "conv_transpose2d", "conv_transpose3d"))(
    conv(transposed=True))
register(*aten(
    "cudnn_convolution",
    "mkldnn_convolution", "_slow_conv2d_forward", "thnn_conv2d", "slow_conv3d",
    "slow_conv3d_forward", "slow_conv_dilated2d", "slow_conv_dilated3d", "_conv_depthwise2d",
    "conv_depthwise3d", "_nnpack_spatial_convolution", "miopen_convolution",
    "miopen_depthwise_convolution",
))(conv(transposed=False))  # fmt: skip
register(*aten(
    "cudnn_convolution_transpose",
    "slow_conv_transpose2d", "slow_conv_transpose3d", "miopen_convolution_transpose",
))(conv(transposed=True))  # fmt: skip

_plain_conv = conv(transposed=False)


@register(*aten("cudnn_convolution_relu"))
def conv_relu_ops(args: Args, out: Any) -> Count:
    """Convolution (+ bias), then ReLU: + outputs."""
    ops, macs = _plain_conv(args, out)
    return ops + PER_ELEMENT[nn.ReLU] * out_numel(out), macs


@register(*aten("cudnn_convolution_add_relu"))
def conv_add_relu_ops(args: Args, out: Any) -> Count:
    """Convolution (+ bias), + alpha * z (1 add, 1 multiply when alpha != 1), then ReLU."""
    ops, macs = _plain_conv(args, out)
    per = 1 + int(args.get("alpha", 1) != 1) + PER_ELEMENT[nn.ReLU]
    return ops + per * out_numel(out), macs


@register(*aten("conv_tbc"))
def conv_tbc_ops(args: Args, out: Any) -> Count:
    """(T, B, Cin) input, weight (K, Cin, Cout): outputs * (2*K*Cin - 1) + outputs (bias)."""
    weight = args.tensor("weight")
    if weight is None or weight.dim() != 3:
        return ZERO
    outputs = out_numel(out)
    ops, macs = product_count(outputs, int(weight.shape[0]) * int(weight.shape[1]))
    return ops + outputs, macs
