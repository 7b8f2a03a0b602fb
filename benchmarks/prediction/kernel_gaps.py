"""Where a device-bound forward's idle time goes: each kernel's gap after the one before it,
split by whether its launch came before that one ended (queued: the gap is the device's own,
kernel to kernel) or after (the device waited for the host). From the device's own records
(CUPTI) of two forwards per configuration, after a warm-up.

    PYTHONPATH=. python3 benchmarks/prediction/kernel_gaps.py [--only resnet50,gpt2] [--batch 64]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import _call
from models import DTYPES, ZOO

from moduleprofiler.timing.device_trace import device_trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", default="resnet50,vit_b_16,bert_base,gpt2,llama_8x1024")
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    cuda = torch.device("cuda")
    torch.set_float32_matmul_precision("high")
    print(f"# {torch.cuda.get_device_name()} torch {torch.__version__}; batch {args.batch}; "
          "gaps in µs; queued: launched before the previous kernel ended")
    for entry in ZOO:
        if entry.name not in args.only.split(","):
            continue
        with torch.device(cuda):
            built = entry.build().eval()
        for dtype_name, dtype in DTYPES.items():
            model = built.to(dtype=dtype)
            inputs = entry.make_input(args.batch, cuda, dtype)
            with torch.no_grad():
                for _ in range(3):
                    _call(model, inputs)
                torch.cuda.synchronize()
                with device_trace(cuda) as records:
                    for _ in range(2):
                        _call(model, inputs)
                        torch.cuda.synchronize()
            launched = {launch.correlation: launch.time for launch in records.launches}
            kernels = sorted(records.activities, key=lambda a: a.start)
            queued, waited = [], []
            for before, after in itertools.pairwise(kernels):
                gap = (after.start - before.end) / 1e3
                if gap < 0 or gap > 1000:  # overlap, or the synchronisation between forwards
                    continue
                launch = launched.get(after.correlation)
                (queued if launch is not None and launch < before.end else waited).append(gap)
            busy = sum(a.end - a.start for a in kernels) / 1e3 / 2
            print(f"{entry.name:>18} {dtype_name}  kernels {len(kernels) // 2:5d}/pass  busy "
                  f"{busy:9.1f} us/pass  queued gaps n={len(queued):5d} median "
                  f"{statistics.median(queued) if queued else float('nan'):6.2f} mean "
                  f"{statistics.fmean(queued) if queued else float('nan'):6.2f} sum/pass "
                  f"{sum(queued) / 2:8.1f}  host-wait gaps n={len(waited):4d} sum/pass "
                  f"{sum(waited) / 2:8.1f}", flush=True)
        del built


if __name__ == "__main__":
    main()
