"""Booking kernel records to a compiled graph's kernels and their modules: plain records in,
per-module sums out."""

from __future__ import annotations

from moduleprofiler.timing.compiled.booking import (
    GraphCall,
    HostOp,
    KernelKey,
    KernelRecord,
    book_compiled,
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
