"""Kernels to modules: Dynamo's spelling of module paths, the deepest common ancestor, and a
graph's kernels from Inductor's provenance."""

from __future__ import annotations

import pytest

from moduleprofiler.timing.compiled.kernels import (
    CompiledKernel,
    common_ancestor,
    graph_kernels,
    innermost_spelling,
    module_path,
)

KNOWN = {"", "layer1", "layer1.0", "layer1.0.conv1", "layer1.0.bn1", "blocks", "blocks.2",
         "blocks.2.fc"}


@pytest.mark.parametrize(("traced", "path"), [
    ("L['self'].layer1.0.conv1", "layer1.0.conv1"),
    ("L['fn'].__self__.layer1.0", "layer1.0"),  # a compiled module._call_impl
    ("L['self']._orig_mod.layer1", "layer1"),  # torch.compile's wrapper
    ("L['self'].blocks[2].fc", "blocks.2.fc"),
    ("L['self']._modules['blocks']._modules['2']", "blocks.2"),
    ("L['self']", ""),
])
def test_module_path_reads_dynamos_spellings(traced, path):
    assert module_path(traced, KNOWN) == path


def test_a_compiled_submodule_inside_a_compiled_model_keeps_its_wrappers_path():
    # named_modules() has blocks.2._orig_mod.fc: dropping _orig_mod gave blocks.2.fc, no
    # module of the model, cut back to the wrapper blocks.2, which took fc's kernels
    known = {"", "blocks", "blocks.2", "blocks.2._orig_mod", "blocks.2._orig_mod.fc"}
    assert module_path("L['self'].blocks[2]._orig_mod.fc", known) == "blocks.2._orig_mod.fc"
    assert module_path("L['self']._orig_mod.blocks.2._orig_mod", known) == "blocks.2._orig_mod"


def test_an_unknown_path_is_cut_back_to_its_longest_known_prefix():
    assert module_path("L['self'].layer1.0.relu", KNOWN) == "layer1.0"
    assert module_path("L['self'].layer1.0.relu") == "layer1.0.relu"


def test_the_innermost_module_is_the_last_entry_of_the_stack():
    stack = {"a": ("L['self'].layer1", object), "b": ("L['self'].layer1.0.bn1", object)}
    assert innermost_spelling(stack) == "L['self'].layer1.0.bn1"
    assert module_path(innermost_spelling(stack), KNOWN) == "layer1.0.bn1"
    assert innermost_spelling({}) == ""
    assert innermost_spelling(None) == ""


def test_common_ancestor():
    assert common_ancestor(["layer1.0.conv1", "layer1.0.bn1"]) == "layer1.0"
    assert common_ancestor(["layer1.0.bn1", "layer1.0"]) == "layer1.0"
    assert common_ancestor(["layer1.0", "layer10.0"]) == ""  # segments, not characters
    assert common_ancestor(["fc"]) == "fc"
    assert common_ancestor([]) == ""


PROVENANCE = {
    "postToPre": {"convolution": ["conv2d"], "add": ["bn"], "relu": ["relu"],
                  "view": ["flatten"], "mm": ["linear"], "cat": ["cat"]},
    "cppCodeToPost": {
        "extern_kernels.convolution:1": ["convolution"],
        "triton_poi_fused_add_relu_0:2": ["add", "relu"],
        "extern_kernels.mm:3": ["mm", "view"],
        "triton_poi_fused_cat_1:4": ["cat"],
    },
}
PRE = {"conv2d": "layer1.0.conv1", "bn": "layer1.0.bn1", "relu": "layer1.0",
       "flatten": "", "linear": "blocks.2.fc"}


def test_graph_kernels_join_provenance_and_module_stacks():
    kernels = graph_kernels(PROVENANCE, PRE, KNOWN, views={"flatten"})
    assert [(k.name, k.position) for k in kernels] == [
        ("extern_kernels.convolution", 1), ("triton_poi_fused_add_relu_0", 2),
        ("extern_kernels.mm", 3), ("triton_poi_fused_cat_1", 4)]
    conv, fused, mm, cat = kernels
    assert conv.module == "layer1.0.conv1" and conv.fused_across == ()
    assert conv.extern_op == "aten::convolution"
    # the batch norm's add and the block's ReLU: booked to the block, marked fused
    assert fused.module == "layer1.0"
    assert fused.fused_across == ("layer1.0", "layer1.0.bn1")
    assert fused.extern_op is None
    # the root's flatten is a view the matrix product reads: the product is fc's alone
    assert mm.modules == ("blocks.2.fc",)
    # a kernel none of whose nodes Dynamo's graph names is the root's
    assert cat.modules == ("",) and cat.module == ""


def test_a_kernel_of_views_only_keeps_their_modules():
    provenance = {"postToPre": {"view": ["flatten"]},
                  "cppCodeToPost": {"triton_poi_fused_view_0:1": ["view"]}}
    (kernel,) = graph_kernels(provenance, {"flatten": "layer1"}, KNOWN, views={"flatten"})
    assert kernel.modules == ("layer1",)


def test_provenance_without_positions_numbers_kernels_in_order():
    provenance = {"postToPre": {"mm": ["linear"]},
                  "cppCodeToPost": {"extern_kernels.mm": ["mm"], "triton_poi_x_0": []}}
    kernels = graph_kernels(provenance, {"linear": "blocks.2.fc"})
    assert [(k.name, k.position) for k in kernels] == [("extern_kernels.mm", 0),
                                                        ("triton_poi_x_0", 1)]


def test_extern_op_of_a_fallback_kernel():
    kernel = CompiledKernel("torch.ops.aten._scaled_dot_product_cudnn_attention.default", 5,
                            ("h.0.attn",))
    assert kernel.extern_op == "aten::_scaled_dot_product_cudnn_attention"


def test_an_extern_kernel_is_the_work_of_its_deepest_modules():
    # an attention whose mask the enclosing model built: the attention's own module's work
    provenance = {"postToPre": {"sdpa": ["attention", "mask"]},
                  "cppCodeToPost": {"torch.ops.aten._scaled_dot_product_cudnn_attention"
                                    ".default:3": ["sdpa"]}}
    known = {"", "h", "h.0", "h.0.attn"}
    (kernel,) = graph_kernels(provenance, {"attention": "h.0.attn", "mask": ""}, known)
    assert kernel.modules == ("h.0.attn",) and kernel.fused_across == ()
    # a generated kernel with the same nodes keeps both, booked to their common ancestor
    provenance["cppCodeToPost"] = {"triton_poi_fused_where_0:3": ["sdpa"]}
    (kernel,) = graph_kernels(provenance, {"attention": "h.0.attn", "mask": ""}, known)
    assert kernel.modules == ("", "h.0.attn") and kernel.module == ""


def test_a_product_of_nodes_a_post_grad_pass_created_takes_the_next_unnamed_product():
    # a backward graph: Inductor fused 2.fc's input gradient (mm_1) and the residual stream's
    # gradient add (add_4) into one addmm of a node it created (addmm_default); the other
    # products keep their own nodes
    nodes = {"mm": "2.fc", "mm_1": "2.fc", "add_4": "2", "mm_2": "0.fc", "where": "2.act"}
    provenance = {"postToPre": {name: [name] for name in nodes},
                  "cppCodeToPost": {"extern_kernels.mm:1": ["mm"],
                                    "triton_poi_fused_where_0:2": ["where"],
                                    "extern_kernels.addmm:3": ["addmm_default"],
                                    "triton_poi_fused_cat_1:4": ["cat_default"],
                                    "extern_kernels.mm:5": ["mm_2"]}}
    kernels = graph_kernels(provenance, nodes, products=["mm", "mm_1", "mm_2"])
    assert [k.modules for k in kernels] == [("2.fc",), ("2.act",), ("2.fc",), ("",),
                                            ("0.fc",)]
    # without the graph's products the created product is the root's, as any such kernel
    plain = graph_kernels(provenance, nodes)
    assert plain[2].modules == ("",)


def test_with_aten_nodes_an_extern_kernel_is_its_operators_own_nodes():
    # a backward graph's convolution gradient: Inductor's provenance also names the nodes of
    # the block after it whose gradient the kernel reads (layer2.0's gradient sum, fused in)
    nodes = {"convolution_backward": "layer1.1.conv2", "where": "layer1.1.relu",
             "add_9": "layer2.0"}
    ops = {"convolution_backward": "convolution_backward", "where": "where", "add_9": "add"}
    provenance = {"postToPre": {name: [name] for name in nodes},
                  "cppCodeToPost": {"torch.ops.aten.convolution_backward.default:4":
                                    ["convolution_backward", "where", "add_9"]}}
    (kernel,) = graph_kernels(provenance, nodes, ops=ops)
    assert kernel.modules == ("layer1.1.conv2",)
    # without the operators: the deepest modules of all its nodes
    (plain,) = graph_kernels(provenance, nodes)
    assert plain.modules == ("layer1.1.conv2", "layer1.1.relu", "layer2.0")
