"""How long the views of a long profile take to build: a pass of tens of thousands of module
calls (a recurrent cell stepped in a Python loop, a generation's decode steps), this checkout
against an earlier commit.

One command, from the repository root::

    PYTHONPATH=. python benchmarks/long_profile_views.py                  # against HEAD~1
    PYTHONPATH=. python benchmarks/long_profile_views.py --before main --steps 8000 --rounds 7
    PYTHONPATH=. python benchmarks/long_profile_views.py --before /tmp/old  # a package folder
    PYTHONPATH=. python benchmarks/long_profile_views.py --heap 5  # 5 million objects held

In interleaved rounds it starts a fresh process per side (the earlier commit's package from
``git archive`` on ``PYTHONPATH``, then this checkout's, in alternating order) that profiles
the same model (a ``Linear`` and a ``Tanh`` called ``--steps`` times each: ``2 * steps + 1``
calls) and times, on a fresh copy of the profile each (views are built once per profile and
kept), the first ``to_df()``, ``to_df("module")`` and ``str(tree())``, and ``profile()``
itself. It prints each side's minimum and median per view, the ratio of the minima (before /
after: above 1 is faster now) and whether both sides' frames hold the same values.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VIEWS = ("profile", "to_df", "module_df", "tree")


def _child(steps: int, heap: int) -> None:
    """Profile the loop model and print one JSON line: seconds per view, and a digest of the
    frames' values (to check that both sides show the same numbers). ``heap`` million small
    objects are kept alive first, as a notebook or a training script holds its own (each full
    collection of the garbage collector walks them all)."""
    held = [[i] for i in range(heap * 1_000_000)]
    import torch
    from torch import nn

    from moduleprofiler import Profiler

    class Loop(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.cell = nn.Linear(8, 8)
            self.act = nn.Tanh()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for _ in range(steps):
                x = self.act(self.cell(x))
            return x

    model, x = Loop(), torch.randn(1, 8)
    profiler = Profiler()
    profiler.profile(model, x)  # warm-up: imports, formula lookups
    start = time.perf_counter()
    profile = profiler.profile(model, x)
    seconds = {"profile": time.perf_counter() - start}
    digest = hashlib.sha256()
    for view, build in (("to_df", lambda p: p.to_df()),
                        ("module_df", lambda p: p.to_df("module")),
                        ("tree", lambda p: str(p.tree()))):
        fresh = dataclasses.replace(profile)  # no views kept yet
        start = time.perf_counter()
        shown = build(fresh)
        seconds[view] = time.perf_counter() - start
        digest.update((shown if isinstance(shown, str) else shown.to_csv()).encode())
    print(json.dumps({"seconds": seconds, "digest": digest.hexdigest(), "held": len(held)}))


def _archive(rev: str, into: Path) -> None:
    data = subprocess.run(["git", "archive", rev, "moduleprofiler"], cwd=ROOT,
                          check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="data")


def _run(path: Path, steps: int, heap: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", "--steps", str(steps),
                          "--heap", str(heap)],
                         env={"PYTHONPATH": str(path), "PATH": "/usr/bin:/bin",
                              "OMP_NUM_THREADS": "1"},
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default="HEAD~1",
                        help="the earlier commit (git rev), or a folder holding its package")
    parser.add_argument("--steps", type=int, default=8000, help="loop steps (2 calls each)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--heap", type=int, default=0,
                        help="millions of small objects the process holds before profiling")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.steps, args.heap)
        return
    with tempfile.TemporaryDirectory() as folder:
        before = Path(args.before) if Path(args.before).is_dir() else Path(folder)
        if before == Path(folder):
            _archive(args.before, before)
        sides = {"before": before, "after": ROOT}
        times: dict[str, dict[str, list[float]]] = {s: {v: [] for v in VIEWS} for s in sides}
        digests: dict[str, set[str]] = {s: set() for s in sides}
        for round_ in range(args.rounds):
            order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
            for side in order:
                result = _run(sides[side], args.steps, args.heap)
                digests[side].add(result["digest"])
                for view in VIEWS:
                    times[side][view].append(result["seconds"][view])
    print(f"long profile views: {2 * args.steps + 1} calls, {args.rounds} interleaved rounds, "
          f"{args.heap} million objects held, before = {args.before}, after = this checkout")
    print(f"{'view':<10} {'before min':>10} {'before med':>10} {'after min':>10} "
          f"{'after med':>10} {'min ratio':>9}")
    for view in VIEWS:
        b, a = times["before"][view], times["after"][view]
        print(f"{view:<10} {min(b):>10.3f} {statistics.median(b):>10.3f} {min(a):>10.3f} "
              f"{statistics.median(a):>10.3f} {min(b) / min(a):>9.2f}")
    same = digests["before"] == digests["after"] and len(digests["after"]) == 1
    print(f"same values on both sides: {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
