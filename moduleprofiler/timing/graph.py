"""The autograd nodes an outermost module call created, found by one walk of its graph.

The listeners that act in the backward (the clock, the named ranges) hook the nodes each call
created when the outermost call returns: its output's graph is walked from the output nodes,
each node is given the call that created it by the runner's one map
(:meth:`~moduleprofiler.runner.PassRunner.owner_of_node`), and the walk stops at nodes created
before the call or outside every call (not its work). ``AccumulateGrad`` nodes (they write a
leaf's ``.grad``) are set apart with the module whose call consumed the leaf.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from moduleprofiler.autograd_nodes import ACCUMULATE_SEQUENCE_NR, STOP, sequence_number, walk_nodes
from moduleprofiler.call import Call
from moduleprofiler.runner import PassRunner
from moduleprofiler.shapes import iter_tensors


@dataclass
class CallGraph:
    """What :func:`call_graph` found."""

    roots: list[Any] = field(default_factory=list)
    """The output's own nodes: the backward of the call starts at them."""
    nodes: list[tuple[int, Any, int]] = field(default_factory=list)
    """``(sequence number, node, index of the call that created it)``, in creation order."""
    accumulate: list[tuple[Any, nn.Module | None]] = field(default_factory=list)
    """``(AccumulateGrad node, the module whose call consumed its leaf)``; ``None``: a leaf
    that is no parameter of the model (an input that requires grad), or consumed outside
    every call."""


def call_graph(runner: PassRunner, outer: Call, output: Any,
               hooked: Container[int] = ()) -> CallGraph:
    """The nodes created during the outermost call ``outer``, reachable from ``output``; the
    ``AccumulateGrad`` nodes whose id is in ``hooked`` (their owners known) left out."""
    found = CallGraph()
    roots = {id(t.grad_fn): t.grad_fn for t in iter_tensors(output) if t.grad_fn is not None}

    def visit(node: Any, consumer: int) -> Any:
        number = sequence_number(node)
        if number == ACCUMULATE_SEQUENCE_NR:
            if id(node) not in hooked:
                owned = consumer >= 0 and runner.owner_of_node(node) is not None
                found.accumulate.append((node, runner.calls[consumer].module if owned else None))
            return STOP
        owner = runner.owner_of_node(node)
        if number is None or owner is None or owner.index < outer.index:
            return STOP  # created before this call, or outside every call: not its work
        found.nodes.append((number, node, owner.index))
        return owner.index

    walk_nodes(((node, -1) for node in roots.values()), visit)
    if found.nodes:
        found.roots = list(roots.values())
        found.nodes.sort(key=lambda item: item[0])
    return found
