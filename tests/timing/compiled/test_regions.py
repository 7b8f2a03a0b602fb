"""A compiled forward's regions, graph breaks and recompilations, by module: what each graph
covers, where and why it breaks, which forwards Dynamo compiled again; in the timing's notes
and its JSON."""

from __future__ import annotations

import torch
from torch import nn

from moduleprofiler.facts import CompiledFacts, GraphRegion
from moduleprofiler.timing import TimingOptions, time_modules
from moduleprofiler.timing.compiled.capture import CompiledGraph
from moduleprofiler.timing.compiled.kernels import CompiledKernel
from moduleprofiler.timing.compiled.regions import recompilations_of, regions_of
from moduleprofiler.timing.forward import ModuleTiming

QUICK = TimingOptions(num_iters=4, drop_first=1, warmup_seconds=0.0, progress=False,
                      measure_overhead=False)


class Logs(nn.Module):
    """Two Linears with a ``print`` between them: Dynamo breaks the graph in this module."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)
        self.b = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.a(x)
        print(end="")
        return self.b(x)


class Net(nn.Module):
    """A stem, the breaking block and a head (a class of its own: its forward is its code)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(8, 8)
        self.logs = Logs()
        self.head = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.logs(torch.relu(self.stem(x))))


def test_a_region_breaks_in_the_module_holding_its_last_operation_and_the_next_first():
    kernels = [CompiledKernel("extern_kernels.addmm", 0, ("logs.a",))]
    graphs = [CompiledGraph("g0", False, kernels, "stem", "logs.a", "print", "m.py:3 in f"),
              CompiledGraph("g0b", True, [], "", ""),  # its backward: not a region
              CompiledGraph("g1", False, [CompiledKernel("k", 0, ("head", "logs.b"))],
                            "logs.b", "head")]
    regions = regions_of(graphs)
    assert [region.graph for region in regions] == ["g0", "g1"]
    # logs.a (last of g0) and logs.b (first of g1): the break is in logs
    assert regions[0].breaks_in == "logs" and regions[0].reason == "print"
    assert regions[1].breaks_in is None and regions[1].modules == ("head", "logs.b")
    assert CompiledFacts(regions).sentences() == [
        "the graph breaks in module 'logs' after 'logs.a' (graph 1 of 2, at m.py:3 in f): "
        "print"]


def test_the_timing_says_where_the_graph_breaks_and_keeps_it_in_its_json():
    timing = time_modules(torch.compile(Net()), torch.randn(4, 8), options=QUICK)
    facts = timing.timing.compiled
    assert facts is not None
    # Dynamo cannot inline logs' forward: the root's graph ends at the call of logs (stem
    # and the root's ReLU), logs' own frame breaks at the print (logs.a | logs.b), and the
    # root's frame resumes for the head
    assert [region.modules for region in facts.regions] == [
        ("", "stem"), ("logs.a",), ("logs.b",), ("head",)]
    first, second = facts.regions[:2]
    assert first.breaks_in == "" and second.breaks_in == "logs"
    assert second.reason and second.reason == first.reason  # Dynamo's words for print
    assert second.at is not None and second.at.endswith("in forward")
    assert [region.breaks_in for region in facts.regions[2:]] == [None, None]
    assert any(note.startswith("the graph breaks in module 'logs' after 'logs.a'")
               for note in timing.warnings)
    # the head, called from the resumed root frame, is booked to itself
    frame = timing.to_df("module").set_index("module")
    assert frame.loc["head", "device_launches"] == 1
    again = ModuleTiming.from_json(timing.to_json())
    assert again.timing.compiled == facts
    assert isinstance(again.timing.compiled.regions[0], GraphRegion)


class Grown(nn.Module):
    """A model of its own class (Dynamo keeps guard failures per forward's code)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x))


def test_a_recompilation_is_reported_with_its_guard():
    model = Grown()
    assert recompilations_of(model) == ()
    compiled = torch.compile(model, dynamic=False)
    with torch.no_grad():
        compiled(torch.randn(4, 8))
        compiled(torch.randn(2, 8))  # another batch size: the shape guard fails, recompiled
    found = recompilations_of(model)
    assert len(found) == 1 and found[0].module == ""
    assert "size mismatch at index 0. expected 4, actual 2" in found[0].reason
    timing = time_modules(compiled, torch.randn(2, 8), options=QUICK)
    assert timing.timing.compiled is not None
    assert timing.timing.compiled.recompilations == found
    assert any(note.startswith("recompiled: the forward of module '__root__'")
               and "expected 4, actual 2" in note for note in timing.warnings)


class Twice(Grown):
    """A class of its own for the next test (its forward's failures are its own)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.fc(x))


def test_a_compile_by_another_backend_is_not_a_recompilation():
    model = Twice()
    torch.compile(model, dynamic=False)(torch.randn(4, 8))
    torch.compile(model, backend="eager", dynamic=False)(torch.randn(4, 8))
    # the second wrapper's compile failed the first's backend check only
    assert recompilations_of(model) == ()
