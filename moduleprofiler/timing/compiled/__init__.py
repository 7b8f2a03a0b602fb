"""A compiled model's program taken apart: compiled with provenance (:mod:`.capture`), its
kernels named by module (:mod:`.kernels`), one profiler session over its calls (:mod:`.trace`)
and every kernel record booked to its module (:mod:`.booking`); the compiled clock
(:mod:`moduleprofiler.timing.clocks.compiled`) and :func:`~.run.time_compiled` use them."""
