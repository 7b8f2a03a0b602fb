"""Booking device activity to the ranges that launched it, on synthetic event lists."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from moduleprofiler.runner import PassRunner
from moduleprofiler.timing.booking import Activity, Launch, Range, book, busy_ns
from moduleprofiler.timing.device_trace import RANGE_PREFIX, choose_clock, records_of


def test_the_innermost_range_on_the_launching_thread_gets_the_kernel():
    ranges = [Range("0:f0", 1, 0, 100),      # the root call
              Range("0:f1", 1, 10, 40),      # its first child
              Range("0:f2", 1, 50, 90),      # its second child
              Range("0:f3", 1, 55, 60)]      # a grandchild inside the second
    launches = [Launch(1, 1, 5),    # root, before any child
                Launch(2, 1, 20),   # child 1
                Launch(3, 1, 57),   # grandchild
                Launch(4, 1, 70),   # child 2 after the grandchild closed
                Launch(5, 1, 95)]   # root again, after both children
    activities = [Activity(c, 1000 + 10 * c, 1000 + 10 * c + c, 7) for c in range(1, 6)]
    booking = book(ranges, launches, activities)
    # durations are the correlation ids: root 1 + 5, child 1: 2, grandchild 3, child 2: 4
    assert booking.own_ns("0:f0") == 6
    assert booking.own_ns("0:f1") == 2
    assert booking.own_ns("0:f3") == 3
    assert booking.own_ns("0:f2") == 4
    assert booking.outside == []
    assert booking.total_ns == 15


def test_backward_thread_ranges_are_kept_apart_from_the_forward_thread():
    # the forward range on thread 1 spans t = 0..100; a backward node on thread 2 runs at
    # t = 50..60 (during the forward's span on the clock, on another thread)
    ranges = [Range("0:f0", 1, 0, 100), Range("0:b0", 2, 50, 60)]
    launches = [Launch(10, 2, 55), Launch(11, 1, 55), Launch(12, 2, 70)]
    activities = [Activity(10, 0, 7), Activity(11, 0, 5), Activity(12, 0, 3)]
    booking = book(ranges, launches, activities)
    assert booking.own_ns("0:b0") == 7
    assert booking.own_ns("0:f0") == 5
    # launched on thread 2 outside its node's range: the engine's own work, no module's
    assert [a.correlation for a in booking.outside] == [12]


def test_copies_sets_and_several_streams_are_device_work_too():
    ranges = [Range("0:f0", 1, 0, 100)]
    launches = [Launch(1, 1, 10), Launch(2, 1, 20), Launch(3, 1, 30)]
    activities = [Activity(1, 0, 40, stream=7, kind="kernel"),
                  Activity(2, 10, 30, stream=9, kind="memcpy"),
                  Activity(3, 50, 55, stream=7, kind="memset")]
    booking = book(ranges, launches, activities)
    # device time is the summed duration: 40 + 20 + 5 = 65
    assert booking.own_ns("0:f0") == 65
    # busy time counts the overlap of the two streams once: [0, 40] and [50, 55] = 45
    assert busy_ns(booking.own["0:f0"]) == 45


def test_a_launch_without_a_range_or_without_a_launch_record_is_outside():
    ranges = [Range("0:f0", 1, 100, 200)]
    booking = book(ranges, [Launch(1, 1, 50)], [Activity(1, 0, 9), Activity(2, 0, 4)])
    assert booking.own_ns("0:f0") == 0
    assert sorted(a.correlation for a in booking.outside) == [1, 2]
    assert booking.total_ns == 13


def test_back_to_back_ranges_touching_at_a_boundary():
    # a range ending at t = 10 and the next starting at t = 10: a launch at 10 belongs to the
    # range still open (the earlier one ends at 10 inclusive; the next has started too, and
    # the innermost open one is the later)
    ranges = [Range("0:f1", 1, 0, 10), Range("0:f2", 1, 10, 20)]
    booking = book(ranges, [Launch(1, 1, 10), Launch(2, 1, 15)],
                   [Activity(1, 0, 1), Activity(2, 0, 2)])
    assert booking.own_ns("0:f2") == 3
    assert booking.own_ns("0:f1") == 0


def test_busy_time_of_no_work_is_zero_and_of_back_to_back_work_their_sum():
    assert busy_ns([]) == 0
    # [0, 10] then [10, 30]: no gap, no overlap: 10 + 20 = 30
    assert busy_ns([Activity(1, 0, 10), Activity(2, 10, 30)]) == 30


def _event(name, device, start, duration, correlation, linked=0, thread=1,
           annotation=False):
    return SimpleNamespace(
        name=lambda: name, device_type=lambda: device, start_ns=lambda: start,
        duration_ns=lambda: duration, correlation_id=lambda: correlation,
        linked_correlation_id=lambda: linked, start_thread_id=lambda: thread,
        is_user_annotation=lambda: annotation, device_resource_id=lambda: 7)


def test_records_of_reads_the_profilers_raw_events():
    cpu = torch._C._autograd.DeviceType.CPU
    cuda = torch._C._autograd.DeviceType.CUDA
    events = [
        _event(RANGE_PREFIX + "0:f0", cpu, 0, 100, 1),
        _event("aten::addmm", cpu, 10, 50, 2),                 # an operator: id 2
        _event("cudaLaunchKernel", cpu, 20, 5, 19, linked=2),  # its launch: CUPTI id 19
        _event("gemm", cuda, 30, 8, 19, linked=2),             # the kernel
        _event("aten::copy_", cpu, 61, 30, 19),                # an operator whose own id is
                                                               # also 19 (other id space)
        _event("cudaMemcpyAsync", cpu, 70, 4, 23, linked=19),
        _event("Memcpy HtoD (Pageable -> Device)", cuda, 80, 3, 23, linked=19),
        _event(RANGE_PREFIX + "0:f0", cuda, 30, 60, 1, annotation=True),  # not work
        _event("cudaLaunchKernel", cpu, 95, 2, 40),            # outside every operator
        _event("spin_kernel", cuda, 99, 6, 40),
    ]
    records = records_of(events)
    assert records.ranges == [Range("0:f0", 1, 0, 100)]
    assert [(a.correlation, a.kind, a.duration) for a in records.activities] == [
        (19, "kernel", 8), (23, "memcpy", 3), (40, "kernel", 6)]
    assert [(launch.correlation, launch.time) for launch in records.launches] == [
        (19, 20), (23, 70), (40, 95)]
    booking = book(records.ranges, records.launches, records.activities)
    assert booking.own_ns("0:f0") == 8 + 3 + 6


def test_clock_choice_on_the_cpu():
    assert choose_clock(torch.device("cpu"), "auto") == ("cpu", None)
    with pytest.raises(ValueError, match="kernels"):
        choose_clock(torch.device("cpu"), "kernels")
    with pytest.raises(ValueError, match="clock must be one of"):
        choose_clock(torch.device("cpu"), "wall")


def test_engine_ranges_carry_the_nodes_sequence_number():
    cpu = torch._C._autograd.DeviceType.CPU
    cuda = torch._C._autograd.DeviceType.CUDA
    engine = _event("autograd::engine::evaluate_function: AddmmBackward0", cpu, 0, 100, 7,
                    thread=2)
    engine.sequence_nr = lambda: 42
    accumulate = _event("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad",
                        cpu, 200, 50, 8, thread=2)
    accumulate.sequence_nr = lambda: -1  # AccumulateGrad has none: its own hooks name it
    events = [engine, accumulate,
              _event("aten::mm", cpu, 10, 50, 9, thread=2),
              _event("cudaLaunchKernel", cpu, 20, 5, 30, linked=9, thread=2),
              _event("gemm", cuda, 40, 6, 30, linked=9)]
    records = records_of(events)
    assert records.ranges == [Range("seq:42", 2, 0, 100)]
    assert book(records.ranges, records.launches, records.activities).own_ns("seq:42") == 6


class _Twice(torch.nn.Module):
    """Uses its input twice: the engine adds the two gradients it receives."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(3, 3)
        self.b = torch.nn.Linear(3, 3)

    def forward(self, x):
        return self.b(self.a(x)) * x


def test_backward_device_time_goes_to_the_call_that_created_the_node():
    from moduleprofiler.timing.booking import Booking
    from moduleprofiler.timing.clocks.kernels import KernelRanges

    model = _Twice()
    clock = KernelRanges(backward=True)
    runner = PassRunner(model, [clock])
    x = torch.randn(2, 3, requires_grad=True)
    with runner.installed():
        clock._calls, clock._sequences = [], []
        output = clock.run(lambda: model(x))
    calls = clock._calls[0]
    by_path = {call.path: call.index for call in calls}
    mul = output.grad_fn                                 # made by the root's own code
    addmm_b = mul.next_functions[0][0]                   # b's Linear
    addmm_a = next(node for node, _ in addmm_b.next_functions  # a's Linear, b's input
                   if node is not None and node.name() == "AddmmBackward0")
    booking = Booking()
    for node, ns in ((mul, 5), (addmm_b, 7), (addmm_a, 11)):
        booking.own[f"seq:{node._sequence_nr()}"] = [Activity(node._sequence_nr(), 0, ns)]
    booking.own["seq:999999"] = [Activity(0, 0, 13)]    # a node made after the pass (a loss)
    engine = clock._engine_ns(booking)
    assert engine[0] == {by_path[""]: 5, by_path["b"]: 7, by_path["a"]: 11}
    assert engine[-1] == {-1: 13}
    # forward work of b on two streams: [0, 40] and [10, 30] overlap, [50, 55] after a gap
    booking.own[f"0:f{by_path['b']}"] = [Activity(1, 0, 40), Activity(2, 10, 30),
                                         Activity(3, 50, 55)]
    device = clock._iteration_of(0, calls, booking, engine[0])
    # busy 40 + 5 = 45 of a 55 ns span: the device sat idle 10 / 55 of it; the root's
    # forward holds the same work
    for path in ("b", ""):
        assert device.call_busy_ns[by_path[path]] == 45
        assert device.call_span_ns[by_path[path]] == 55
        assert device.call_launches[by_path[path]] == 3
    # own backward device time per call, and inclusive: the root holds 5 + 7 + 11 = 23
    times = device.times
    assert times.call_bwd_exclusive.tolist() == [5, 11, 7]
    assert times.call_bwd_inclusive[by_path[""]] == 23
