"""Do launches cost the host more in bf16 than in fp32? The tight loops of
``measure_host`` (one operator class each, tiny tensors) in fp32 and in bf16, and a
convolution and a batch norm at a model's shape (64 channels, 14 x 14) in both, interleaved in
one process that never runs a profiler session. Run it as several processes in a row on a
fresh machine to see how much the first one differs.

    PYTHONPATH=. python3 benchmarks/prediction/host_dtype_probe.py [--tag first]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from moduleprofiler.devices import synchronize
from moduleprofiler.prediction.calibrate import _host_benches
from moduleprofiler.prediction.host_loops import interleaved_call_us


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    cuda = torch.device("cuda")
    began = time.perf_counter()
    benches = {}
    for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        for key, bench in _host_benches(cuda, dtype).items():
            if key not in ("module_call", "cpu_op"):
                benches[f"{key}/{name}"] = bench
        image = torch.randn(1, 64, 14, 14, device=cuda, dtype=dtype)
        kernel = torch.randn(64, 64, 3, 3, device=cuda, dtype=dtype)
        stats = (torch.zeros(64, device=cuda, dtype=dtype),
                 torch.ones(64, device=cuda, dtype=dtype))
        weight = torch.ones(64, device=cuda, dtype=dtype)
        benches[f"conv64/{name}"] = (lambda i=image, k=kernel: F.conv2d(i, k, None, 1, 1))
        benches[f"batch_norm64/{name}"] = (
            lambda i=image, s=stats, w=weight: F.batch_norm(i, *s, w, w, training=False))
    for bench in benches.values():
        for _ in range(20):
            bench()
    samples = interleaved_call_us(benches, 200, 15, before=lambda bench: synchronize(cuda))
    synchronize(cuda)
    median = {key: statistics.median(values) for key, values in samples.items()}
    print(f"# {args.tag} {torch.cuda.get_device_name()} torch {torch.__version__}; "
          f"µs per call, median of 15 rounds of 200 calls; {time.perf_counter() - began:.1f} s")
    for key in sorted({k.split('/')[0] for k in median}):
        fp32, bf16 = median[f"{key}/fp32"], median[f"{key}/bf16"]
        print(f"  {key:>14}  fp32 {fp32:7.3f}  bf16 {bf16:7.3f}  bf16/fp32 {bf16 / fp32:5.2f}")


if __name__ == "__main__":
    main()
