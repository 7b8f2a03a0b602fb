"""The one walk of an autograd graph and the facts of its nodes."""

from __future__ import annotations

from typing import Any

import torch

from moduleprofiler.autograd_nodes import (
    ACCUMULATE_SEQUENCE_NR,
    STOP,
    is_accumulation,
    sequence_number,
    walk_nodes,
)


def _diamond() -> tuple[torch.Tensor, torch.Tensor]:
    """``d = (2x + 1) + 3 * (2x)``: ``2x`` feeds two nodes, so the walk reaches it twice."""
    x = torch.ones(3, requires_grad=True)
    a = x * 2
    d = (a + 1) + a * 3
    return x, d


def test_each_node_is_visited_once_with_its_inputs_after_it() -> None:
    _, d = _diamond()
    visited: list[str] = []
    walk_nodes([(d.grad_fn, None)], lambda node, _: visited.append(type(node).__name__))
    # d's add, (a + 1)'s add, (a * 3)'s mul, a's mul (reached twice, visited once) and the
    # leaf's AccumulateGrad: 5 nodes
    assert sorted(visited) == sorted(["AddBackward0", "AddBackward0", "MulBackward0",
                                      "MulBackward0", "AccumulateGrad"])
    assert visited[0] == "AddBackward0"


def test_the_context_flows_to_inputs_and_stop_leaves_them_unwalked() -> None:
    _, d = _diamond()
    depths: dict[str, list[int]] = {}

    def visit(node: Any, depth: int) -> Any:
        depths.setdefault(type(node).__name__, []).append(depth)
        return STOP if type(node).__name__ == "MulBackward0" else depth + 1

    walk_nodes([(d.grad_fn, 0)], visit)
    # d's add at depth 0; its inputs (a + 1)'s add and (a * 3)'s mul at depth 1; the mul
    # stops there, the add goes on to a's mul at depth 2, which stops: the leaf's
    # AccumulateGrad (below a's mul) is never reached
    assert depths["AddBackward0"] == [0, 1]
    assert sorted(depths["MulBackward0"]) == [1, 2]
    assert "AccumulateGrad" not in depths


def test_sequence_numbers_and_accumulation() -> None:
    x, d = _diamond()
    assert d.grad_fn is not None
    leaf_node = d.grad_fn.next_functions[1][0].next_functions[0][0].next_functions[0][0]
    assert type(leaf_node).__name__ == "AccumulateGrad" and leaf_node.variable is x
    assert sequence_number(leaf_node) == ACCUMULATE_SEQUENCE_NR
    assert is_accumulation(leaf_node)
    assert not is_accumulation(d.grad_fn)
    # created in order: a's mul before d's add
    mul = d.grad_fn.next_functions[1][0].next_functions[0][0]
    assert type(mul).__name__ == "MulBackward0"
    assert sequence_number(mul) < sequence_number(d.grad_fn)  # type: ignore[operator]
    assert sequence_number(object()) is None
    assert not is_accumulation(None)
