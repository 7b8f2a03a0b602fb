"""The host's cost of a launch inside a model's forward against the calibration's tight loops
of one operator, on synthetic models only (no model of the proof), measured in one session on
one host: the tight-loop costs (``measure_host``, as ``calibrate()`` measures them), then
host-bound forwards of three synthetic stacks (an MLP of layer norms, linears, GELUs and
residual additions; convolutions, batch norms and ReLUs; attention blocks written in plain
PyTorch), each predicted from those costs as they were measured (``in_model=1``): the ratio of
the measured forward to the prediction is the in-model factor, measured, where
``IN_SITU_HOST_FACTOR`` was fitted on the proof's models. The stacks are
``moduleprofiler.prediction.host_in_model``'s, which ``calibrate()`` now measures the factor on
(``calibrate_host.py``).

    python benchmarks/prediction/host_in_model.py --out DIR
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn

from moduleprofiler import Profiler
from moduleprofiler.prediction.calibrate import measure_host
from moduleprofiler.prediction.host_in_model import stacks
from moduleprofiler.prediction.host_model import IN_SITU_HOST_FACTOR


def forward_us(model: nn.Module, x: torch.Tensor, iterations: int = 60) -> list[float]:
    """Hook-free forward wall µs, the device synchronised after each."""
    samples = []
    with torch.no_grad():
        for _ in range(10):
            model(x)
        torch.cuda.synchronize()
        enabled = gc.isenabled()
        gc.disable()
        try:
            for _ in range(iterations):
                start = time.perf_counter()
                model(x)
                torch.cuda.synchronize()
                samples.append((time.perf_counter() - start) * 1e6)
        finally:
            if enabled:
                gc.enable()
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    cuda = torch.device("cuda")
    built = stacks(cuda)
    found: dict[str, Any] = {"device": torch.cuda.get_device_name(), "rounds": []}
    for round_ in range(3):  # interleaved: the loops and the forwards drift together
        costs = measure_host(cuda)
        entry: dict[str, Any] = {"host_us": costs.us, "models": {}}
        for name, (model, x) in built.items():
            samples = forward_us(model, x)
            predicted = Profiler().predict(model, x, device="H200", host=costs, dtype="fp32",
                                           tf32=True)
            assert predicted.predicted_host_ms is not None
            assert predicted.predicted_latency_ms is not None
            loops_host_us = predicted.predicted_host_ms * 1e3 / IN_SITU_HOST_FACTOR
            entry["models"][name] = {
                "min_us": min(samples), "median_us": statistics.median(samples),
                "predicted_host_us_loops": loops_host_us,
                "predicted_device_us": predicted.predicted_device_ms * 1e3,
                "factor_min": min(samples) / loops_host_us,
                "factor_median": statistics.median(samples) / loops_host_us}
        found["rounds"].append(entry)
        print(round_, json.dumps({n: {k: round(v, 3) for k, v in m.items()}
                                  for n, m in entry["models"].items()}))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "host_in_model_h200.json").write_text(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
