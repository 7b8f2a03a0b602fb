"""Does a kernel-record (CUPTI) session slow the host's later launches in the same process?

Three worker processes on one CUDA device, driven in lock step (one measures while the others
wait on a pipe, so they never compete for the device or a core):

* ``fresh``: never enters a profiler session (the control: the machine's drift between
  rounds shows here too);
* ``cupti``: enters ``device_trace`` (the kernel clock's torch.profiler session, CPU + CUDA
  activity) between the phases, with kineto's default teardown;
* ``teardown``: the same sessions with ``TEARDOWN_CUPTI=1`` in its environment (kineto then
  calls ``cuptiFinalize`` when a session ends).

Phases: ``fresh`` (no worker has traced yet), ``after1`` (the two tracing workers have entered
and exited one session, tracing two forwards of every model), ``afterN`` (``--sessions`` more
sessions each). Each phase has ``--rounds`` rounds; in every round each worker, in an order
rotated per round, measures

* ``add``: host µs per launch of 2,000 back-to-back ``torch.add`` of two 1,024-element tensors
  (a synchronised start, no synchronisation inside the loop);
* calibrate()'s host costs: ``measure_host`` (its tight loops per operator class, its module
  call by depth; ``cpu_op`` and ``module_call_depth`` are pure CPU work, a control);
* hook-free forward latency of host-bound configurations of the zoo (median and minimum
  over the iterations of ``--seconds``, synchronised).

    PYTHONPATH=. python3 benchmarks/prediction/cupti_after_effect.py [--rounds 7]
        [--sessions 5] [--seconds 0.25] [--configs resnet18:1:fp32,gpt2:1:bf16,bert_base:1:fp32]

Printed: per worker and phase the median and minimum over rounds; the ratio of each phase to
the worker's own fresh phase; and the drift-free ratio, each worker against the ``fresh``
worker in the same round, relative to the same ratio in the fresh phase.

``--truths FIRST INTERLEAVED`` compares two truth files of ``measure_latency_runs.py`` instead
(one with every latency run before the kernel time, one with each latency run followed by its
kernel-time session): per configuration the minimum over runs of each run's median latency,
their ratio, the kernel times and how busy the device was.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import _call, hook_free_latency
from models import DTYPES, by_name

from moduleprofiler.devices import synchronize
from moduleprofiler.prediction.calibrate import measure_host
from moduleprofiler.timing.device_trace import device_trace

WORKERS: tuple[str, ...] = ("fresh", "cupti", "teardown")
TRACING: tuple[str, ...] = ("cupti", "teardown")
PHASES: tuple[str, ...] = ("fresh", "after1", "afterN")
HOST_KEYS: tuple[str, ...] = ("unary", "binary", "gemm", "conv", "layer_norm", "attention",
                              "module_call", "module_call_depth", "cpu_op")
ADD_CALLS = 2000


def _add_us(device: torch.device) -> float:
    """Host µs per launch of ``ADD_CALLS`` back-to-back adds on 1,024-element tensors; the
    median of three loops."""
    a = torch.randn(1024, device=device)
    b = torch.randn(1024, device=device)
    for _ in range(50):
        torch.add(a, b)
    samples = []
    for _ in range(3):
        synchronize(device)
        start = time.perf_counter()
        for _ in range(ADD_CALLS):
            torch.add(a, b)
        samples.append((time.perf_counter() - start) / ADD_CALLS * 1e6)
    synchronize(device)
    return statistics.median(samples)


def _build(configs: list[str], device: torch.device) -> dict[str, Any]:
    steps: dict[str, Any] = {}
    for config in configs:
        name, batch, dtype = config.split(":")
        entry = by_name(name)
        with torch.device(device):
            model = entry.build().eval().to(dtype=DTYPES[dtype])
        inputs = entry.make_input(int(batch), device, DTYPES[dtype])

        def step(model: Any = model, inputs: Any = inputs) -> None:
            with torch.no_grad():
                _call(model, inputs)
        steps[config] = step
    return steps


def _session(steps: dict[str, Any], device: torch.device) -> int:
    """One kernel-clock session around two forwards of every configuration, as the truth
    script's kernel time; the number of device records it read (a CPU dry run: the
    forwards alone)."""
    if device.type != "cuda":
        for step in steps.values():
            step()
        return 0
    with device_trace(device) as records:
        for step in steps.values():
            for _ in range(2):
                step()
    return len(records.activities)


def worker(configs: list[str], seconds: float, device: torch.device) -> None:
    """Wait for commands on stdin ("measure", "session", "quit"); answer one JSON line."""
    torch.set_float32_matmul_precision("high")
    steps = _build(configs, device)
    for step in steps.values():
        for _ in range(3):
            step()
    synchronize(device)
    print(json.dumps({"ready": True, "pid": os.getpid(),
                      "TEARDOWN_CUPTI": os.environ.get("TEARDOWN_CUPTI")}), flush=True)
    for line in sys.stdin:
        command = line.strip()
        if command == "quit":
            break
        if command == "session":
            began = time.perf_counter()
            count = _session(steps, device)
            print(json.dumps({"records": count, "s": time.perf_counter() - began}), flush=True)
            continue
        result: dict[str, Any] = {"add_us": _add_us(device)}
        host = measure_host(device, calls=200, rounds=3).us
        result["host"] = {key: host[key] for key in HOST_KEYS}
        result["latency"] = {config: hook_free_latency(step, device, seconds)
                             for config, step in steps.items()}
        print(json.dumps(result), flush=True)


class _Worker:
    def __init__(self, name: str, args: argparse.Namespace) -> None:
        env = dict(os.environ)
        if name == "teardown":
            env["TEARDOWN_CUPTI"] = "1"
        else:
            env.pop("TEARDOWN_CUPTI", None)
        self.name = name
        self.process = subprocess.Popen(
            [sys.executable, __file__, "--worker", "--configs", args.configs,
             "--seconds", str(args.seconds), "--device", args.device],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def ask(self, command: str) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        if command:
            self.process.stdin.write(command + "\n")
            self.process.stdin.flush()
        while True:  # a library may print to stdout too; the answer is the next JSON line
            line = self.process.stdout.readline()
            if not line:
                raise RuntimeError(f"worker {self.name} ended")
            if line.startswith("{"):
                answer: dict[str, Any] = json.loads(line)
                return answer

    def quit(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("quit\n")
        self.process.stdin.flush()
        self.process.wait(timeout=60)


def _rows(samples: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Per quantity, its value in each round (latency: each round's median and minimum)."""
    rows: dict[str, list[float]] = {"add_us": [s["add_us"] for s in samples]}
    for key in HOST_KEYS:
        rows[f"host.{key}"] = [s["host"][key] for s in samples]
    for config in samples[0]["latency"]:
        rows[f"{config} med_ms"] = [s["latency"][config]["median_ms"] for s in samples]
        rows[f"{config} min_ms"] = [s["latency"][config]["min_ms"] for s in samples]
    return rows


def driver(args: argparse.Namespace) -> None:
    began = time.perf_counter()
    _header(args.device)
    workers = {name: _Worker(name, args) for name in WORKERS}
    for w in workers.values():
        print(w.name, w.ask(""), flush=True)
    for w in workers.values():  # one measurement each, not kept: first calls' lazy set-up
        w.ask("measure")
    print(f"workers ready in {time.perf_counter() - began:.1f} s", flush=True)
    data: dict[str, dict[str, list[dict[str, Any]]]] = {
        name: {phase: [] for phase in PHASES} for name in WORKERS}
    for phase in PHASES:
        sessions = {"fresh": 0, "after1": 1, "afterN": args.sessions}[phase]
        for _ in range(sessions):
            for name in TRACING:
                answer = workers[name].ask("session")
                print(f"{name}: session, {answer['records']} device records, "
                      f"{answer['s']:.2f} s", flush=True)
        for round_index in range(args.rounds):
            order = WORKERS[round_index % 3:] + WORKERS[:round_index % 3]
            for name in order:
                data[name][phase].append(workers[name].ask("measure"))
        print(f"phase {phase} done at {time.perf_counter() - began:.1f} s", flush=True)
    for w in workers.values():
        w.quit()
    _report(data)
    if args.json:
        Path(args.json).write_text(json.dumps(data), encoding="utf-8")
    print(f"total {time.perf_counter() - began:.1f} s")


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def _header(device: str) -> None:
    """What the numbers were measured on: torch, the device, the CPU and its governor."""
    cpu = "unknown"
    with open("/proc/cpuinfo", encoding="utf-8") as info:
        cpu = next((line.split(":", 1)[1].strip() for line in info
                    if line.startswith("model name")), cpu)
    governor = Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    print(f"torch {torch.__version__} (CUDA {torch.version.cuda}); device {device}; "
          f"CPU {cpu}, {os.cpu_count()} cores, governor "
          f"{governor.read_text().strip() if governor.exists() else 'n/a'}; "
          f"TEARDOWN_CUPTI in the driver's environment: {os.environ.get('TEARDOWN_CUPTI')}",
          flush=True)


def _report(data: dict[str, dict[str, list[dict[str, Any]]]]) -> None:
    rows = {name: {phase: _rows(data[name][phase]) for phase in PHASES} for name in WORKERS}
    keys = list(rows["fresh"]["fresh"])
    print("\n== per worker and phase: median [min] over rounds (µs per launch / per call; "
          "ms latency)")
    print(f"{'quantity':34s}" + "".join(f"{w + '/' + p:>20s}" for w in WORKERS for p in PHASES))
    for key in keys:
        cells = []
        for w in WORKERS:
            for p in PHASES:
                values = rows[w][p][key]
                cells.append(f"{statistics.median(values):10.3f} [{min(values):7.3f}]")
        print(f"{key:34s}" + "".join(f"{c:>20s}" for c in cells))
    print("\n== ratio of a phase's median to the same worker's fresh phase")
    print(f"{'quantity':34s}" + "".join(f"{w + '/' + p:>18s}" for w in WORKERS
                                         for p in PHASES[1:]))
    for key in keys:
        cells = [_ratio(statistics.median(rows[w][p][key]),
                        statistics.median(rows[w]["fresh"][key]))
                 for w in WORKERS for p in PHASES[1:]]
        print(f"{key:34s}" + "".join(f"{c:18.3f}" for c in cells))
    print("\n== drift-free: median over rounds of (worker / fresh worker, same round), per phase;"
          "\n   last columns: that ratio in a phase over the same ratio in the fresh phase")
    head = [f"{w}/{p}" for w in TRACING for p in PHASES] + [f"{w} {p}/fresh" for w in TRACING
                                                              for p in PHASES[1:]]
    print(f"{'quantity':34s}" + "".join(f"{h:>24s}" for h in head))
    for key in keys:
        ratio = {(w, p): statistics.median(_ratio(a, b) for a, b in zip(
            rows[w][p][key], rows["fresh"][p][key], strict=True))
            for w in TRACING for p in PHASES}
        cells = [ratio[(w, p)] for w in TRACING for p in PHASES]
        cells += [_ratio(ratio[(w, p)], ratio[(w, "fresh")]) for w in TRACING for p in PHASES[1:]]
        print(f"{key:34s}" + "".join(f"{c:24.3f}" for c in cells))


def _compare_truths(first: str, interleaved: str) -> None:
    def read(path: str) -> dict[tuple[str, int, str], dict[str, Any]]:
        lines = Path(path).read_text(encoding="utf-8").splitlines()[1:]
        rows = [json.loads(line) for line in lines]
        return {(r["model"], r["batch"], r["dtype"]): r for r in rows if r.get("runs")}

    fresh, traced = read(first), read(interleaved)
    bound = []
    print(f"{'configuration':>26} {'first ms':>9} {'interl. ms':>10} {'ratio':>6} "
          f"{'kernels us':>11} {'interl. us':>11} {'busy':>5}")
    for key, row in fresh.items():
        if key not in traced:
            continue
        low = min(run["median_ms"] for run in row["runs"])
        other = min(run["median_ms"] for run in traced[key]["runs"])
        busy = row["kernels_us"] / 1e3 / low
        if busy < 0.8:
            bound.append(other / low)
        print(f"{' '.join(map(str, key)):>26} {low:9.3f} {other:10.3f} {other / low:6.2f} "
              f"{row['kernels_us']:11.1f} {traced[key]['kernels_us']:11.1f} {busy:5.2f}")
    print(f"host-bound (busy < 0.8 in the first): interleaved / first median "
          f"{statistics.median(bound):.3f}, {min(bound):.2f} to {max(bound):.2f} (n={len(bound)})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--sessions", type=int, default=5,
                        help="sessions entered before the afterN phase (after the first)")
    parser.add_argument("--seconds", type=float, default=0.25,
                        help="time per latency measurement (at least 10 iterations)")
    parser.add_argument("--configs", default="resnet18:1:fp32,gpt2:1:bf16,bert_base:1:fp32")
    parser.add_argument("--json", default=None, help="also write every round's samples here")
    parser.add_argument("--device", default="cuda", help="cpu: a dry run, no sessions")
    parser.add_argument("--truths", nargs=2, metavar=("FIRST", "INTERLEAVED"), default=None,
                        help="compare two truth files instead of measuring")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.truths:
        _compare_truths(*args.truths)
    elif args.worker:
        worker(args.configs.split(","), args.seconds, torch.device(args.device))
    else:
        driver(args)


if __name__ == "__main__":
    main()
