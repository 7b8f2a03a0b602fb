"""The columns the memory passes write, declared once with what makes a profile hold them
(imported by :mod:`moduleprofiler.memory.report`, so every memory report has them)."""

from __future__ import annotations

from moduleprofiler.export.columns import register_column, register_quantity

MEMORY_NEEDS = ("a profile from measure_memory() (train=True for the saved and training "
                "columns), or one merged with it: profile.merge(memory) (was "
                "profile.with_memory(memory))")
"""What every measured memory column needs (views say it when one is asked for and missing)."""
register_column("saved_bytes", "bytes", "saved", aggregation="inclusive", unit="bytes",
                needs=MEMORY_NEEDS, description="activation bytes saved for backward by the "
                "call and the calls inside it")
register_column("self_saved_bytes", "bytes", "self saved", aggregation="sum", unit="bytes",
                needs=MEMORY_NEEDS, description="activation bytes saved for backward by the "
                "call's own operators")
register_column("self_saved_param_bytes", "bytes", "self saved param", aggregation="sum",
                unit="bytes", needs=MEMORY_NEEDS, description="parameter bytes saved for "
                "backward by the call's own operators (not activations: they are the weights)")
# Each live-memory column names its pass in its header: "max live" alone was read as the
# training step's memory, which it is not.
for _name, _label in (("max_live_bytes", "fwd max live"),
                      ("train_max_live_bytes", "train fwd max live"),
                      ("backward_max_live_bytes", "train bwd max live")):
    register_column(_name, "bytes", _label, aggregation="max", unit="bytes", needs=MEMORY_NEEDS)
register_quantity("memory", "self_saved_bytes", "saved_bytes", "saved for backward")
