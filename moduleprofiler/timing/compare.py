"""Eager against compiled, side by side: one call times a model's forward eagerly and
compiled, and returns the compiled timing with each module's eager time, the speed-up and the
launches before and after beside its own columns (the fused kernels and the modules whose work
they do are the compiled clock's own columns)."""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import torch
from torch import nn

from moduleprofiler.export.columns import ColumnSpec, register_column
from moduleprofiler.export.frame import module_values
from moduleprofiler.inputs import unwrap_compiled
from moduleprofiler.timing.compiled.parts import compiled_parts
from moduleprofiler.timing.forward import ModuleTiming, time_modules
from moduleprofiler.timing.loop import TimingOptions

COMPARE_COLUMNS: tuple[ColumnSpec, ...] = (
    register_column("eager_ms", "time", "eager", aggregation="inclusive", unit="ms",
                    description="the module's forward time run eagerly, with its children's "
                    "(its device time under the kernel clock; its wall time on a CPU), beside "
                    "its compiled device_ms (compare_compiled)"),
    register_column("eager_launches", "count", "eager launches", aggregation="inclusive",
                    description="kernels, copies and sets the module's eager forward "
                    "launched, with its children's, beside its compiled device_launches "
                    "(compare_compiled)"),
    register_column("compile_speedup", "ratio", "speed-up", aggregation="none",
                    description="eager_ms / device_ms: how much faster compiling made the "
                    "module's forward, children included (none where the compiled program "
                    "books it no time: its work is fused into an ancestor's kernels)"),
)
"""The columns a comparison adds to the compiled timing."""


def compare_compiled(model: nn.Module, input: Any = None,
                     options: TimingOptions | None = None, *,
                     device: str | torch.device | None = None) -> ModuleTiming:
    """Time ``model``'s forward eagerly and compiled, per module, side by side.

    ``model``: a ``torch.compile(model)`` wrapper (its compile options are kept) or a plain
    model (compiled with ``torch.compile``'s defaults). The eager run is ``time_modules`` of
    the original module (the kernel clock on CUDA, wall time on a CPU), the compiled run
    ``time_modules`` with the compiled clock; both with ``options``.

    Returns:
        The compiled timing (:class:`~moduleprofiler.timing.ModuleTiming`, clock
        ``"compiled-kernels"``) whose module frame also holds :data:`COMPARE_COLUMNS`:
        ``eager_ms``, ``eager_launches`` (on a GPU only: the eager run's wall time on a CPU
        counts no launches, and the column is left out) and ``compile_speedup`` beside
        ``device_ms``, ``device_launches``, ``self_fused_kernels`` and ``fused_across``.

    Raises:
        ValueError: ``model`` was compiled in place (``model.compile()``), or some of its
            submodules were compiled: its eager module cannot be called without changing it;
            pass the model before compiling it (or them).
    """
    original = unwrap_compiled(model)
    if original is model and getattr(model, "_compiled_call_impl", None) is not None:
        raise ValueError("compare_compiled needs the eager model: model was compiled in "
                         "place (.compile()); pass it before .compile(), or torch.compile(it)")
    parts = compiled_parts(original)
    if parts:
        raise ValueError("compare_compiled needs the eager model: its submodule "
                         f"{parts[0].path!r} is compiled; pass the model before compiling "
                         "its submodules (time_modules times the partly compiled model)")
    compiled: Any = model if original is not model else torch.compile(model)
    eager = time_modules(original, input, device=device, options=options)
    timed = time_modules(compiled, input, device=device, clock="compiled", options=options)
    eager_name = "device_ms" if eager.kernels else "time_median_ms"
    before = module_values(eager, [eager_name, "device_launches"])
    after = module_values(timed, ["device_ms"])
    metrics: dict[str, dict[str, Any]] = {}
    for path, values in before.items():
        eager_ms, compiled_ms = values[eager_name], after.get(path, {}).get("device_ms")
        metrics[path] = {
            "eager_ms": eager_ms, "eager_launches": values["device_launches"],
            "compile_speedup": (eager_ms / compiled_ms if eager_ms is not None
                                and compiled_ms else None)}
    notes = (*timed.timing.warnings, f"eager_ms: the eager module's {eager_name} "
             f"({eager.clock}), {eager.iterations} iterations")
    return dataclasses.replace(cast(ModuleTiming, timed.with_metrics(metrics)),
                               facts=dataclasses.replace(timed.timing, warnings=notes))
