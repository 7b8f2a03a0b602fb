"""GPU proof of the event clock: known-duration modules, real matmuls, ResNet-50 and GPT-2.

Run on a machine with CUDA (from the repository root)::

    PYTHONPATH=. python3 benchmarks/gpu_timing.py            # about 2-3 minutes on an H100
    PYTHONPATH=. python3 benchmarks/gpu_timing.py --smoke    # CPU, tiny sizes: code paths only

Prints, for each check, per-module error against ground truth, the sum of self times over the
root (coverage) and the hooked / hook-free whole-model ratio. Ground truth for a
``torch.cuda._sleep`` module or a matmul is its median CUDA-event time measured in isolation.
The ``cpu-clock`` rows show what a CPU clock around each module reads on the same GPU model
(no synchronisation: the failure of nnprofiler's CUDA path and moduleprofiler 0.0.4).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from moduleprofiler.timing import benchmark
from moduleprofiler.timing import time_modules as _time_modules
from moduleprofiler.timing import train_step_times as _train_step_times

SMOKE = False
DEVICE = torch.device("cpu")
CYCLES_PER_US = 1000.0


def _clock(kwargs: dict[str, Any]) -> str:
    """This script proves the CUDA *event* clock (``benchmarks/gpu_kernel_clock.py`` proves
    the kernel clock, the default since): events wherever the timed device is CUDA."""
    device = kwargs.get("device")
    on_cuda = DEVICE.type == "cuda" and (device is None or torch.device(device).type == "cuda")
    return "events" if on_cuda else "auto"


def time_modules(*args: Any, **kwargs: Any) -> Any:
    """``time_modules`` on the event clock (see :func:`_clock`)."""
    return _time_modules(*args, clock=_clock(kwargs), **kwargs)


def train_step_times(*args: Any, **kwargs: Any) -> Any:
    """``train_step_times`` on the event clock (see :func:`_clock`)."""
    return _train_step_times(*args, clock=_clock(kwargs), **kwargs)


# -- known-duration modules ------------------------------------------------------------------
def _busy(us: float) -> None:
    if DEVICE.type == "cuda":
        torch.cuda._sleep(int(us * CYCLES_PER_US))
    else:
        end = time.perf_counter_ns() + int(us * 1000)
        while time.perf_counter_ns() < end:
            pass


class _SleepFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor | None, fwd_us: float,  # type: ignore[override]
                bwd_us: float) -> Tensor:
        _busy(fwd_us)
        ctx.bwd_us = bwd_us
        ctx.has_weight = weight is not None
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        _busy(ctx.bwd_us)
        return grad, grad.new_zeros(1) if ctx.has_weight else None, None, None


class Sleep(nn.Module):
    """Occupies the GPU for ``fwd_us`` (and ``bwd_us`` in backward); ``param`` gives it a
    parameter (so that its output needs a gradient even if its input does not)."""

    def __init__(self, fwd_us: float, bwd_us: float = 0.0, param: bool = False) -> None:
        super().__init__()
        self.fwd_us = fwd_us
        self.bwd_us = bwd_us
        self.weight = nn.Parameter(torch.zeros(1)) if param else None

    def forward(self, x: Tensor) -> Tensor:
        if torch.is_grad_enabled() and (x.requires_grad or self.weight is not None):
            return _SleepFn.apply(x, self.weight, self.fwd_us, self.bwd_us)
        _busy(self.fwd_us)
        return x


def event_ms(fn: Callable[[], Any], reps: int = 30, primed: bool = True,
             spin_us: float = 300) -> float:
    """Median time of ``fn`` alone: CUDA events around it, one sync per rep (CPU: wall).

    ``primed``: a ``spin_us`` ``_sleep`` is queued first, so that the start event is recorded
    while the GPU is busy and the interval holds the kernels only, not the launch latency of
    an idle GPU (the GPU-bound ground truth). The spin must outlast the CPU's way to ``fn``'s
    first kernel (an autograd backward's start takes longer than a plain call's)."""
    for _ in range(3):
        fn()
    samples = []
    for _ in range(reps):
        if DEVICE.type == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            if primed:
                torch.cuda._sleep(int(spin_us * CYCLES_PER_US))
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            samples.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter_ns()
            fn()
            samples.append((time.perf_counter_ns() - t0) / 1e6)
    samples.sort()
    return samples[len(samples) // 2]


def block_ms(fn: Callable[[], Any], calls: int = 20, reps: int = 7) -> float:
    """Median over ``reps`` of the mean time of ``calls`` back-to-back calls (primed): the
    sustained, GPU-bound cost of one call, as inside a model."""
    if DEVICE.type != "cuda":
        return event_ms(fn)
    for _ in range(3):
        fn()
    samples = []
    for _ in range(reps):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(int(300 * CYCLES_PER_US))
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) / calls)
    samples.sort()
    return samples[len(samples) // 2]


def profiler_kernel_ms(chain: nn.Sequential, x: Tensor, iters: int) -> dict[str, float]:
    """In-situ kernel time per layer without hooks: the chain runs behind a 600 us sleep
    (GPU-bound) inside ``record_function`` scopes, and CUPTI's kernel durations are summed per
    scope (gaps between kernels excluded). Mean ms per call, keyed by layer index."""
    from torch.profiler import ProfilerActivity, profile, record_function

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA]
                                           if DEVICE.type == "cuda" else [])
    with torch.no_grad(), profile(activities=activities) as prof:
        for _ in range(iters):
            _busy(600)
            h = x
            for i, layer in enumerate(chain):
                with record_function(f"layer_{i}"):
                    h = layer(h)
            if DEVICE.type == "cuda":
                torch.cuda.synchronize()
    out = {}
    for event in prof.key_averages():
        if event.key.startswith("layer_"):
            total = getattr(event, "device_time_total", None)
            if total is None:
                total = getattr(event, "cuda_time_total", 0.0)
            if DEVICE.type != "cuda":
                total = event.cpu_time_total
            out[event.key[len("layer_"):]] = total / event.count / 1000.0
    return out


def calibrate_sleep() -> None:
    global CYCLES_PER_US
    if DEVICE.type != "cuda":
        return
    cycles = 10_000_000
    ms = event_ms(lambda: torch.cuda._sleep(cycles), reps=10, primed=False)
    CYCLES_PER_US = cycles / (ms * 1000)
    print(f"torch.cuda._sleep: {CYCLES_PER_US:.0f} cycles per us")


# -- printing ----------------------------------------------------------------------------------
def header(title: str) -> None:
    print(f"\n=== {title} ===")


def error_table(rows: list[tuple[str, float, float]]) -> list[float]:
    """Print ``name, measured, truth`` rows with relative errors; return the errors (%)."""
    print(f"{'module':<28}{'truth_ms':>11}{'measured_ms':>13}{'error':>9}")
    errors = []
    for name, measured, truth in rows:
        error = 100 * (measured - truth) / truth
        errors.append(error)
        print(f"{name:<28}{truth:>11.4f}{measured:>13.4f}{error:>8.2f}%")
    return errors


# -- checks ------------------------------------------------------------------------------------
def known_sleeps() -> dict[str, float]:
    header("known-duration _sleep modules: nested, reused, identity, in-place successor")
    shared = Sleep(100)
    model = nn.Sequential(
        Sleep(300),  # keeps the GPU busy from the start: every module below is GPU-bound
        Sleep(20),
        nn.Sequential(Sleep(200), shared, nn.Identity()),
        shared,
        Sleep(1000),
        nn.ReLU(inplace=True),
        Sleep(50),
    )
    x = torch.zeros(1024, device=DEVICE)
    truths = {path: event_ms(partial(model.get_submodule(path), x)) * calls
              for path, calls in (("1", 1), ("2.0", 1), ("2.1", 2), ("4", 1), ("6", 1))}
    with torch.no_grad():
        timing = time_modules(model, x, num_iters=120 if not SMOKE else 12, drop_first=20
                              if not SMOKE else 2, warmup_seconds=0.5 if not SMOKE else 0)
    errors = error_table([(p, float(np.median(timing.samples(p))), t) for p, t in truths.items()])
    print(f"sum of self / root (coverage): {timing.coverage:.4f}; "
          f"hooked / hook-free whole model: {timing.overhead_ratio:.4f}; "
          f"calls per iteration of the reused module: {len(timing.calls('2.1'))}")
    if DEVICE.type == "cuda":
        idle = nn.Sequential(Sleep(20))
        cold = time_modules(idle, x, num_iters=40, drop_first=5, warmup_seconds=0)
        print(f"launch-bound (idle GPU before the module): Sleep(20) reads "
              f"{float(np.median(cold.samples('0'))):.4f} ms against a kernel of "
              f"{truths['1']:.4f} ms: GPU-timeline time includes the launch gap")
        cpu = time_modules(model, x, num_iters=40, drop_first=5, warmup_seconds=0,
                           device="cpu")
        print("cpu-clock (no sync) on the same GPU model, as nnprofiler/0.0.4 read it:")
        error_table([(p, float(np.median(cpu.samples(p))), t) for p, t in truths.items()])
    return {"max_abs_error_pct": max(abs(e) for e in errors), "coverage": timing.coverage,
            "overhead": timing.overhead_ratio}


def matmuls() -> dict[str, float]:
    header("real matmuls (GPU-bound): per-module event time in situ vs isolated blocks")
    n = 4096 if not SMOKE else 64
    batch = 512 if not SMOKE else 8
    chain = nn.Sequential(nn.Linear(n, n), nn.GELU(), nn.Linear(n, n // 4), nn.ReLU(),
                          nn.Linear(n // 4, n)).to(DEVICE)
    x = torch.randn(batch, n, device=DEVICE)
    with torch.no_grad():
        idle = time_modules(chain, x, num_iters=60 if not SMOKE else 6, drop_first=10
                            if not SMOKE else 2, warmup_seconds=0.5 if not SMOKE else 0)
    # a 600 us sleep first: the CPU queues the whole chain while the GPU sleeps, so every
    # module below runs GPU-bound (no idle gaps waiting for launches)
    model = nn.Sequential(Sleep(600), *chain)
    chain_paths = {str(i): str(i + 1) for i in range(len(chain))}
    inputs: dict[str, Tensor] = {}
    with torch.no_grad():
        h = x
        for i, layer in enumerate(chain):
            inputs[str(i)] = h
            h = layer(h)
        truths = {str(i): block_ms(partial(layer, inputs[str(i)]))
                  for i, layer in enumerate(chain)}
        timing = time_modules(model, x, num_iters=100 if not SMOKE else 10,
                              drop_first=10 if not SMOKE else 2,
                              warmup_seconds=0.5 if not SMOKE else 0)
    print("chain starting on an idle GPU (launch-bound between small kernels):")
    error_table([(f"{p} ({type(chain[int(p)]).__name__})", float(np.median(idle.samples(p))), t)
                 for p, t in truths.items()])
    print(f"hooked / hook-free {idle.overhead_ratio:.4f}")
    try:
        kernels = profiler_kernel_ms(chain, x, 30 if not SMOKE else 3)
    except Exception as exc:  # the profiler is a cross-check only
        print(f"(profiler cross-check unavailable: {type(exc).__name__}: {exc})")
        kernels = {}
    print("same chain behind a 600 us sleep (GPU-bound), against isolated blocks:")
    errors = error_table([(f"{p} ({type(chain[int(p)]).__name__})",
                           float(np.median(timing.samples(chain_paths[p]))), t)
                          for p, t in truths.items()])
    if kernels:
        print("same GPU-bound chain against CUPTI kernel time in situ, no hooks:")
        errors = error_table([(f"{p} ({type(chain[int(p)]).__name__})",
                               float(np.median(timing.samples(chain_paths[p]))), kernels[p])
                              for p in truths if p in kernels])
        truths = {p: kernels[p] for p in truths if p in kernels}
    big = [e for (_, t), e in zip(truths.items(), errors) if t >= 0.018]
    worst = max(abs(e) for e in big) if big else math.nan
    print(f"coverage {timing.coverage:.4f}; hooked / hook-free {timing.overhead_ratio:.4f}; "
          f"max |error| over modules >= 18 us (last table): {worst:.2f}%")
    return {"max_abs_error_pct": worst}


def backward_sleeps() -> dict[str, float]:
    header("backward of known-duration modules (training steps)")
    shared = Sleep(40, 150)

    class Residual(nn.Module):
        """``main(x) + short(x)``: the shortcut runs first in backward, and the input's
        gradient is complete only after both branches."""

        def __init__(self) -> None:
            super().__init__()
            self.main = Sleep(30, 250)
            self.short = Sleep(30, 80)

        def forward(self, x: Tensor) -> Tensor:
            return self.main(x) + self.short(x)

    model = nn.Sequential(Sleep(30, 300), nn.ReLU(inplace=True),
                          nn.Sequential(Sleep(30, 100), shared, nn.Dropout(0.0)), shared,
                          Residual(), Sleep(30, 500))
    x = torch.zeros(1024, device=DEVICE, requires_grad=True)
    truths = {"0": 0.300, "2.0": 0.100, "2.1": 0.300, "4.main": 0.250, "4.short": 0.080,
              "5": 0.500}
    if DEVICE.type == "cuda":
        # a sleep kernel takes a fixed time plus a time proportional to its length: fitted
        # from 100 and 500 us sleeps timed alone (scaling every truth by the 100 us ratio
        # would count the fixed part 3-5 times over for a 300-500 us module)
        short, long = event_ms(lambda: _busy(100)), event_ms(lambda: _busy(500))
        slope = (long - short) / 0.4
        fixed = short - 0.1 * slope
        print(f"sleep kernel: {fixed * 1000:.2f} us fixed + {slope:.4f} x nominal")
        truths = {p: fixed + t * slope for p, t in truths.items()}
    results = {}
    for method in ("nodes",):  # the one attribution: autograd node -> creating call
        timing = train_step_times(model, x, num_iters=40 if not SMOKE else 6,
                                  drop_first=5 if not SMOKE else 1)
        first = timing.samples("0", phase="backward")
        print(f"first layer backward p10/p50/p90: {np.percentile(first, [10, 50, 90]).round(4)}")
        print(f"method {method}:")
        errors = error_table([(p, float(np.median(timing.samples(p, phase="backward"))), t)
                              for p, t in truths.items()])
        big = [e for (p, _), e in zip(truths.items(), errors) if p != "4.short"]
        print(f"max |error| without the shortcut: {max(abs(e) for e in big):.2f}%")
        identity = timing.samples("2.2", phase="backward")
        print(f"identity Dropout backward: "
              f"{float(np.median(identity)) if identity.size else math.nan:.4f} ms; "
              f"backward coverage {timing.backward_coverage:.3f}; step with gradient hooks / "
              f"hook-free {timing.backward_overhead_ratio:.3f}")
        results[method] = max(abs(e) for e in errors)
        # the same first layer when its input needs no grad (a parameter makes the output
        # need one): is the excess tied to the input's AccumulateGrad?
        alt = nn.Sequential(Sleep(30, 300, param=True), nn.ReLU(inplace=True),
                            Sleep(30, 500)).to(DEVICE)
        alt_timing = train_step_times(alt, torch.zeros(1024, device=DEVICE), num_iters=30
                                      if not SMOKE else 4, drop_first=5 if not SMOKE else 1)
        first, last = (float(np.median(alt_timing.samples(p, phase="backward")))
                       for p in ("0", "2"))
        print(f"variant, input without grad: first layer {first:.4f} ms, last layer "
              f"{last:.4f} ms (truths "
              f"{truths['0']:.4f}, {truths['5']:.4f})")
    return {f"backward_max_abs_error_pct_{k}": v for k, v in results.items()}


def resnet50() -> nn.Module:
    try:
        import torchvision

        return torchvision.models.resnet50(weights=None)
    except Exception:
        return _fallback_resnet50()


def _fallback_resnet50() -> nn.Module:
    """ResNet-50's layout (bottleneck blocks 3-4-6-3) when torchvision is missing."""

    class Bottleneck(nn.Module):
        def __init__(self, cin: int, width: int, stride: int) -> None:
            super().__init__()
            cout = width * 4
            self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(cout)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = (nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                             nn.BatchNorm2d(cout))
                               if stride != 1 or cin != cout else None)

        def forward(self, x: Tensor) -> Tensor:
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            return self.relu(self.bn3(self.conv3(out)) + identity)

    layers: list[nn.Module] = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64),
                               nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        stage = []
        for b in range(blocks):
            stage.append(Bottleneck(cin, width, stride if b == 0 else 1))
            cin = width * 4
        layers.append(nn.Sequential(*stage))
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, 1000)]
    return nn.Sequential(*layers)


def gpt2() -> tuple[nn.Module, Any, str]:
    try:
        from transformers import GPT2Config, GPT2LMHeadModel

        config = GPT2Config(n_layer=12 if not SMOKE else 2, n_embd=768 if not SMOKE else 64,
                            n_head=12 if not SMOKE else 4, vocab_size=50257 if not SMOKE
                            else 1000)
        model = GPT2LMHeadModel(config)
        model.config.use_cache = False
        return model, config.vocab_size, "transformers GPT2LMHeadModel"
    except Exception as exc:
        print(f"(transformers unavailable: {type(exc).__name__}; using a GPT-2-shaped stack)")
        width = 768 if not SMOKE else 64
        layer = nn.TransformerEncoderLayer(width, 12 if not SMOKE else 4, 4 * width,
                                           batch_first=True, norm_first=True,
                                           activation="gelu", dropout=0.1)
        body = nn.TransformerEncoder(layer, 12 if not SMOKE else 2, enable_nested_tensor=False)

        class Tiny(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.wte = nn.Embedding(50257 if not SMOKE else 1000, width)
                self.body = body
                self.ln_f = nn.LayerNorm(width)

            def forward(self, input_ids: Tensor) -> Tensor:
                return self.ln_f(self.body(self.wte(input_ids))) @ self.wte.weight.t()

        return Tiny(), 50257 if not SMOKE else 1000, "GPT-2-shaped TransformerEncoder"


def real_model(name: str, model: nn.Module, inputs: Any, batch: int) -> dict[str, float]:
    header(f"{name}: per-module forward profile, latency, training step")
    model = model.to(DEVICE)
    iters = 60 if not SMOKE else 4
    with torch.no_grad():
        timing = time_modules(model, inputs, num_iters=iters, drop_first=10 if not SMOKE else 1,
                              warmup_seconds=1.0 if not SMOKE else 0)
    frame = timing.to_df("module")
    leaves = frame[[info.is_leaf for info in timing.modules] & (frame["calls"] > 0)]
    top = leaves.sort_values("self_time_median_ms", ascending=False).head(5)
    cal = timing.calibration
    print(f"hook calibration on this device: attribution {cal.attribution_ns / 1e3:.2f} us, "
          f"whole-model cost {cal.per_call_ns / 1e3:.2f} us per hooked call")
    print(f"root median {float(np.median(timing.samples(''))):.3f} ms over {timing.iterations} "
          f"iterations; coverage {timing.coverage:.4f}; leaf coverage "
          f"{timing.leaf_coverage:.3f}; hooked / hook-free {timing.overhead_ratio:.4f}; "
          f"uncalled modules {len(timing.uncalled)}; warnings {len(timing.warnings)}")
    for _, row in top.iterrows():
        print(f"  {row['module']:<42}{row['type']:<22}{row['self_time_median_ms']:>9.4f} ms "
              f"x{row['calls']:g}{' low-confidence' if row['low_confidence'] else ''}")
    latency = benchmark(model, inputs, warmup_seconds=1.0 if not SMOKE else 0,
                        max_seconds=10 if not SMOKE else 1, target_ci=0.005)
    print(f"latency (no hooks): median {latency.latency_ms:.3f} ms, CI "
          f"[{latency.latency_ci_low_ms:.3f}, {latency.latency_ci_high_ms:.3f}], "
          f"iterations={latency.iterations} in "
          f"{latency.elapsed_s:.2f} s, stop {latency.stop_reason}, throughput "
          f"{batch * latency.iterations_per_second:.1f} items/s")
    train = train_step_times(model, inputs, num_iters=20 if not SMOKE else 4,
                             drop_first=5 if not SMOKE else 1)
    print(f"training step: forward {train.phase('forward').median:.3f} ms, backward "
          f"{train.phase('backward').median:.3f} ms (hook-free); backward coverage "
          f"{train.backward_coverage:.3f} ({train.method}); forward-hook step ratio "
          f"{train.overhead_ratio:.3f}, gradient-hook step ratio "
          f"{train.backward_overhead_ratio:.3f}")
    own = train.to_df("module").iloc[1:].dropna(subset=["self_backward_time_median_ms"])
    for _, row in own.sort_values("self_backward_time_median_ms", ascending=False).head(
            3).iterrows():
        print(f"  backward self {row['module']:<40}"
              f"{row['self_backward_time_median_ms']:>9.4f} ms")
    return {"coverage": timing.coverage, "overhead": timing.overhead_ratio,
            "backward_coverage": train.backward_coverage}


def resnet_batches() -> None:
    header("ResNet-50 hook overhead vs batch size (launch-bound vs GPU-bound)")
    model = resnet50().to(DEVICE)
    for batch in (32, 128) if not SMOKE else (2,):
        side = 224 if not SMOKE else 32
        with torch.no_grad():
            timing = time_modules(model, torch.randn(batch, 3, side, side, device=DEVICE),
                                  num_iters=30 if not SMOKE else 3, drop_first=5 if not SMOKE
                                  else 1, warmup_seconds=0.5 if not SMOKE else 0)
        print(f"batch {batch}: hook-free {timing.hook_free.median:.3f} ms, hooked "
              f"{timing.whole.median:.3f} ms, ratio {timing.overhead_ratio:.4f}, coverage "
              f"{timing.coverage:.4f}")
        floors = hook_floors(model, torch.randn(batch, 3, side, side, device=DEVICE))
        print(f"batch {batch} floors (median of {floors.pop('rounds'):.0f} interleaved rounds, "
              "x the bare forward): " + ", ".join(f"{k} {v:.4f}" for k, v in floors.items()))


def hook_floors(model: nn.Module, x: Tensor) -> dict[str, float]:
    """What any per-module GPU clock pays, without moduleprofiler: an empty pre/post hook pair
    on every module (``with_kwargs``, ``always_call``, as the runner installs them); the same
    pair recording one CUDA event each through ``Event.record()``; the same pair recording a
    pooled event through the C base class on a cached stream object (the least a per-module
    event clock can do: one ``cudaEventRecord`` per hook, no Python besides); and no hooks but
    CUPTI kernel tracing (``torch.profiler`` with the CUDA activity only), the clock a
    hook-light design would read instead. Whole forwards timed on the CPU after a
    synchronisation, the variants interleaved round by round."""
    rounds = 30 if not SMOKE else 3
    pool = [torch.cuda.Event(enable_timing=True) for _ in range(4096)] if DEVICE.type == "cuda" \
        else []
    used = [0]

    def empty_pre(module: nn.Module, args: Any, kwargs: Any) -> None:
        return None

    def empty_post(module: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        return None

    def event_pre(module: nn.Module, args: Any, kwargs: Any) -> None:
        if pool:
            pool[used[0] % len(pool)].record()
            used[0] += 1

    def event_post(module: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        event_pre(module, args, kwargs)

    record_on = getattr(getattr(torch._C, "_CudaEventBase", None), "record", None)
    stream = torch.cuda.current_stream() if DEVICE.type == "cuda" else None

    def raw_pre(module: nn.Module, args: Any, kwargs: Any) -> None:
        if pool and record_on is not None:
            record_on(pool[used[0] % len(pool)], stream)
            used[0] += 1

    def raw_post(module: nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        raw_pre(module, args, kwargs)

    def run(pre: Any, post: Any) -> float:
        if pre == "cupti":
            activities = [torch.profiler.ProfilerActivity.CUDA]
            with torch.no_grad(), torch.profiler.profile(activities=activities):
                synchronize_device()
                start = time.perf_counter()
                model(x)
                synchronize_device()
                return time.perf_counter() - start
        handles = [] if pre is None else [
            h for m in model.modules() for h in (
                m.register_forward_pre_hook(pre, with_kwargs=True),
                m.register_forward_hook(post, with_kwargs=True, always_call=True))]
        try:
            with torch.no_grad():
                synchronize_device()
                start = time.perf_counter()
                model(x)
                synchronize_device()
                return time.perf_counter() - start
        finally:
            for handle in handles:
                handle.remove()

    variants = {"bare": (None, None), "empty hooks": (empty_pre, empty_post),
                "hooks + 1 event each": (event_pre, event_post),
                "hooks + 1 pooled C-level event each": (raw_pre, raw_post)}
    if DEVICE.type == "cuda":
        variants["CUPTI kernel trace, no hooks"] = ("cupti", None)
    for _ in range(3):
        for pre, post in variants.values():
            run(pre, post)
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, (pre, post) in variants.items():
            used[0] = 0
            samples[name].append(run(pre, post))
    bare = float(np.median(samples["bare"]))
    out = {name: float(np.median(values)) / bare for name, values in samples.items()
           if name != "bare"}
    out["rounds"] = rounds
    return out


def synchronize_device() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def main() -> int:
    global SMOKE, DEVICE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="CPU, tiny sizes")
    parser.add_argument("--skip-models", action="store_true")
    parser.add_argument("--floors-only", action="store_true",
                        help="only the ResNet-50 overhead and floors by batch size")
    args = parser.parse_args()
    SMOKE = args.smoke
    if not SMOKE and not torch.cuda.is_available():
        print("no CUDA device; use --smoke for a CPU run of the code paths")
        return 1
    DEVICE = torch.device("cuda" if not SMOKE else "cpu")
    started = time.perf_counter()
    print(f"torch {torch.__version__}, device "
          f"{torch.cuda.get_device_name() if DEVICE.type == 'cuda' else 'cpu'}")
    calibrate_sleep()
    if args.floors_only:
        resnet_batches()
        return 0
    summary: dict[str, Any] = {}
    summary["sleeps"] = known_sleeps()
    summary["matmuls"] = matmuls()
    summary["backward"] = backward_sleeps()
    if not args.skip_models:
        batch = 32 if not SMOKE else 2
        side = 224 if not SMOKE else 32
        resnet_batches()
        summary["resnet50"] = real_model("ResNet-50, batch 32", resnet50(),
                                         torch.randn(batch, 3, side, side, device=DEVICE),
                                         batch)
        model, vocab, label = gpt2()
        ids = torch.randint(0, vocab, (8, 256 if not SMOKE else 16), device=DEVICE)
        summary["gpt2"] = real_model(f"GPT-2 small from config ({label}), batch 8 x 256",
                                     model, {"input_ids": ids} if "transformers" in label
                                     else ids, 8)
    header("summary")
    for key, values in summary.items():
        print(f"{key:<10}" + ", ".join(f"{k} {v:.4f}" for k, v in values.items()))
    print(f"total {time.perf_counter() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
