"""How long the ``moduleprofiler`` command takes to answer what needs no model: ``--version``,
``--help`` and argument errors (an unknown flag, a bad choice, a malformed ``--arg``, a bad
``--input-size``), beside the interpreter's own start and ``import torch``.

Every command runs in a fresh subprocess, once per round, in a fresh random order each round
(interleaved, so a busy moment of a shared host falls on all commands alike), after one
warm-up round that fills the file cache. For each command the script prints the minimum and
the median wall time over the rounds, the same for the child's CPU time (user + system, less
sensitive to other processes on a shared machine), whether it imported torch (``-X importtime``
in one extra run) and its target (``--version`` and ``--help`` at most 0.5 s, an
argument error at most 1 s). Both entry points are measured: ``python -m moduleprofiler`` and
the console script's ``module:function`` from ``pyproject.toml`` (``[project.scripts]``),
called as the installed script calls it.

    PYTHONPATH=. python benchmarks/cli_startup.py              # 15 rounds
    PYTHONPATH=. python benchmarks/cli_startup.py --rounds 31
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the dev extra's backport
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def console_script() -> list[str]:
    """``python -c`` calling the console script's ``module:function`` as its wrapper does."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    module, _, function = scripts["project"]["scripts"]["moduleprofiler"].partition(":")
    return [sys.executable, "-c",
            f"import sys; from {module} import {function}; sys.exit({function}())"]


@dataclass
class Command:
    """One command line, its target in seconds (``None``: a reference) and its samples."""

    name: str
    argv: list[str]
    target_s: float | None
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    status: int | None = None

    def run(self) -> None:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        done = subprocess.run(self.argv, cwd=ROOT, capture_output=True, env=_env())
        self.wall.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        self.status = done.returncode

    def imports_torch(self) -> bool:
        done = subprocess.run([self.argv[0], "-X", "importtime", *self.argv[1:]], cwd=ROOT,
                              capture_output=True, text=True, env=_env())
        # the name column is indented by import depth: torch under moduleprofiler is nested
        return any(line.startswith("import time:") and line.rpartition("|")[2].strip() == "torch"
                   for line in done.stderr.splitlines())


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}


def commands() -> list[Command]:
    python = [sys.executable]
    dash_m = [sys.executable, "-m", "moduleprofiler"]
    script = console_script()
    out = [Command("python -c pass", [*python, "-c", "pass"], None),
           Command("python -c 'import torch'", [*python, "-c", "import torch"], None)]
    cases = [("--version", ["--version"], 0.5),
             ("--help", ["--help"], 0.5),
             ("unknown flag", ["m:f", "--bogus"], 1.0),
             ("bad choice", ["m:f", "--color", "purple"], 1.0),
             ("malformed --arg", ["m:f", "-i", "1x2", "--arg", "novalue"], 1.0),
             ("bad --input-size", ["m:f", "-i", "1xZ"], 1.0)]
    for entry, prefix in (("-m", dash_m), ("script", script)):
        out += [Command(f"{entry} {name}", [*prefix, *argv], target)
                for name, argv, target in cases]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    options = parser.parse_args()
    todo = commands()
    for command in todo:  # warm-up: the file cache, .pyc files
        command.run()
        command.wall.clear()
        command.cpu.clear()
    load = os.getloadavg()
    for _ in range(options.rounds):
        for command in random.sample(todo, len(todo)):
            command.run()
    print(f"moduleprofiler CLI start-up, {time.strftime('%Y-%m-%d %H:%M')}: Python "
          f"{platform.python_version()}, {os.cpu_count()} CPUs, {options.rounds} interleaved "
          f"rounds after one warm-up round")
    print(f"load average (1/5/15 min) at start: {load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f}; "
          f"at end: {'/'.join(f'{x:.2f}' for x in os.getloadavg())}")
    print("wall and cpu (child user + system) in seconds; torch: imported torch; "
          "target: the limit on the wall time")
    print(f"{'command':34} {'wall min':>8} {'wall med':>8} {'cpu min':>8} {'cpu med':>8} "
          f"{'exit':>4} {'torch':>5} {'target':>6}")
    for command in todo:
        target = "" if command.target_s is None else f"{command.target_s:.1f}"
        print(f"{command.name:34} {min(command.wall):8.3f} {statistics.median(command.wall):8.3f} "
              f"{min(command.cpu):8.3f} {statistics.median(command.cpu):8.3f} "
              f"{command.status:>4} {'yes' if command.imports_torch() else 'no':>5} {target:>6}")


if __name__ == "__main__":
    main()
