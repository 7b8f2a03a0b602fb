"""The in-model factor of real models beside the synthetic stacks', in one fresh process that
never runs a profiler session (CUPTI would make every later launch cost more): the tight-loop
costs (``measure_host``), then per configuration the fastest hook-free forward against its host
time priced from those costs as ``predict`` prices it (``in_model=1``). The zoo's models run at
batch 1 (host-bound on a datacenter GPU), fp32 (TF32) and bf16, with the three synthetic
stacks that ``calibrate()`` measures the factor on, in interleaved rounds; the loops are
measured again at the end (their drift is printed).

Says whether real models' launches cost the host what the synthetic stacks' do, on the same
host and in the same process state: the question behind a host model that is low on real models.

    PYTHONPATH=. python3 benchmarks/prediction/host_in_model_real.py --out DIR [--rounds 3]
        [--only resnet18,gpt2]
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import _call
from models import DTYPES, ZOO

from moduleprofiler import ModuleProfiler
from moduleprofiler.prediction.calibrate import measure_host
from moduleprofiler.prediction.host_in_model import fastest_forward_us, stacks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default=None, help="comma-separated zoo model names")
    args = parser.parse_args()
    began = time.perf_counter()
    cuda = torch.device("cuda")
    torch.set_float32_matmul_precision("high")
    costs = measure_host(cuda)
    loops = dataclasses.replace(costs, in_model=1.0)
    configs: list[dict[str, Any]] = []
    for name, (model, x) in stacks(cuda).items():
        configs.append({"model": f"stack:{name}", "dtype": "fp32", "model_obj": model,
                        "inputs": x})
    for entry in ZOO:
        if args.only and entry.name not in args.only.split(","):
            continue
        with torch.device(cuda):
            built = entry.build().eval()
        for dtype_name, dtype in DTYPES.items():
            configs.append({"model": entry.name, "dtype": dtype_name,
                            "model_obj": copy.deepcopy(built).to(dtype=dtype),
                            "inputs": entry.make_input(1, cuda, dtype)})
        del built
    for config in configs:
        predicted = ModuleProfiler().predict(config["model_obj"], config["inputs"],
                                             device="H200", host=loops, dtype=config["dtype"],
                                             tf32=True)
        assert predicted.predicted_host_ms is not None
        config["priced_us"] = predicted.predicted_host_ms * 1e3
        config["device_us"] = predicted.predicted_device_ms * 1e3
        config["fastest_us"] = []
    print(f"built and priced {len(configs)} configurations in "
          f"{time.perf_counter() - began:.1f} s", flush=True)
    for round_index in range(args.rounds):
        order = configs if round_index % 2 == 0 else configs[::-1]
        for config in order:
            def step(model: Any = config["model_obj"], inputs: Any = config["inputs"]) -> Any:
                return _call(model, inputs)
            config["fastest_us"].append(fastest_forward_us(step, cuda))
    after = measure_host(cuda)
    lines = [f"# command: PYTHONPATH=. python3 benchmarks/prediction/host_in_model_real.py "
             f"--out $OUT --rounds {args.rounds}   ({torch.cuda.get_device_name()}, torch "
             f"{torch.__version__}, {costs.cpu}; one fresh process, no profiler session)",
             "tight loops (µs per call), start -> end of the run:"]
    lines += [f"  {k:>18} {costs.us[k]:8.3f} -> {after.us[k]:8.3f}" for k in costs.us]
    lines.append("factor = fastest forward / host priced from the start's loops (in_model=1); "
                 "per round, then the median")
    rows = []
    for config in configs:
        factors = [f / config["priced_us"] for f in config["fastest_us"]]
        median = statistics.median(factors)
        rows.append({k: v for k, v in config.items() if k not in ("model_obj", "inputs")}
                    | {"factors": factors, "factor": median})
        lines.append(f"  {config['model']:>22} {config['dtype']:>5}  priced "
                     f"{config['priced_us']:8.0f} us  device {config['device_us']:7.0f} us  "
                     f"fastest {min(config['fastest_us']):8.0f} us  factor "
                     + " ".join(f"{f:.3f}" for f in factors) + f"  median {median:.3f}")
    synthetic = [r["factor"] for r in rows if r["model"].startswith("stack:")]
    real = [r["factor"] for r in rows if not r["model"].startswith("stack:")]
    lines.append(f"synthetic stacks: median {statistics.median(synthetic):.3f} "
                 f"({min(synthetic):.3f} to {max(synthetic):.3f})")
    if real:
        lines.append(f"zoo models at batch 1: median {statistics.median(real):.3f} "
                     f"({min(real):.3f} to {max(real):.3f}, n={len(real)})")
    lines.append(f"total {time.perf_counter() - began:.1f} s")
    report = "\n".join(lines)
    print(report, flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "host_in_model_real_h200.txt").write_text(report + "\n", encoding="utf-8")
    (out / "host_in_model_real_h200.json").write_text(json.dumps(
        {"costs": costs.us, "costs_after": after.us, "rows": rows}, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
