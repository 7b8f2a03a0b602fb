"""On a host with 2 GPUs: the torchrun recipe with NCCL returns, and so does ``gather`` in a
program that never called ``torch.cuda.set_device`` (the hang of issue 23, item 9).

    PYTHONPATH=. python benchmarks/distributed_nccl.py            # needs 2 CUDA GPUs
    PYTHONPATH=. python benchmarks/distributed_nccl.py --gloo     # the same checks on CPU

Two torchrun launches of 2 processes, each under a wall-clock limit (``--timeout``, default
200 s; a run that does not finish is a hang):

1. ``examples/distributed_torchrun.py`` as the docs show it: exit 0 and the recipe's output.
2. this file as a worker that builds its model on ``cuda:LOCAL_RANK`` *without*
   ``torch.cuda.set_device`` (the recipe before the fix): ``gather`` must return on every
   rank, warn that it ran on ``cuda:LOCAL_RANK``, and rank 0 must hold both ranks' profiles.

Prints each launch's verdict, its time and the tail of its output, then ``passes / failures``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORKER = "--worker-without-set-device"


def worker() -> None:
    """One rank of launch 2: the recipe's DDP model on cuda:LOCAL_RANK, no set_device."""
    import torch
    import torch.distributed as dist
    from torch import nn

    from moduleprofiler import ModuleProfiler
    from moduleprofiler.distributed import CommunicationListener, gather

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    try:
        local = int(os.environ["LOCAL_RANK"])
        device = torch.device("cuda", local) if cuda else torch.device("cpu")
        torch.manual_seed(0)
        model = nn.parallel.DistributedDataParallel(
            nn.Sequential(nn.Linear(64, 256), nn.GELU(), nn.Linear(256, 10)).to(device))
        batch = torch.randn(8 * (1 + dist.get_rank()), 64, device=device)
        profile = ModuleProfiler().profile(model, batch, backward=True,
                                           listeners=[CommunicationListener()])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = gather(profile, dst=0)
        said = [str(w.message) for w in caught if "set_device" in str(w.message)]
        print(f"rank {dist.get_rank()}: gather returned; current device "
              f"{torch.cuda.current_device() if cuda else 'cpu'}; "
              f"warning: {said[0] if said else None}", flush=True)
        if result is not None:
            # 8 and 16 rows of (64 * 256 + 256 * 10) MACs
            print(f"rank 0 holds {result.world_size} profiles, total MACs {result.total_macs} "
                  f"(by hand {24 * (64 * 256 + 256 * 10)})", flush=True)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def launch(script: list[str], gloo: bool, timeout: float) -> tuple[bool, float, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if gloo:
        env["CUDA_VISIBLE_DEVICES"] = ""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               "--nproc_per_node", "2", *script]
    start = time.perf_counter()
    try:
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                                timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        return False, time.perf_counter() - start, f"HANG: no exit within {timeout:.0f} s\n{out}"
    seconds = time.perf_counter() - start
    text = f"exit status {result.returncode}\n{result.stdout}{result.stderr[-2000:]}"
    return result.returncode == 0, seconds, text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gloo", action="store_true", help="CPU processes, gloo (no GPU)")
    parser.add_argument("--timeout", type=float, default=200.0)
    parser.add_argument(WORKER, action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.worker_without_set_device:
        worker()
        return
    import torch

    gpus = torch.cuda.device_count()
    print(f"torch {torch.__version__}, {gpus} GPUs "
          f"({', '.join(torch.cuda.get_device_name(i) for i in range(gpus)) or 'none'}), "
          f"backend {'gloo' if options.gloo else 'nccl'}")
    if not options.gloo and gpus < 2:
        sys.exit("needs 2 CUDA GPUs (or --gloo)")
    checks = [
        ("the recipe (examples/distributed_torchrun.py)", ["examples/distributed_torchrun.py"],
         ("gradient all-reduce per rank: 76840 bytes",)),
        ("gather without torch.cuda.set_device", [__file__, WORKER],
         ("rank 0: gather returned", "rank 1: gather returned", "rank 0 holds 2 profiles")),
    ]
    passes = failures = 0
    for name, script, expected in checks:
        ok, seconds, text = launch(script, options.gloo, options.timeout)
        ok = ok and all(line in text for line in expected)
        passes += ok
        failures += not ok
        print(f"\n=== {name}: {'pass' if ok else 'FAIL'} in {seconds:.1f} s ===")
        print(text.strip()[-3000:])
    print(f"\npasses {passes} / failures {failures} of {len(checks)}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
