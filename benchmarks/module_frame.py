"""How long a timing result's module frame takes to build: ``to_df("module")`` of a large
model's ``time_modules`` result, this checkout against an earlier commit.

One command, from the repository root::

    PYTHONPATH=. python benchmarks/module_frame.py                 # against HEAD~1
    PYTHONPATH=. python benchmarks/module_frame.py --before main --rounds 7 --blocks 48

It times the model once (CPU, a fixed count, so both sides read the same samples), saves the
result as JSON, and then, in interleaved rounds, starts a fresh process per side that loads the
JSON and builds the module frame ``--builds`` times: the earlier commit's package (``git
archive`` into a temporary folder on ``PYTHONPATH``) and this checkout's. It prints each side's
minimum and median build time, the ratio of the minima (before / after: above 1 is faster now)
and whether both sides' frames hold the same values.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time
import moduleprofiler
from moduleprofiler.timing import ModuleTiming

timing = ModuleTiming.from_json(sys.argv[1])
times = []
for _ in range(int(sys.argv[2])):
    start = time.perf_counter()
    frame = timing.to_df("module")
    times.append(time.perf_counter() - start)
frame.to_pickle(sys.argv[3])
print(json.dumps({"times": times, "rows": len(frame), "columns": len(frame.columns),
                  "package": moduleprofiler.__file__}))
"""


def model(blocks: int) -> object:
    """A stack of ``blocks`` small transformer-like blocks (5 modules each)."""
    from torch import nn

    def block() -> nn.Module:
        return nn.Sequential(nn.LayerNorm(16), nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16))

    return nn.Sequential(*(block() for _ in range(blocks)))


def export_package(rev: str, into: Path) -> None:
    """The package at ``rev`` (``git archive``) under ``into``."""
    archive = subprocess.run(["git", "archive", rev, "moduleprofiler"], cwd=ROOT,
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")


def build(path: str, document: Path, builds: int, out: Path) -> dict[str, object]:
    """One fresh process of one side: its build times and the frame's shape."""
    # run from the JSON's folder: ``python -c`` puts the working directory first on the path,
    # and this checkout's package would shadow the earlier one
    result = subprocess.run([sys.executable, "-c", CHILD, str(document), str(builds), str(out)],
                            env={**os.environ, "PYTHONPATH": path}, cwd=document.parent,
                            check=True, capture_output=True, text=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="HEAD~1", help="the earlier commit (git rev)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--builds", type=int, default=3, help="frames built per process")
    parser.add_argument("--blocks", type=int, default=48)
    parser.add_argument("--iters", type=int, default=120, help="kept iterations")
    args = parser.parse_args()

    import torch

    from moduleprofiler.timing import time_modules

    torch.manual_seed(0)
    timing = time_modules(model(args.blocks), torch.randn(4, 16), num_iters=args.iters + 20,
                          drop_first=20, measure_overhead=False, progress=False,
                          num_threads=1)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        document = folder / "timing.json"
        timing.to_json(document)
        export_package(args.before, folder / "before")
        sides = {"before": str(folder / "before"), "after": str(ROOT)}
        seen: dict[str, list[float]] = {side: [] for side in sides}
        shape = {}
        for number in range(args.rounds):
            order = list(sides) if number % 2 == 0 else list(reversed(sides))
            for side in order:
                out = build(sides[side], document, args.builds, folder / f"{side}.pkl")
                assert str(out["package"]).startswith(sides[side]), out["package"]
                seen[side].append(min(out["times"]))  # type: ignore[arg-type]
                shape[side] = (out["rows"], out["columns"])
        import pandas as pd

        before, after = (pd.read_pickle(folder / f"{side}.pkl") for side in sides)
        shared = [name for name in after.columns if name in before.columns]
        same = before[shared].equals(after[shared])
    print(f"module frame of {args.blocks} blocks ({shape['after'][0]} modules), "
          f"{args.iters} kept iterations; {args.rounds} interleaved rounds, "
          f"{args.builds} builds per process; before = {args.before}")
    for side, values in seen.items():
        print(f"  {side:6s} min {1e3 * min(values):8.1f} ms  median "
              f"{1e3 * statistics.median(values):8.1f} ms  (frame {shape[side][0]} x "
              f"{shape[side][1]})")
    print(f"  before / after (ratio of minima): {min(seen['before']) / min(seen['after']):.2f}x")
    paired = [b / a for b, a in zip(seen["before"], seen["after"])]
    print(f"  paired per-round ratio: median {statistics.median(paired):.2f}x")
    print(f"  the {len(shared)} shared columns hold the same values: {same}")


if __name__ == "__main__":
    main()
