"""Booking kernel records to a compiled graph's kernels and their modules: plain records in,
per-module sums out."""

from __future__ import annotations

from collections import Counter

from moduleprofiler.timing.compiled.booking import (
    GraphCall,
    HostOp,
    KernelKey,
    KernelRecord,
    ModuleRange,
    book_compiled,
    eager_ops,
    outside_ops,
    top_level_ops,
)
from moduleprofiler.timing.compiled.kernels import CompiledKernel

GRAPH = {"g": [
    CompiledKernel("extern_kernels.convolution", 1, ("conv",)),
    CompiledKernel("triton_poi_fused_relu_0", 2, ("block", "block.bn")),
    CompiledKernel("extern_kernels.convolution", 3, ("conv2",)),
    CompiledKernel("triton_poi_fused_relu_0", 4, ("head",)),
]}


def _iteration(k: int, base: int) -> tuple[GraphCall, list[HostOp], list[KernelRecord]]:
    """One call of graph ``g`` on thread 1 at ``base`` ns: two convolutions (ATen ranges with
    a nested one inside), each launching two device kernels, and the generated kernel, called
    twice."""
    call = GraphCall("g", 1, base, base + 1000, k)
    ops = [HostOp("aten::convolution", 1, base + 10, base + 100),
           HostOp("aten::_convolution", 1, base + 20, base + 90),  # nested: not a kernel call
           HostOp("aten::convolution", 1, base + 300, base + 400)]
    kernels = [KernelRecord("cudnn_conv_a", 7, 1, base + 30),
               KernelRecord("cudnn_conv_b", 3, 1, base + 80),
               KernelRecord("triton_poi_fused_relu_0", 5, 1, base + 200),
               KernelRecord("cudnn_conv_a", 11, 1, base + 350),
               KernelRecord("triton_poi_fused_relu_0", 13, 1, base + 500)]
    return call, ops, kernels


def _two_iterations():
    calls, ops, kernels = [], [], []
    for k, base in enumerate((0, 10_000)):
        call, call_ops, call_kernels = _iteration(k, base)
        calls.append(call)
        ops += call_ops
        kernels += call_kernels
    return calls, ops, kernels


def test_each_record_goes_to_its_graph_kernel_and_module():
    calls, ops, kernels = _two_iterations()
    booking = book_compiled(GRAPH, calls, ops, kernels, iterations=2)
    # first convolution: 7 + 3 (both device kernels inside its ATen range); second: 11
    assert booking.module_ns["conv"] == [10, 10]
    assert booking.module_ns["conv2"] == [11, 11]
    # the generated kernel's first call fuses block and block.bn: booked to block; its second
    # call is the head's
    assert booking.module_ns["block"] == [5, 5]
    assert booking.module_ns["head"] == [13, 13]
    assert booking.kernel_ns[KernelKey("g", 1)] == [10, 10]
    assert booking.kernel_launches[KernelKey("g", 1)] == 4  # 2 device kernels x 2 iterations
    # which device kernels the first convolution ran: one of each name per iteration
    assert booking.device_names[KernelKey("g", 1)] == Counter({"cudnn_conv_a": 2,
                                                               "cudnn_conv_b": 2})
    assert booking.device_names[KernelKey("g", 3)] == Counter({"cudnn_conv_a": 2})
    # 7 + 3 + 5 + 11 + 13 = 39 per iteration, all booked
    assert booking.in_graph_ns == [39, 39]
    assert booking.booked_ns == [39, 39]
    assert booking.coverage == 1.0


def test_work_outside_a_graph_call_and_unknown_kernels_are_kept_apart():
    calls, ops, kernels = _two_iterations()
    kernels.append(KernelRecord("Memcpy HtoD", 17, 1, 5_000))  # between the two calls
    kernels.append(KernelRecord("vectorized_elementwise", 2, 1, 10_600))  # in call 2, unknown
    kernels.append(KernelRecord("triton_poi_fused_relu_0", 4, 2, 300))  # another thread
    booking = book_compiled(GRAPH, calls, ops, kernels, iterations=2)
    assert booking.outside_ns == 17 + 4
    assert booking.unmatched == {"vectorized_elementwise": 2}
    assert booking.in_graph_ns == [39, 41]
    # (39 + 39) / (39 + 41)
    assert booking.coverage == 78 / 80


def test_a_graph_without_provenance_books_nothing():
    calls, ops, kernels = _two_iterations()
    booking = book_compiled({"g": []}, calls, ops, kernels, iterations=2)
    assert booking.module_ns == {}
    assert booking.coverage == 0.0


def test_cpu_kernel_ranges_carry_a_graph_prefix():
    call = GraphCall("g", 1, 0, 1000, 0)
    kernels = [KernelRecord("graph_0_triton_poi_fused_relu_0", 5, 1, 10)]
    booking = book_compiled(GRAPH, [call], [], kernels, iterations=1)
    assert booking.module_ns == {"block": [5]}


def test_top_level_ops_are_those_directly_inside_a_call():
    calls, ops, _ = _two_iterations()
    found = top_level_ops(calls, [*ops, HostOp("aten::empty", 1, 5_000, 5_010)])
    assert [op.start for op in found[calls[0]]] == [10, 300]
    assert [op.start for op in found[calls[1]]] == [10_010, 10_300]
    assert len(found) == 2


def test_graphs_sharing_a_key_are_told_apart_by_call_order():
    # one matrix product after a graph break in each of two modules: the same code, one key;
    # the first graph compiled (first called) is a's, the second b's
    first = [CompiledKernel("extern_kernels.addmm", 0, ("a",))]
    second = [CompiledKernel("extern_kernels.addmm", 0, ("b",))]
    calls, ops, kernels = [], [], []
    for k, base in enumerate((0, 10_000)):
        for offset, ns in ((0, 7), (2_000, 11)):  # a's call, then b's, in each iteration
            start = base + offset
            calls.append(GraphCall("g", 1, start, start + 1000, k))
            ops.append(HostOp("aten::addmm", 1, start + 10, start + 100))
            kernels.append(KernelRecord("gemm", ns, 1, start + 50))
    booking = book_compiled({"g": second}, calls, ops, kernels, iterations=2,
                            versions={"g": [first, second]})
    assert booking.module_ns == {"a": [7, 7], "b": [11, 11]}
    assert booking.kernel_ns[KernelKey("g", 0, 0)] == [7, 7]
    assert booking.kernel_ns[KernelKey("g", 0, 1)] == [11, 11]
    # without the versions every call is the one graph's: b's (the bug this guards against)
    assert book_compiled({"g": second}, calls, ops, kernels, iterations=2).module_ns == {
        "b": [18, 18]}


# A model with a compiled submodule: the eager root calls eager "enc" (whose child "enc.fc" is
# eager too), then the compiled part "dec" (graph "g" inside its range), on thread 1.
RANGES = [ModuleRange("", 1, 0, 5000), ModuleRange("enc", 1, 10, 1000),
          ModuleRange("enc.fc", 1, 20, 500), ModuleRange("dec", 1, 2000, 4000)]
PART = {"g": [CompiledKernel("triton_poi_fused_relu_0", 1, ("dec.act",))]}


def test_eager_kernels_go_to_the_innermost_module_range_and_graph_kernels_by_provenance():
    calls = [GraphCall("g", 1, 2100, 3900)]
    kernels = [KernelRecord("gemm", 7, 1, 100),      # launched in enc.fc
               KernelRecord("add", 3, 1, 700),       # in enc, after enc.fc returned
               KernelRecord("copy", 2, 1, 4500),     # the root's own, after dec
               KernelRecord("triton_poi_fused_relu_0", 5, 1, 2500),  # dec's graph
               KernelRecord("memset", 4, 1, 6000)]   # outside every range
    booking = book_compiled(PART, calls, [], kernels, 1, ranges=RANGES)
    assert booking.module_ns == {"enc.fc": [7], "enc": [3], "": [2], "dec.act": [5]}
    assert booking.eager_ns == [7 + 3 + 2] and booking.in_graph_ns == [5]
    assert dict(booking.direct_launches) == {"enc.fc": 1, "enc": 1, "": 1}
    assert booking.outside_ns == 4
    # booked 17 of the program's 5 + 12 = 17 ns in modules' ranges and graph calls
    assert booking.coverage == 1.0


def test_on_a_cpu_the_eager_kernels_are_the_outermost_operators_outside_graph_calls():
    calls = [GraphCall("g", 1, 2100, 3900)]
    ops = [HostOp("aten::linear", 1, 30, 400),
           HostOp("aten::addmm", 1, 40, 390),          # inside aten::linear: not counted
           HostOp("aten::add", 1, 600, 650),
           HostOp("Torch-Compiled Region: 0/0", 1, 2050, 3950),  # a wrapper, not an operator
           HostOp("aten::relu", 1, 2200, 2300),       # inside the graph call: the graph's
           HostOp("aten::cat", 1, 5500, 5600)]        # outside every module range
    found = eager_ops(RANGES, calls, ops)
    assert [op.name for op in found] == ["aten::linear", "aten::add"]


def test_on_a_cpu_a_whole_models_operators_outside_its_graphs_are_found():
    # no module ranges (a model compiled whole): every outermost operator outside the graph
    # calls is code Dynamo ran eagerly; one holding a graph call (an autograd node running a
    # compiled backward) is the graph's
    calls = [GraphCall("g", 1, 2100, 3900)]
    ops = [HostOp("aten::relu", 1, 30, 400),
           HostOp("aten::clamp_min", 1, 40, 390),     # inside aten::relu: not counted
           HostOp("Torch-Compiled Region: 0/0", 1, 2050, 3950),  # a wrapper, not an operator
           HostOp("aten::addmm", 1, 2200, 2300),      # inside the graph call: the graph's
           HostOp("autograd::engine::evaluate_function: X", 1, 2000, 4000),  # holds the call
           HostOp("aten::_local_scalar_dense", 1, 5500, 5600)]
    assert [op.name for op in outside_ops(calls, ops)] == ["aten::relu",
                                                          "aten::_local_scalar_dense"]


# A CUDA graph's replay: one host launch (thread 1 at 50) ran every kernel of graph "r"; an
# input copy ran first, launched by an operator that is none of the graph's kernels.
REPLAYED = {"r": [CompiledKernel("extern_kernels.mm", 0, ("enc.fc",)),
                  CompiledKernel("triton_poi_fused_relu_0", 1, ("enc.act",)),
                  CompiledKernel("extern_kernels.addmm", 2, ("head",)),
                  CompiledKernel("triton_poi_fused_add_1", 3, ("enc", "head"))]}


def test_a_cuda_graph_replay_books_its_extern_kernels_in_device_order():
    call = GraphCall("r", 1, 0, 1000)
    # the copy's operator, and the runtime call that launched the replay (not an operator)
    ops = [HostOp("aten::_foreach_copy_", 1, 10, 40), HostOp("cudaGraphLaunch", 1, 45, 60)]
    kernels = [KernelRecord("copy_kernel", 2, 1, 20, start=100),   # the input copy
               # the replay, in the order the device ran it
               KernelRecord("sgemm_64x64", 11, 1, 50, start=200),   # mm -> enc.fc
               KernelRecord("splitKreduce", 3, 1, 50, start=210),   # the same mm's reduction
               KernelRecord("triton_poi_fused_relu_0", 5, 1, 50, start=220),
               KernelRecord("gemm_bias", 17, 1, 50, start=230),     # addmm -> head
               KernelRecord("triton_poi_fused_add_1", 7, 1, 50, start=240)]
    booking = book_compiled(REPLAYED, [call], ops, kernels, 1)
    # enc.fc: 11 + 3 (its GEMM and the split-K reduction); the fused add (enc, head): root
    assert booking.module_ns == {"": [2 + 7], "enc.fc": [14], "enc.act": [5], "head": [17]}
    assert booking.kernel_launches[KernelKey("r", 0)] == 2
    assert booking.device_names[KernelKey("r", 0)] == Counter({"sgemm_64x64": 1,
                                                               "splitKreduce": 1})
    assert dict(booking.direct_launches) == {"": 1}
    assert not booking.unmatched and booking.coverage == 1.0
    # one graph launch ran the 5 kernels of the replay (not the copy)
    assert booking.replays == 1 and booking.replayed == 5


def test_outside_a_replay_a_kernel_no_name_matches_stays_unmatched():
    # one launch point each: not a replay, so no extern kernel is guessed for it
    booking = book_compiled(REPLAYED, [GraphCall("r", 1, 0, 1000)], [],
                            [KernelRecord("mystery", 4, 1, 30, start=30)], 1)
    assert dict(booking.unmatched) == {"mystery": 4} and booking.coverage == 0.0


def test_a_backward_graphs_kernels_are_the_modules_backward_time():
    graphs = {"fwd": [CompiledKernel("triton_poi_fused_relu_0", 1, ("block",))],
              "bwd": [CompiledKernel("triton_poi_fused_threshold_backward_0", 1, ("block",)),
                      CompiledKernel("triton_poi_fused_sum_1", 2, ("head",))]}
    calls = [GraphCall("fwd", 1, 0, 100), GraphCall("bwd", 2, 200, 400)]  # another thread
    kernels = [KernelRecord("triton_poi_fused_relu_0", 5, 1, 50),
               KernelRecord("triton_poi_fused_threshold_backward_0", 7, 2, 250),
               KernelRecord("triton_poi_fused_sum_1", 3, 2, 300),
               KernelRecord("unknown_kernel", 2, 2, 350)]
    booking = book_compiled(graphs, calls, [], kernels, iterations=1, backward={"bwd"})
    assert booking.module_ns == {"block": [5]}
    assert booking.backward_ns == {"block": [7], "head": [3]}
    # 7 + 3 + 2 of the backward graph's kernels ran, 7 + 3 booked: 10 / 12
    assert booking.backward_in_graph_ns == [12]
    assert booking.backward_coverage == 10 / 12
    # 5 + 10 of 5 + 12 in all
    assert booking.booked_ns == [15] and booking.coverage == 15 / 17


def test_in_a_replay_a_memset_prepares_the_next_extern_kernel():
    # a Llama-style decoder layer under reduce-overhead on an H200: cuDNN's attention sets
    # its buffer (a memset) and then runs, and the next extern kernel is o_proj's GEMM. The
    # memset used to take the attention and the attention's kernel o_proj's GEMM: o_proj got
    # 23.2 + 6.5 us a layer, the attention 0.7 us
    graph = {"r": [CompiledKernel("triton_poi_fused_sdpa_to_copy_12", 12, ("model",)),
                   CompiledKernel("torch.ops.aten._scaled_dot_product_cudnn_attention"
                                  ".default", 13, ("model",)),
                   CompiledKernel("extern_kernels.mm", 14, ("layers.0.o_proj",)),
                   CompiledKernel("triton_per_fused_add_mean_15", 15, ("model",))]}
    replay = [("triton_poi_fused_sdpa_to_copy_12", 5535), ("Memset (Device)", 735),
              ("cudnn_generated_fort_native_sdpa_sm90_flash_fprop", 23200),
              ("nvjet_sm90_tst_128x128_64x6_2x1_v_bz_TNT", 6529),
              ("triton_per_fused_add_mean_15", 4000)]
    kernels = [KernelRecord(name, ns, 1, 50, start=100 + 10 * i)
               for i, (name, ns) in enumerate(replay)]
    booking = book_compiled(graph, [GraphCall("r", 1, 0, 1000)], [], kernels, 1)
    # the attention: 735 + 23200 (memset and kernel); o_proj: its GEMM alone
    assert booking.kernel_ns[KernelKey("r", 13)] == [735 + 23200]
    assert booking.kernel_ns[KernelKey("r", 14)] == [6529]
    assert booking.module_ns == {"model": [5535 + 735 + 23200 + 4000],
                                 "layers.0.o_proj": [6529]}
    assert booking.kernel_launches[KernelKey("r", 13)] == 2


def test_launch_configurations_are_counted_per_graph_kernel_beside_the_names():
    calls, ops, kernels = _two_iterations()
    # the first convolution's cuDNN kernel ran with one grid in the first iteration and
    # another in the second; the generated kernel's records carry no configuration
    wide, narrow = "grid 64x1x1, block 128x1x1", "grid 32x1x1, block 128x1x1"
    configured = []
    for record in kernels:
        if record.name == "cudnn_conv_a" and record.time in (30, 10_030):
            record = KernelRecord(record.name, record.duration, record.thread, record.time,
                                  record.start, wide if record.time == 30 else narrow)
        configured.append(record)
    booking = book_compiled(GRAPH, calls, ops, configured, iterations=2)
    assert booking.launch_configs[KernelKey("g", 1)] == Counter(
        {("cudnn_conv_a", wide): 1, ("cudnn_conv_a", narrow): 1})
    # a record without a configuration is counted by name only
    assert booking.device_names[KernelKey("g", 1)]["cudnn_conv_b"] == 2
    assert KernelKey("g", 2) not in booking.launch_configs


def test_launch_configurations_reach_the_kernel_rows_and_survive_merged_blocks():
    from moduleprofiler.timing.clocks.compiled import _merged
    from moduleprofiler.timing.compiled.capture import CompiledGraph
    from moduleprofiler.timing.compiled.run import kernel_rows

    wide, narrow = "grid 64x1x1, block 128x1x1", "grid 32x1x1, block 128x1x1"
    blocks = []
    for config in (wide, narrow):  # two traced blocks, the convolution's kernel configured
        calls, ops, kernels = _iteration(0, 0)
        kernels = [KernelRecord(r.name, r.duration, r.thread, r.time, r.start,
                                config if r.name == "cudnn_conv_a" else "") for r in kernels]
        blocks.append(book_compiled(GRAPH, [calls], ops, kernels, iterations=1))
    merged = _merged(*blocks)
    # cudnn_conv_a ran once per block in each convolution: one of each configuration
    assert merged.launch_configs[KernelKey("g", 1)] == Counter(
        {("cudnn_conv_a", wide): 1, ("cudnn_conv_a", narrow): 1})
    rows = kernel_rows(merged, [CompiledGraph("g", False, GRAPH["g"])])
    by_position = {row.position: row for row in rows}
    # a row lists each (device kernel, configuration) pair once, sorted
    assert by_position[3].launch_configs == (("cudnn_conv_a", narrow), ("cudnn_conv_a", wide))
    assert by_position[2].launch_configs == ()  # the generated kernel's records had none
