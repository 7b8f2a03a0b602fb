"""Formulas for table lookups: ``nn.Embedding`` and ``nn.EmbeddingBag``.

A lookup moves data and costs nothing; the arithmetic is in ``EmbeddingBag``'s reduction of each
bag and in the ``max_norm`` renormalisation check. Neither is matmul-type work, so ``macs`` is 0
(the ``per_sample_weights`` multiplies included: they scale rows, they do not contract).
The row length is the last dim of the call's output (the weight's), not ``embedding_dim``,
which goes stale when the weight is replaced by one of another shape.
"""

from __future__ import annotations

from itertools import chain, pairwise
from typing import Any

from torch import Tensor, nn

from moduleprofiler.formulas._common import no_macs
from moduleprofiler.registry import register_macs, register_ops

BAG_MEAN, BAG_MAX = 1, 2
"""``mode`` of ATen's embedding-bag operators for ``"mean"`` and ``"max"`` (0 is ``"sum"``)."""


def max_norm_ops(rows: int, dim: int) -> int:
    """rows * (2 * dim + 1): the ``max_norm`` check of ``rows`` distinct looked-up rows, each
    row's norm (dim powers, dim - 1 adds, one root) compared with ``max_norm``."""
    return rows * (2 * dim + 1)


def bag_ops(dim: int, entries: int, bags: int, mean: bool, weighted: bool) -> int:
    """dim * (entries - bags) for sum and max (a bag of n >= 1 rows: n - 1 adds or comparisons
    per element), + dim * bags for mean (one divide per element of each non-empty bag),
    + dim * entries with per-sample weights (each row scaled before the sum)."""
    return dim * (entries - bags + (bags if mean else 0) + (entries if weighted else 0))


def _index_list(indices: Tensor) -> list[int]:
    """The indices as a flat Python list (``tolist`` dispatches no torch operator)."""
    values: Any = indices.tolist()
    if indices.dim() == 0:
        return [int(values)]
    for _ in range(indices.dim() - 1):
        values = list(chain.from_iterable(values))
    return list(values)


def renorm_ops(module: nn.Embedding | nn.EmbeddingBag, indices: Tensor, dim: int) -> int:
    """With ``max_norm``: unique rows * (2 * dim + 1); else 0.

    ``max_norm`` makes every forward compute the ``norm_type`` norm of each distinct row it looks
    up (dim powers, dim - 1 adds, one root) and compare it with ``max_norm``. Rows found too
    long are then rescaled in place; which ones were is data-dependent and no longer visible
    after the forward, so the rescale (dim + 2 ops per such row) is not counted.
    """
    if module.max_norm is None or indices.numel() == 0:
        return 0
    # NB: on the meta device the indices are unknown and every index counts as distinct (as
    # for the ``embedding_renorm_`` operator)
    distinct = indices.numel() if indices.is_meta else len(set(_index_list(indices)))
    return max_norm_ops(distinct, dim)


@register_ops(nn.Embedding)
def embedding_ops(module: nn.Embedding, inputs: tuple[Any, ...], output: Any) -> int:
    """0 (a lookup), plus unique rows * (2 * dim + 1) for the max_norm check."""
    return renorm_ops(module, inputs[0], int(output.size(-1)))


def bag_sizes(module: nn.EmbeddingBag, indices: Tensor, offsets: Tensor | None) -> list[int]:
    """Entries per bag that take part in the reduction (``padding_idx`` entries do not).

    NB: on the meta device padding entries cannot be seen and no bag is taken to be empty (as
    for the ``_embedding_bag`` operator): the entries spread over the bags, one each at least.
    """
    pad = module.padding_idx
    if indices.dim() == 2:  # one bag per row, offsets unused
        rows, length = indices.shape
        if pad is None or indices.is_meta:
            return [int(length)] * int(rows)
        return [len(row) - row.count(pad) for row in indices.tolist()]
    if indices.is_meta or (offsets is not None and offsets.is_meta):
        entries = indices.numel()
        bags = 1 if offsets is None else offsets.numel() - int(module.include_last_offset)
        bags = min(max(bags, 0), entries)
        return [entries - bags + 1, *[1] * (bags - 1)] if bags else []
    bounds = offsets.tolist() if offsets is not None else [0]
    if not module.include_last_offset:  # the last bag runs to the end of the input
        bounds.append(indices.numel())
    if pad is None:
        return [end - start for start, end in pairwise(bounds)]
    flat = indices.tolist()
    return [end - start - flat[start:end].count(pad) for start, end in pairwise(bounds)]


@register_ops(nn.EmbeddingBag)
def embedding_bag_ops(module: nn.EmbeddingBag, inputs: tuple[Any, ...], output: Any) -> int:
    """dim * (entries - bags) for sum and max (+ dim * entries with per_sample_weights),
    dim * entries for mean; empty bags cost 0; plus the max_norm check."""
    indices = inputs[0]
    offsets = inputs[1] if len(inputs) > 1 else None
    weights = inputs[2] if len(inputs) > 2 else None
    sizes = bag_sizes(module, indices, offsets)
    dim = int(output.size(-1))
    return bag_ops(dim, sum(sizes), sum(1 for size in sizes if size > 0),
                   module.mode == "mean", weights is not None) + renorm_ops(module, indices, dim)


register_macs(nn.Embedding, nn.EmbeddingBag)(no_macs)
