"""Run the torchrun recipe (``examples/distributed_torchrun.py``) many times in a row on CPU
with gloo, 2 processes, and count the runs that fail.

    PYTHONPATH=. python benchmarks/distributed_repeat.py            # 20 runs
    PYTHONPATH=. python benchmarks/distributed_repeat.py --runs 50 --load 2

A run passes when torchrun exits 0 within ``--timeout`` seconds, rank 0 printed the recipe's
last line, and neither process wrote a sign of a disorderly end on stderr: a collective left
unwaited at exit ("unwaited collective calls"), an abort ("terminate called", SIGABRT), a
traceback. ``--load N`` keeps N busy processes spinning during the runs, to try the recipe on a
machine with less CPU than it has processes. Prints one line per run and ``passes / failures``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMMAND = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
           "2", "examples/distributed_torchrun.py"]
EXPECTED = "gradient all-reduce per rank: 76840 bytes"  # (64*256 + 256 + 256*10 + 10) * 4
BAD_SIGNS = ("unwaited collective", "terminate called", "SIGABRT", "Traceback",
             "Signal 6", "exitcode")


def one_run(timeout: float) -> tuple[bool, float, str]:
    """``(passed, seconds, why)`` of one torchrun of the recipe."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    try:
        result = subprocess.run(COMMAND, cwd=ROOT, env=env, capture_output=True, text=True,
                                timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, time.perf_counter() - start, f"no exit within {timeout:.0f} s (a hang)"
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        return False, seconds, f"exit status {result.returncode}: {result.stderr[-800:]!r}"
    if EXPECTED not in result.stdout:
        return False, seconds, f"rank 0 did not print {EXPECTED!r}: {result.stdout[-400:]!r}"
    signs = [sign for sign in BAD_SIGNS if sign in result.stderr]
    if signs:
        return False, seconds, f"stderr shows {signs}: {result.stderr[-800:]!r}"
    return True, seconds, ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=240.0)
    parser.add_argument("--load", type=int, default=0, help="busy processes during the runs")
    options = parser.parse_args()
    import torch

    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, {options.runs} runs of "
          f"{' '.join(COMMAND[1:])} (gloo), {options.load} busy processes beside")
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(options.load)]
    passes = failures = 0
    try:
        for run in range(1, options.runs + 1):
            load = os.getloadavg()[0]
            passed, seconds, why = one_run(options.timeout)
            passes += passed
            failures += not passed
            print(f"run {run:3d}: {'pass' if passed else 'FAIL'} {seconds:6.1f} s "
                  f"(load average {load:.1f}){'' if passed else ': ' + why}", flush=True)
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    print(f"passes {passes} / failures {failures} of {options.runs}")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
