"""Instructions, not seconds: what ``profile()`` adds to a forward, counted by Valgrind's
callgrind (deterministic, so it needs no quiet machine; slow, about 50x a plain run).

    python benchmarks/overhead_instructions.py --size 64 --passes 5
    python benchmarks/overhead_instructions.py --size 224 --passes 2 --variants bare,ops
    python benchmarks/overhead_instructions.py --passes 2 --variants bare,ops --cache

Each variant runs in its own process under ``valgrind --tool=callgrind --instr-atstart=no``:
torchvision's ResNet-50 (batch 1, ``size`` x ``size``, one thread, no grad) is built and run
three times, then this script switches the instruction counting on (``callgrind_control -i
on``), the child runs ``passes`` passes, and the counting is switched off again: the count
holds the passes only, not the imports. Printed: instructions per pass and the ratio to the
bare forward's.

Variants: ``bare`` (the forward), ``runner`` (the pass runner's hooks, no listener),
``noops`` (``profile(operators=False)``), ``ops`` (``profile()``), ``noop_mode`` (a no-op
``TorchDispatchMode`` over the whole forward).

Instructions are not time: the convolutions retire several instructions per cycle, Python's
interpreter far fewer, so the profiler's share of the time is larger than its share of the
instructions. What the count settles is where the profiler's own work goes, without noise.
``--cache`` adds callgrind's simulated caches: the misses the hooks take when the convolutions
between two calls have evicted their code and data, which instructions alone do not show.
Needs ``valgrind`` (``apt install valgrind``).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VARIANTS = {"bare": "bare forward", "runner": "runner, no listener",
            "noops": "profile(operators=False)", "ops": "profile()",
            "noop_mode": "no-op dispatch mode"}
"""Each variant and the tool of ``overhead.py`` it runs."""


def child(variant: str, size: int, passes: int, flags: Path) -> None:
    """Run under callgrind: warm up, signal, wait for the counting, run ``passes``."""
    import torch
    import torchvision

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from overhead import tools_for

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).eval()
    x = torch.randn(1, 3, size, size)
    run = next(tool.run for tool in tools_for(model, x, peers=False)
               if tool.name == VARIANTS[variant])
    with torch.no_grad():
        for _ in range(3):
            run()
        (flags / "ready").touch()
        _wait_for(flags / "go")
        for _ in range(passes):
            run()
    (flags / "done").touch()
    _wait_for(flags / "stop")


def _wait_for(path: Path) -> None:
    while not path.exists():
        time.sleep(0.05)


def count(variant: str, size: int, passes: int, cache: bool = False) -> dict[str, int]:
    """Callgrind's totals of ``passes`` passes of ``variant``, by event name: ``Ir``
    (instructions), and with ``cache`` the simulated cache misses too (``I1mr``, ``D1mr``,
    ``D1mw``: first-level misses of instruction fetches, data reads and writes; ``ILmr``,
    ``DLmr``, ``DLmw``: the same at the last level)."""
    with tempfile.TemporaryDirectory() as folder:
        flags = Path(folder)
        out = flags / "callgrind.out"
        process = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no",
             *(["--cache-sim=yes"] if cache else []), f"--callgrind-out-file={out}",
             sys.executable, __file__, "--child", variant,
             "--size", str(size), "--passes", str(passes), "--flags", folder],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
        for flag, switch in (("ready", "on"), ("done", "off")):
            while not (flags / flag).exists():
                if process.poll() is not None:
                    raise RuntimeError(f"variant {variant!r} ended before {flag!r}")
                time.sleep(0.5)
            subprocess.run(["callgrind_control", "-i", switch, str(process.pid)],
                           check=True, capture_output=True)
            (flags / ("go" if switch == "on" else "stop")).touch()
        process.wait()
        text = subprocess.run(["callgrind_annotate", str(out)], capture_output=True,
                              text=True, check=True).stdout
    events = re.search(r"^Events shown:\s+(.+)$", text, re.MULTILINE)
    totals = re.search(r"^(.*)PROGRAM TOTALS", text, re.MULTILINE)
    if events is None or totals is None:
        raise RuntimeError(f"no total in callgrind's output for {variant!r}")
    numbers = re.findall(r"([\d,]+) \(\s*[\d.]+%\)", totals.group(1))
    return {name: int(number.replace(",", ""))
            for name, number in zip(events.group(1).split(), numbers)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--cache", action="store_true",
                        help="simulate the caches too (slower): misses per pass")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--flags", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.size, args.passes, args.flags)
        return
    variants = args.variants.split(",")
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"--variants: unknown {unknown}; choose from {list(VARIANTS)}")
    print(f"ResNet-50, batch 1, {args.size} x {args.size}, one thread, no grad; "
          f"{args.passes} passes per variant, instructions per pass (callgrind)", flush=True)
    if args.cache:
        print("cache misses per pass, thousands: L1 (instruction fetch, data read, data write) "
              "and last level (the same); estimate: Ir + 10 x L1 misses + 100 x last-level "
              "misses (callgrind's cycle estimate), in M", flush=True)
    per_pass: dict[str, float] = {}
    for variant in variants:
        totals = {name: value / args.passes
                  for name, value in count(variant, args.size, args.passes, args.cache).items()}
        per_pass[variant] = totals["Ir"]
        base = per_pass.get("bare")
        ratio = f"  x{per_pass[variant] / base:.4f} bare" if base else ""
        extra = f"  +{(per_pass[variant] - base) / 1e6:.2f} M over bare" if base else ""
        misses = ""
        if args.cache:
            first = [totals[name] for name in ("I1mr", "D1mr", "D1mw")]
            last = [totals[name] for name in ("ILmr", "DLmr", "DLmw")]
            estimate = totals["Ir"] + 10 * sum(first) + 100 * sum(last)
            misses = ("  L1 " + "/".join(f"{value / 1e3:.0f}" for value in first)
                      + "  LL " + "/".join(f"{value / 1e3:.0f}" for value in last)
                      + f"  estimate {estimate / 1e6:.2f} M")
        print(f"{variant:10s} {per_pass[variant] / 1e6:10.2f} M{ratio}{extra}{misses}",
              flush=True)

if __name__ == "__main__":
    main()
