"""Host microseconds to issue each operator of a mixture-of-experts layer's routing on a CUDA
device, beside the elementwise launches the host model prices every class from: which of the
router's operators cost the host more than their class's loop. Each loop issues 100 calls
without waiting (few enough that the launch queue never fills), the fastest of 20 loops.

    taskset -c $(python3 benchmarks/prediction/fastest_core.py) \\
        python3 benchmarks/prediction/host_moe_probe.py
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

import torch

CALLS = 100


def host_us(step: Callable[[], Any]) -> float:
    """The fastest of 20 loops of :data:`CALLS` calls of ``step``, µs a call, the device
    drained before each loop."""
    best = float("inf")
    for _ in range(20):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(CALLS):
            step()
        best = min(best, (time.perf_counter() - start) / CALLS * 1e6)
    torch.cuda.synchronize()
    return best


def main() -> None:
    cuda = torch.device("cuda")
    tokens, experts, hidden = 1024, 8, 1024
    ids = torch.randint(0, experts, (tokens * 2,), device=cuda)
    scores = torch.randn(tokens, experts, device=cuda)
    rows = torch.randn(tokens, hidden, device=cuda, dtype=torch.bfloat16)
    picks = torch.randint(0, tokens, (tokens * 2,), device=cuda)
    mask = torch.rand(tokens * 2, 1, device=cuda) > 0.5
    grouped = torch.randn(tokens * 2, hidden, device=cuda, dtype=torch.bfloat16)
    weight = torch.randn(experts, 256, hidden, device=cuda, dtype=torch.bfloat16)
    offsets = torch.arange(1, experts + 1, device=cuda, dtype=torch.int32) * (tokens * 2 // experts)
    small = torch.randn(64, device=cuda)
    steps: dict[str, Callable[[], Any]] = {
        "relu (unary)": lambda: torch.relu(small),
        "add (binary)": lambda: small + small,
        "sum (reduction)": lambda: small.sum(),
        "sort": lambda: torch.sort(ids),
        "topk": lambda: torch.topk(scores, 2, dim=-1),
        "index (rows by a long index)": lambda: rows[picks],
        "cumsum": lambda: torch.cumsum(offsets, 0),
        "histc": lambda: torch.histc(ids.int(), bins=experts, min=0, max=experts - 1),
        "masked_fill_": lambda: grouped.masked_fill_(mask, 0.0),
        "_grouped_mm": lambda: torch._grouped_mm(grouped, weight.transpose(-2, -1), offsets),
        "one_hot": lambda: torch.nn.functional.one_hot(ids, experts),
        "softmax": lambda: torch.softmax(scores, dim=-1),
    }
    for step in steps.values():  # first calls: kernels loaded, caches warm
        for _ in range(20):
            step()
    torch.cuda.synchronize()
    found = {name: round(host_us(step), 3) for name, step in steps.items()}
    print(json.dumps({"device": torch.cuda.get_device_name(cuda), "torch": torch.__version__,
                      "calls_per_loop": CALLS, "host_us": found}, indent=1))
    width = max(map(len, found))
    for name, us in found.items():
        print(f"{name:<{width}} {us:8.2f} us", file=sys.stderr)


if __name__ == "__main__":
    main()
