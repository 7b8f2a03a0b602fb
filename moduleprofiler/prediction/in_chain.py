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
(:func:`measure_in_chain`, which :func:`~moduleprofiler.prediction.calibrate` runs): each
operator's kernel time in the chain less its time alone, the median over the chain's operators
of that table and its row counts. Operators of the chain whose operand comes from memory by the
chain's construction (its input and a norm weight, read after an L2 flush) and the layers'
products (their tables already read the weight from memory) are left out of it.
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F

from moduleprofiler.devices import synchronize
from moduleprofiler.timing.device_trace import close_range, device_trace, open_range

ROWS: tuple[int, ...] = (64, 256, 1024)
"""The chain's token counts."""
WIDTH = 1536
"""The chain's hidden width (no power of two, as no table's row)."""
LAYERS = 6
"""Layers of the chain, each with its own operands and weights."""
REPEATS = 5
"""Runs of the chain (and of each operator alone) recorded; the median is kept."""
POOL_BYTES = 2 ** 28
"""The weights' pool and the buffer whose write flushes the L2 cache (256 MiB)."""

Operators = list[tuple[str, Callable[[], Any]]]


def chain_operators(rows: int, dtype: torch.dtype, layer: int, pool: list[torch.Tensor],
                    device: torch.device) -> Operators:
    """One layer's operators, each reading what the one before wrote (as in a forward), its
    weights taken from ``pool`` (read from memory, as a model's are)."""
    s: dict[str, torch.Tensor] = {"h": torch.randn(rows, WIDTH, device=device, dtype=dtype)}
    weight = torch.randn(WIDTH, device=device, dtype=dtype)
    bias = torch.randn(WIDTH, device=device, dtype=dtype)
    w = pool[(2 * layer) % len(pool)]
    w2 = pool[(2 * layer + 1) % len(pool)]

    def put(key: str, make: Callable[[], torch.Tensor]) -> Callable[[], Any]:
        return lambda: s.__setitem__(key, make())

    return [
        ("convert_up", put("a", lambda: s["h"].to(torch.float32))),
        ("pow", put("p", lambda: s["a"].pow(2))),
        ("mean_rows", put("m", lambda: s["p"].mean(-1, keepdim=True))),
        ("add_scalar_small", put("e", lambda: s["m"] + 1e-6)),
        ("rsqrt_small", put("r", lambda: torch.rsqrt(s["e"]))),
        ("mul_row_scale", put("n", lambda: s["a"] * s["r"])),
        ("convert_down", put("b", lambda: s["n"].to(dtype))),
        ("mul_weight", put("c", lambda: weight * s["b"])),
        ("linear", put("y", lambda: F.linear(s["c"], w))),
        ("silu", put("g", lambda: F.silu(s["y"]))),
        ("mul", put("u", lambda: s["g"] * s["y"])),
        ("linear_2", put("z", lambda: F.linear(s["u"], w2))),
        ("add", put("h2", lambda: s["z"] + s["h"])),
        ("layer_norm", put("l", lambda: F.layer_norm(s["h2"], (WIDTH,), weight, bias))),
        ("softmax", put("q", lambda: torch.softmax(s["l"].view(-1, 64, 24), -1))),
        ("gelu", put("o", lambda: F.gelu(s["l"]))),
        ("sum_rows", put("t", lambda: s["o"].sum(-1))),
    ]


def weight_pool(dtype: torch.dtype, device: torch.device) -> list[torch.Tensor]:
    """``WIDTH x WIDTH`` weights filling :data:`POOL_BYTES`."""
    count = POOL_BYTES // (WIDTH * WIDTH * torch.tensor([], dtype=dtype).element_size())
    return [torch.randn(WIDTH, WIDTH, device=device, dtype=dtype) for _ in range(max(2, count))]


def booked(records: Any) -> dict[str, float]:
    """Kernel µs per range label of a :func:`device_trace`: kernels booked by their launch
    time, on any thread (a backward's kernels are launched by the autograd engine's thread
    while the one that opened the range waits inside it)."""
    launched = {launch.correlation: launch.time for launch in records.launches}
    times = sorted((launched[a.correlation], a.duration) for a in records.activities
                   if a.correlation in launched)
    starts = [t for t, _ in times]
    found: dict[str, float] = {}
    for item in records.ranges:
        first, last = bisect.bisect_left(starts, item.start), bisect.bisect_right(starts, item.end)
        found[item.label] = sum(d for _, d in times[first:last]) / 1e3
    return found


def chain_times(device: torch.device, dtype: torch.dtype) -> dict[str, float]:
    """``"{rows}:{mode}:{operator}"`` -> median kernel µs of each chain operator, ``alone``
    (the first layer's operator on the same operands again and again, as the calibration
    times a shape) and in the ``chain`` (every layer's operators in turn, the L2 cache flushed
    before each run)."""
    pool = weight_pool(dtype, device)
    flush = torch.empty(POOL_BYTES, device=device, dtype=torch.uint8)
    result: dict[str, float] = {}
    for rows in ROWS:
        layers = [chain_operators(rows, dtype, layer, pool, device) for layer in range(LAYERS)]
        for operators in layers:  # warm-up: algorithm choices, lazy init
            for _, operator in operators:
                operator()
        synchronize(device)
        with device_trace(device) as records:
            for name, operator in layers[0]:
                for repeat in range(REPEATS):
                    scope = open_range(f"alone:{name}:{repeat}")
                    operator()
                    close_range(scope)
            synchronize(device)
            for repeat in range(REPEATS):
                flush.zero_()  # the weights and operands out of the L2 cache, as a model's
                synchronize(device)
                for layer, operators in enumerate(layers):
                    for name, operator in operators:
                        scope = open_range(f"chain:{name}:{repeat}:{layer}")
                        operator()
                        close_range(scope)
        times = booked(records)
        for mode in ("alone", "chain"):
            for name, _ in layers[0]:
                samples = [us for label, us in times.items()
                           if label.startswith(f"{mode}:{name}:")]
                result[f"{rows}:{mode}:{name}"] = statistics.median(samples)
    return result


def measure_in_chain(device: torch.device, dtypes: Mapping[str, torch.dtype]
                     ) -> dict[str, dict[str, float]]:
    """:attr:`~moduleprofiler.prediction.Calibration.in_chain` of ``device``: the chain run in
    each of ``dtypes`` (name -> torch dtype), reduced by :func:`in_chain_costs`."""
    return in_chain_costs({name: chain_times(device, dtype) for name, dtype in dtypes.items()})


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
