"""Compiled models, module by module: where a ``torch.compile``'d model's time goes.

``time_modules(torch.compile(model), x)`` times the compiled program through the compiled
clock (:mod:`moduleprofiler.timing.clocks.compiled`): every kernel Inductor runs is booked to
the module its graph nodes come from. :func:`compare_compiled` times a model eagerly and
compiled, side by side; :func:`time_compiled` is the clock's earlier form.
"""

from moduleprofiler.timing.compare import compare_compiled
from moduleprofiler.timing.compiled.run import CompiledTiming, KernelRow, time_compiled

__all__ = ["CompiledTiming", "KernelRow", "compare_compiled", "time_compiled"]
