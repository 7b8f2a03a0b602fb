"""What a small kernel costs inside a chain of other kernels beyond what the calibration's
loop of it alone measured.

The calibration times a shape by running the same operator on the same operands again and
again. Inside a model each kernel follows a different one and reads what that one just wrote;
on an H200 such a kernel takes a near-constant time longer, whatever its size and whether the
device idles between launches or runs them back to back (a row reduction about 1.2 µs in
fp32, a layer norm 0.5 to 0.7 µs, elementwise kernels 0.03 to 0.3 µs;
``benchmarks/results/prediction/in_model_kernels_h200.txt``, synthetic shapes). Short passes
of many small kernels (a decoder at batch 1) add up hundreds of those.

The cost is measured, per table and dtype, on a synthetic decoder-like chain
(``benchmarks/prediction/in_model_kernels.py``): each operator's kernel time in the chain less
its time alone, the median over the chain's operators of that table and its row counts.
Operators of the chain whose operand comes from memory by the benchmark's construction (the
chain's input and a norm weight, read after an L2 flush) and the layers' products (their tables
already read the weight from memory) are left out of it.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping

CHAIN_TABLES: dict[str, str] = {
    "mean_rows": "mem_reduction",
    "sum_rows": "mem_reduction",
    "add_scalar_small": "mem_binary",
    "mul": "mem_binary",
    "rsqrt_small": "mem_unary",
    "silu": "mem_unary",
    "gelu": "mem_unary",
    "mul_row_scale": "mem_broadcast",
    "convert_down": "mem_convert",
    "layer_norm": "mem_layer_norm",
    "softmax": "mem_softmax",
}
"""The chain's operators that price a table's in-chain cost, and the table (an operator's
table is its output's dtype's: ``mean_rows`` and ``mul_row_scale`` run on fp32 in both
chains, ``convert_down`` writes the chain's dtype)."""

FP32_IN_BOTH = frozenset({"mean_rows", "rsqrt_small", "add_scalar_small", "mul_row_scale"})
"""Operators of the chain whose output is fp32 in the bf16 chain too (a norm's statistics)."""


def in_chain_costs(samples: Mapping[str, Mapping[str, float]]
                   ) -> dict[str, dict[str, float]]:
    """By dtype and table: the median over :data:`CHAIN_TABLES`' operators of their kernel µs
    in the chain less alone (never below 0). ``samples[chain_dtype]`` maps
    ``"{rows}:{mode}:{operator}"`` (mode ``alone`` or ``chain``) to median kernel µs, as
    ``in_model_kernels.py`` writes them; an operator that ran no kernel alone (a conversion
    to the dtype it has) gives no sample."""
    found: dict[tuple[str, str], list[float]] = {}
    for chain_dtype, times in samples.items():
        for key, alone in times.items():
            rows, mode, name = key.split(":")
            if mode != "alone" or name not in CHAIN_TABLES or alone <= 0:
                continue
            dtype = "fp32" if name in FP32_IN_BOTH else chain_dtype
            extra = times[f"{rows}:chain:{name}"] - alone
            found.setdefault((dtype, CHAIN_TABLES[name]), []).append(max(0.0, extra))
    costs: dict[str, dict[str, float]] = {}
    for (dtype, table), extras in sorted(found.items()):
        costs.setdefault(dtype, {})[table] = round(statistics.median(extras), 3)
    return costs
