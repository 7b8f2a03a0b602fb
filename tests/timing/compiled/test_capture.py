"""What the compiled clock reads of a compiled model before compiling it again: the module
that was compiled and its Inductor options (wrapping compiles nothing)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from moduleprofiler.timing.compiled.capture import compiled_original, recorded_compile


def test_a_torch_compile_wrapper_gives_its_original_and_options():
    model = nn.Linear(4, 4)
    found = compiled_original(torch.compile(model, mode="max-autotune-no-cudagraphs"))
    assert found is not None
    original, settings, note = found
    assert original is model
    assert settings.inductor.get("max_autotune") is True and note is None
    assert settings.dynamic is None and settings.fullgraph is False  # torch.compile's defaults


def test_a_model_compiled_in_place_is_its_own_original():
    model = nn.Linear(4, 4)
    model.compile(options={"epilogue_fusion": False})
    found = compiled_original(model)
    assert found is not None
    original, settings, note = found
    assert original is model
    assert settings.inductor == {"epilogue_fusion": False} and note is None
    assert settings.dynamic is None


def test_another_backend_is_said():
    found = compiled_original(torch.compile(nn.Linear(4, 4), backend="eager"))
    assert found is not None
    assert found.settings.inductor == {} and "'eager' backend" in (found.note or "")


@pytest.mark.parametrize("dynamic", [True, False])
@pytest.mark.parametrize("in_place", [False, True])
def test_the_models_dynamic_is_read(dynamic, in_place):
    # the clock compiles with it: dynamic=True compiles kernels for any size, and timing
    # static ones in their place times another program
    model = nn.Linear(4, 4)
    if in_place:
        model.compile(dynamic=dynamic)
    found = compiled_original(model if in_place else torch.compile(model, dynamic=dynamic))
    assert found is not None and found.settings.dynamic is dynamic


def test_a_plain_model_is_not_compiled():
    assert compiled_original(nn.Linear(4, 4)) is None


def test_each_recorded_compile_traces_a_function_of_its_own():
    # Dynamo keeps compiled code on the traced code object: a shared one (nn.Module's
    # _call_impl) would collect one entry per call and reach Dynamo's recompile limit
    model = nn.Linear(4, 4)
    first, _ = recorded_compile(model)
    second, _ = recorded_compile(model)
    codes = [compiled.func._torchdynamo_orig_callable.__code__ for compiled in (first, second)]
    assert codes[0] is not codes[1]
    assert nn.Module._call_impl.__code__ not in codes
    assert first.args == (model,)


def test_a_backward_graphs_kernels_are_named_by_the_modules_they_differentiate():
    from tests.timing.helpers import residual_model

    compiled, recorder = recorded_compile(residual_model())
    x = torch.randn(8, 16)  # needs no gradient: the first Linear's input gradient is not made
    compiled(x).sum().backward()
    forward, backward = recorder.graphs
    assert not forward.backward and backward.backward
    kernels = [(k.name.split("_")[0] if "_fused_" in k.name else k.name, k.module)
               for k in backward.kernels]
    # the second block: its ReLU's gradient, then its Linear's weight gradient (mm), bias
    # gradient (a sum) and input gradient, which Inductor fuses with the residual stream's
    # gradient add into one addmm of a node it created (named by the graph's product that
    # no kernel names: 2.fc's); then one kernel of the LayerNorm's backward with the first
    # block's ReLU and residual gradients (the root's); the first Linear's weight and bias
    # gradients (mm, sum)
    assert kernels == [("cpp", "2.act"), ("extern_kernels.mm", "2.fc"), ("cpp", "2.fc"),
                       ("extern_kernels.addmm", "2.fc"), ("cpp", ""),
                       ("extern_kernels.mm", "0.fc"), ("cpp", "0.fc")]
    assert backward.kernels[4].fused_across == ("0", "0.act", "1")
    assert not recorder.notes


def test_a_backward_node_without_a_stack_is_the_work_of_the_nodes_it_reads():
    from torch import fx

    from moduleprofiler.timing.compiled.capture import backward_nodes

    graph = fx.Graph()
    tangent, weight, hidden = (graph.placeholder(name) for name in ("tangent", "w", "h"))
    permute = graph.call_function(torch.ops.aten.permute.default, (weight, [1, 0]))
    permute.meta["fwd_nn_module_stack"] = {"lm_head": ("L['self'].lm_head", nn.Linear)}
    recomputed = graph.call_function(torch.ops.aten.relu.default, (hidden,))
    recomputed.meta["nn_module_stack"] = {"h.0.act": ("L['self'].h.0.act", nn.ReLU)}
    recomputed.meta["seq_nr"] = 7  # not read: a sum of gradients carries a stale one
    # a padded matrix product (a joint-graph pass made it: no stack, no sequence number)
    padded = graph.call_function(torch.ops.aten.mm.default, (tangent, permute))
    graph.call_function(torch.ops.aten.mm.default, (tangent, weight))  # reads no module
    # the engine's sum of one tensor's gradients from two consumers: their common ancestor
    summed = graph.call_function(torch.ops.aten.add.Tensor, (padded, recomputed))
    summed.meta["seq_nr"] = 7
    graph.output((summed,))
    nodes = backward_nodes(fx.GraphModule(nn.Module(), graph),
                           lambda spelled: spelled.removeprefix("L['self']."))
    assert nodes.modules == {"permute_default": "lm_head", "relu_default": "h.0.act",
                             "mm_default": "lm_head", "add_tensor": ""}
    # those named only by what they read name a kernel's module only when it has no other
    assert nodes.views == {"permute_default", "mm_default", "add_tensor"}
    assert nodes.products == ["mm_default", "mm_default_1"]
    assert nodes.ops["mm_default"] == "mm" and nodes.ops["tangent"] == ""
