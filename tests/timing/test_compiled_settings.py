"""Every compile option of the model's own ``torch.compile`` is carried to the compiled
clock's compile of it: the clock times the user's program, and fails where it fails."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch._dynamo.exc import Unsupported

from moduleprofiler.errors import ProfilingError
from moduleprofiler.timing import time_modules, train_step_times
from moduleprofiler.timing.compiled.capture import compiled_original
from tests.timing.helpers import Breaks

FAST = {"num_iters": 4, "drop_first": 1, "warmup_seconds": 0.0, "progress": False,
        "measure_overhead": False}


@pytest.mark.parametrize("in_place", [False, True])
def test_the_models_fullgraph_is_read(in_place):
    model = nn.Linear(4, 4)
    if in_place:
        model.compile(fullgraph=True)
    found = compiled_original(model if in_place else torch.compile(model, fullgraph=True))
    assert found is not None and found.settings.fullgraph is True


@pytest.mark.parametrize("in_place", [False, True])
def test_a_model_compiled_with_fullgraph_raises_at_its_graph_break(in_place):
    # the user's own call raises at the print; the clock's compile of the model without
    # fullgraph split it into two graphs and timed a program the user cannot run
    model = Breaks()
    if in_place:
        model.compile(fullgraph=True, backend="eager")
        compiled = model
    else:
        compiled = torch.compile(model, fullgraph=True, backend="eager")
    x = torch.randn(4, 16)
    with pytest.raises(Unsupported):
        compiled(x)
    with pytest.raises(ProfilingError, match="raised Unsupported") as raised:
        time_modules(compiled, x, clock="compiled", **FAST)
    assert isinstance(raised.value.__cause__, Unsupported)
    with pytest.raises(ProfilingError, match="fullgraph=True"):
        train_step_times(compiled, x, clock="compiled", **FAST)


def test_a_submodule_compiled_with_fullgraph_raises_at_its_graph_break():
    model = nn.Sequential(nn.Linear(16, 16), Breaks())
    model[1] = torch.compile(model[1], fullgraph=True, backend="eager")
    with pytest.raises(ProfilingError, match="raised Unsupported"):
        time_modules(model, torch.randn(4, 16), **FAST)


def test_a_model_compiled_with_fullgraph_and_no_break_is_timed_in_one_graph():
    # the clock's compile traces the module's own call (its hooks' checks included) under
    # fullgraph=True too: nothing of the clock's own breaks the graph
    from tests.timing.helpers import residual_model

    compiled = torch.compile(residual_model(), fullgraph=True)
    timing = time_modules(compiled, torch.randn(8, 16), **FAST)
    assert timing.clock == "compiled-kernels"
    assert len(timing.timing.compiled.regions) == 1 and not timing.timing.compiled.breaks
