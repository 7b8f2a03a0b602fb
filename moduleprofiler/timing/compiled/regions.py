"""A compiled forward's regions, graph breaks and recompilations, by module.

Each graph Dynamo traced is one region of compiled code; between two of them the graph
breaks and eager Python runs. :func:`regions_of` says what each region covers (the modules
whose work its kernels do) and where it breaks: in the deepest module holding the region's
last operation and the next region's first (a ``print`` between two submodule calls breaks in
their parent), with Dynamo's reason and the user's line. :func:`recompilations_of` reads the
guard failures Dynamo recorded for the forwards of the model's module classes: each is one
recompilation of that forward (a new input shape under ``dynamic=False``...); a forward
compiled again only because another ``torch.compile`` of it (another mode or backend) ran is
not one.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn
from torch._dynamo.utils import guard_failures

from moduleprofiler.facts import GraphRegion, Recompilation
from moduleprofiler.timing.compiled.capture import CompiledGraph
from moduleprofiler.timing.compiled.kernels import common_ancestor


def regions_of(graphs: Sequence[CompiledGraph]) -> tuple[GraphRegion, ...]:
    """The forward graphs of ``graphs`` (in the order compiled, which is the order of their
    first calls) as regions."""
    forward = [graph for graph in graphs if not graph.backward]
    regions = []
    for n, graph in enumerate(forward):
        breaks_in = None
        if graph.reason is not None:
            after = forward[n + 1].first if n + 1 < len(forward) else graph.last
            breaks_in = common_ancestor((graph.last, after))
        regions.append(GraphRegion(
            graph.key, tuple(sorted({module for kernel in graph.kernels
                                     for module in kernel.modules})),
            graph.first, graph.last, breaks_in, graph.reason, graph.at))
    return tuple(regions)


def recompilations_of(model: nn.Module) -> tuple[Recompilation, ...]:
    """The guard failures Dynamo recorded (since it was last reset) for the forward of each
    module class of ``model``, by the first module whose class it is. A ``torch.nn``
    container compiled whole runs through a frame Dynamo shares among such wrappers, whose
    failures are not read here."""
    found: list[Recompilation] = []
    seen: set[object] = set()
    for path, module in model.named_modules():
        code = getattr(type(module).forward, "__code__", None)
        if code is None or code in seen:
            continue
        seen.add(code)
        found.extend(Recompilation(path, str(reason)) for reason in guard_failures.get(code, ())
                     if not _another_backend(str(reason)))
    return tuple(found)


def _another_backend(reason: str) -> bool:
    """Whether every cache entry of a failure failed only on its backend: the forward
    compiled by another ``torch.compile`` (another wrapper, mode or backend; the clock's own
    compile), not a guard of this one."""
    lines = [line for line in reason.splitlines() if line.strip()]
    return bool(lines) and all("BACKEND_MATCH" in line for line in lines)
