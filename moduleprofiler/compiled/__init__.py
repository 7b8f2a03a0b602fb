"""Compiled models, module by module: where a ``torch.compile``'d model's time goes.

:func:`time_compiled` times the compiled program and books every kernel Inductor runs to the
module its graph nodes come from (:mod:`.kernels`, :mod:`.booking`).
"""

from moduleprofiler.compiled.run import CompiledTiming, KernelRow, time_compiled

__all__ = ["CompiledTiming", "KernelRow", "time_compiled"]
