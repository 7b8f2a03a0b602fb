"""The memory listeners on the pass runner: per-call columns on a profile's records, the
per-call join of a memory report, and gradient accumulation attributed to the owning module."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from moduleprofiler import ModuleProfiler
from moduleprofiler.autograd_nodes import is_accumulation
from moduleprofiler.memory import LiveBytesListener, SavedTensorsListener, measure_memory
from moduleprofiler.runner import Listener, PassRunner


def _chain() -> nn.Sequential:
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def test_profile_with_memory_listeners_has_per_call_columns() -> None:
    model, x = _chain(), torch.randn(3, 4)
    profile = ModuleProfiler().profile(
        model, x, backward=True, listeners=[LiveBytesListener(), SavedTensorsListener()])
    metrics = [record.metrics for record in profile.records]
    # As measured by measure_memory: ReLU saves its result, 3 * 8 * 4 = 96 bytes; the input x
    # that the first Linear saves is the model's input, not an activation.
    assert [m["self_saved_bytes"] for m in metrics] == [0, 0, 96, 0]
    assert [m["saved_bytes"] for m in metrics] == [96, 0, 96, 0]
    assert [m["self_saved_param_bytes"] for m in metrics] == [0, 0, 0, 8 * 2 * 4]
    # Live throughout: parameters (4*8 + 8 + 8*2 + 2) * 4 = 232 and x 3*4*4 = 48.
    assert all(m["max_live_bytes"] >= 232 + 48 for m in metrics)
    assert metrics[0]["max_live_bytes"] == max(m["max_live_bytes"] for m in metrics)
    assert all("backward_max_live_bytes" in m for m in metrics)
    # The counting listener's own fields are still there.
    assert [record.output_bytes for record in profile.records] == [24, 96, 96, 24]


class Twice(nn.Module):
    """One Linear called twice: two calls of one module."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(torch.tanh(self.linear(x)))


def test_with_memory_joins_per_call_and_per_module() -> None:
    model, x = Twice(), torch.randn(2, 4)
    memory = measure_memory(model, x, train=True)
    profile = ModuleProfiler().profile(model, x).merge(memory)
    by_call = {(c.path, c.call_number): c.metrics for c in memory.records}
    for record in profile.records:
        expected = by_call[(record.path, record.call_number)]
        assert record.metrics["saved_bytes"] == expected["saved_bytes"]
        assert record.metrics["max_live_bytes"] == expected["max_live_bytes"]
    first, second = profile.calls("linear")
    # tanh (in the root's own forward) saves its result, 2 * 4 * 4 = 32 bytes, charged to the
    # root; the second call's addmm saves that result too (already charged): 0 more.
    assert memory.records[0].metrics["self_saved_bytes"] == 32
    module = profile.to_df("module").set_index("module").loc["linear"]
    assert module["saved_bytes"] == first.metrics["saved_bytes"] + second.metrics["saved_bytes"]
    assert module["max_live_bytes"] == max(first.metrics["max_live_bytes"],
                                           second.metrics["max_live_bytes"])


class _Nodes(Listener):
    wants_nodes = True


def _accumulators(output: Tensor) -> dict[int, Any]:
    """``id(parameter) -> its AccumulateGrad node``, from a walk of the autograd graph."""
    found: dict[int, Any] = {}
    pending, seen = [output.grad_fn], set()
    while pending:
        node = pending.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if is_accumulation(node):
            found[id(node.variable)] = node
        pending.extend(next_node for next_node, _ in node.next_functions)
    return found


def test_an_accumulate_grad_node_belongs_to_the_first_call_of_the_owning_module() -> None:
    model = Twice()
    runner = PassRunner(model, [_Nodes()])
    output = runner.forward(lambda: model(torch.randn(2, 4)))
    nodes = _accumulators(output)
    linear_first = next(c for c in runner.calls if c.path == "linear" and c.call_number == 0)
    assert runner.owner_of_node(nodes[id(model.linear.weight)]) is linear_first
    assert runner.owner_of_node(nodes[id(model.linear.bias)]) is linear_first
    assert not is_accumulation(output.grad_fn)


def test_a_peak_set_while_accumulating_a_gradient_names_the_owning_call() -> None:
    model = nn.Sequential(nn.Linear(512, 512, bias=False))
    model[0].weight.register_hook(lambda grad: grad * 2)  # runs in the AccumulateGrad node
    training = measure_memory(model, torch.randn(1, 512), train=True).training
    assert training is not None and training.peak_call is not None
    assert (training.peak_call.path, training.peak_call.call_number, training.peak_call.phase,
            training.peak_call.accumulating) == ("0", 0, "backward", True)
    # baseline W 512*512*4 = 1048576 and x 2048; the loss and its seed 4 + 4; the model's
    # output, kept through the backward (keep_output), 1 x 512 x 4 = 2048; W's gradient and the
    # hook's doubled copy 2 * 1048576
    assert training.peak_bytes == 1048576 + 2048 + 8 + 2048 + 2 * 1048576


class Polynomial(nn.Module):
    """An operator without an operator formula, inside a module that has a formula."""

    def forward(self, x: Tensor) -> Tensor:
        return torch.special.chebyshev_polynomial_t(x, 3)


def test_memory_listeners_leave_the_counting_unchanged() -> None:
    # The memory listener observes the operators of every call; the counting listener must
    # still be told only of those it asked for (none inside a module with a formula).
    model, x = nn.Sequential(nn.Linear(4, 4), Polynomial()), torch.randn(2, 4)
    profiler = ModuleProfiler(ops_fn_map={Polynomial: lambda module, inputs, output: 7})
    plain = profiler.profile(model, x)
    measured = profiler.profile(model, x, listeners=[LiveBytesListener()])
    assert measured.unsupported_ops == plain.unsupported_ops == {}
    assert measured.complete == plain.complete
    assert measured.total_ops == plain.total_ops == 2 * 4 * 7 + 2 * 4 + 7


def test_the_memory_listeners_declare_the_columns_they_write() -> None:
    # a metric is one class: its columns are registered where it is written, with the units
    # and aggregations every view reads
    from moduleprofiler.export.columns import column_spec, is_registered
    from moduleprofiler.memory import LiveBytesListener, SavedTensorsListener

    declared = [spec.name for spec in (*SavedTensorsListener.columns,
                                       *LiveBytesListener.columns)]
    assert declared == ["saved_bytes", "self_saved_bytes", "self_saved_param_bytes",
                        "train_max_live_bytes", "backward_max_live_bytes", "max_live_bytes"]
    assert all(is_registered(name) for name in declared)
    assert column_spec("saved_bytes").aggregation == "inclusive"
    assert column_spec("max_live_bytes").aggregation == "max"
