"""A compiled model's recorded compile is kept for the next pass over the same model: the
same options, kind of pass, input structure and modules call the code compiled then; anything
else compiles again; nothing keeps the model alive."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
from torch import nn
from torch._dynamo.utils import counters

from moduleprofiler.timing import time_modules, train_step_times
from moduleprofiler.timing.clocks.compiled import CompiledClock, CompiledProgram
from moduleprofiler.timing.compiled.capture import CompileSettings, GraphRecorder
from moduleprofiler.timing.compiled.reuse import (
    KEPT,
    RecordedCompile,
    kept_compile,
    signature,
)
from tests.timing.helpers import Breaks, ResidualBlock, residual_model

FAST = {"num_iters": 4, "drop_first": 1, "warmup_seconds": 0.0, "progress": False,
        "measure_overhead": False}
CPU = torch.device("cpu")


def _compiled_graphs() -> int:
    """Graphs Dynamo has compiled in this process."""
    return counters["stats"]["unique_graphs"]


def _timed(compiled: nn.Module, x: torch.Tensor) -> CompiledClock:
    clock = CompiledClock(CPU, CompiledProgram.of(compiled, x))
    time_modules(compiled, x, clock=clock, **FAST)
    return clock


def test_a_second_pass_on_the_same_model_and_input_compiles_nothing():
    compiled = torch.compile(residual_model())
    x = torch.randn(8, 16)
    first = _timed(compiled, x)
    before = _compiled_graphs()
    second = _timed(compiled, torch.randn(8, 16))  # another tensor of the same structure
    assert _compiled_graphs() == before
    assert second.program.recorder is first.program.recorder
    # booked as the first pass was: one graph, every kernel, each Linear one addmm
    assert second.graphs == 1 and second.coverage == pytest.approx(1.0)
    assert [row.module for row in second.kernels() if row.name == "extern_kernels.addmm"] \
        == ["0.fc", "2.fc"]
    # the "auto" clock of a plain call finds it too
    time_modules(compiled, x, **FAST)
    assert _compiled_graphs() == before


def test_another_input_options_or_submodule_compiles_again():
    model = residual_model()
    compiled = torch.compile(model)
    first = _timed(compiled, torch.randn(8, 16))
    other_batch = _timed(compiled, torch.randn(4, 16))
    assert other_batch.program.recorder is not first.program.recorder
    options = CompiledProgram.of(compiled, torch.randn(8, 16), {"max_autotune": False})
    assert options is not None and options.recorder is not first.program.recorder
    model[2] = ResidualBlock()  # a new submodule: Dynamo's code would compile again anyway
    replaced = _timed(compiled, torch.randn(8, 16))
    assert replaced.program.recorder is not first.program.recorder
    assert replaced.coverage == pytest.approx(1.0)


def test_a_program_used_again_still_says_where_its_graph_broke():
    compiled = torch.compile(nn.Sequential(Breaks()))
    x = torch.randn(8, 16)
    first = _timed(compiled, x)
    second = _timed(compiled, x)
    assert second.program.recorder is first.program.recorder
    # no break happened in the second pass (nothing compiled): the compile's are kept
    assert any("print" in reason for reason in second.break_reasons)
    assert second.break_reasons == first.break_reasons
    assert second.graphs == 2
    assert [region.breaks_in for region in second.facts().regions] == ["0", None]


def test_a_training_step_after_a_forward_pass_is_a_compile_of_its_own():
    compiled = torch.compile(residual_model())
    x = torch.randn(8, 16)
    forward = _timed(compiled, x)
    clock = CompiledClock(CPU, CompiledProgram.of(compiled, x, backward=True), backward=True)
    train_step_times(compiled, x, clock=clock, **FAST)
    assert clock.program.recorder is not forward.program.recorder
    assert clock.graphs == 1 and clock.backward_coverage == pytest.approx(1.0)


def test_a_forward_graph_compiled_again_for_a_training_step_is_not_counted_twice():
    # a clock made by hand for a training step on a program kept for forward passes: Dynamo
    # compiles the forward again (grad mode), and the pass counts only the graphs it ran
    compiled = torch.compile(residual_model())
    x = torch.randn(8, 16)
    forward = _timed(compiled, x)
    clock = CompiledClock(CPU, CompiledProgram.of(compiled, x), backward=True)
    train_step_times(compiled, x, clock=clock, **FAST)
    assert clock.program.recorder is forward.program.recorder
    assert sum(not graph.backward for graph in clock.program.recorder.graphs) == 2
    assert clock.graphs == 1 and len(clock.facts().regions) == 1
    assert clock.backward_coverage == pytest.approx(1.0)


def test_a_graph_compiled_again_after_dynamo_is_reset_is_counted_once():
    compiled = torch.compile(residual_model())
    x = torch.randn(8, 16)
    first = _timed(compiled, x)
    torch._dynamo.reset()  # Dynamo forgets the compiled code: the kept compile records again
    second = _timed(compiled, x)
    assert second.program.recorder is first.program.recorder
    assert sum(not graph.backward for graph in second.program.recorder.graphs) == 2
    assert second.graphs == 1 and len(second.facts().regions) == 1
    assert second.coverage == pytest.approx(1.0)


def test_the_kept_compile_does_not_keep_the_model_alive():
    model = residual_model()
    alive = weakref.ref(model)
    compiled = torch.compile(model)
    _timed(compiled, torch.randn(8, 16))
    del model, compiled
    gc.collect()
    assert alive() is None


def test_the_signature_reads_what_dynamos_guards_read():
    x = torch.randn(8, 16)
    assert signature(x) == signature(torch.zeros(8, 16))
    assert signature(x) != signature(torch.randn(4, 16))
    assert signature(x) != signature(x.double())
    assert signature(x) != signature(x.t())  # strides
    assert signature(x) != signature(x.clone().requires_grad_())
    assert signature({"a": x, "n": 3}) == signature({"a": torch.ones(8, 16), "n": 3})
    assert signature({"a": x, "n": 3}) != signature({"a": x, "n": 4})
    assert signature((x, [x, None])) is not None
    assert signature(object()) is None and signature((x, object())) is None
    assert signature(x.to_sparse()) != signature(x)  # the layout


def test_the_last_compiles_per_module_are_kept():
    module = nn.Linear(2, 2)
    made: list[int] = []

    def compile() -> RecordedCompile:
        made.append(1)
        return RecordedCompile(lambda *args: None, GraphRecorder(known=()))

    inputs = [torch.randn(n, 2) for n in range(1, KEPT + 2)]  # KEPT + 1 structures
    for x in inputs:
        kept_compile(module, CompileSettings(), x, False, compile)
    assert len(made) == KEPT + 1
    kept_compile(module, CompileSettings(), inputs[-1], False, compile)  # the newest: kept
    assert len(made) == KEPT + 1
    kept_compile(module, CompileSettings(), inputs[0], False, compile)  # the oldest went first
    assert len(made) == KEPT + 2
    # an input it cannot describe is compiled each time
    kept_compile(module, CompileSettings(), object(), False, compile)
    kept_compile(module, CompileSettings(), object(), False, compile)
    assert len(made) == KEPT + 4
