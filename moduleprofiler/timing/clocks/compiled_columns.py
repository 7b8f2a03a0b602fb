"""The compiled clock's column block: the kernel clock's device columns (a compiled program's
kernel time is device time) plus what only a compiled program has, the kernels that fuse work
of several modules, named per module they are booked to."""

from __future__ import annotations

from moduleprofiler.export.columns import ColumnSpec, register_column
from moduleprofiler.timing.clocks.kernel_columns import DEVICE_COLUMNS

FUSED_COLUMNS: tuple[ColumnSpec, ...] = (
    register_column("self_fused_kernels", "count", "self fused kernels", aggregation="sum",
                    description="kernels of a compiled program booked to the module that "
                    "fuse work of several of its submodules (booked to the deepest module "
                    "holding all they fuse), per iteration"),
    register_column("fused_across", "text", "fuses work of", aggregation="none",
                    description="the modules whose work the module's fused kernels do "
                    "together (compiled clock)"),
)

COMPILED_COLUMNS: tuple[ColumnSpec, ...] = (*DEVICE_COLUMNS, *FUSED_COLUMNS)
"""Every column the compiled clock's readings fill, in their order."""
