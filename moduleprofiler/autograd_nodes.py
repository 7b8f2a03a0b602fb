"""Facts of autograd nodes, and the one walk of an autograd graph.

A node's *sequence number* is autograd's counter when the forward created it: the runner maps it
to the module call that was innermost then (:meth:`~moduleprofiler.runner.PassRunner.
owner_of_node`). The walks of a graph (the leaves a loss reaches, the nodes a module call
created, the graph a checkpoint's rerun rebuilt) differ only in what they do at a node and
where they stop: :func:`walk_nodes` is their one loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

ACCUMULATE_SEQUENCE_NR = 2**64 - 1
"""Sequence number of ``AccumulateGrad`` nodes (created for a leaf, not by a forward call)."""

REENTRANT_CHECKPOINT_NODE = "CheckpointFunctionBackward"
"""The autograd node of ``torch.utils.checkpoint.checkpoint(..., use_reentrant=True)``: it
reruns its function inside the backward and differentiates the result with a nested
``torch.autograd.backward``, so it refuses ``torch.autograd.grad`` and a backward restricted to
chosen inputs."""

STOP: Any = object()
"""What a :func:`walk_nodes` visitor returns to leave a node's inputs unwalked."""

Context = TypeVar("Context")


def sequence_number(node: Any) -> int | None:
    """The autograd sequence number of ``node`` (``None`` where it has none to give)."""
    try:
        return int(node._sequence_nr())
    except (AttributeError, RuntimeError, TypeError):
        return None


def is_accumulation(node: Any) -> bool:
    """Whether the autograd ``node`` is an ``AccumulateGrad`` (it adds a leaf's gradient to
    its ``.grad``)."""
    return sequence_number(node) == ACCUMULATE_SEQUENCE_NR


def walk_nodes(starts: Iterable[tuple[Any, Context]],
               visit: Callable[[Any, Context], Any]) -> None:
    """Visit every node reachable from ``starts`` (``(node, context)`` pairs) once, depth
    first: ``visit(node, context)`` returns the context its inputs are visited with, or
    :data:`STOP` to leave them unwalked."""
    # visited nodes are kept alive: a node's Python object may be made anew on each access
    # and freed after it, and a freed object's id is reused (seen on torch 2.11)
    seen: dict[int, Any] = {}
    pending = list(starts)
    while pending:
        node, context = pending.pop()
        if node is None or id(node) in seen:
            continue
        seen[id(node)] = node
        follow = visit(node, context)
        if follow is not STOP:
            pending.extend((child, follow) for child, _ in node.next_functions
                           if child is not None)
