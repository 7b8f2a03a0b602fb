"""How close each module gets to the hardware, on a GPU: the proof of docs/efficiency.md.

    PYTHONPATH=. python benchmarks/gpu_efficiency.py [--smoke]

* a bf16 8192^3 matmul module: our achieved TFLOP/s against a CUDA-event timing of the same
  ``torch.mm`` and against the peak;
* a memory-bound LayerNorm on 1 GiB: achieved bytes/s against a measured device-to-device copy;
* ResNet-50 forward and GPT-2 small / a Llama-shaped training step (bf16): per-module % of peak
  and bound label; MFU of the step beside the ``6N + 12LHQT`` estimate;
* backward time per module: the known-duration ``_sleep`` chain (first layer with a leaf input
  that requires grad, last layer), and each Linear of an MLP 4096-4096-8192-4096 on 4096 rows
  against the same layer's backward timed alone with CUDA events.

Each accuracy check also prints what tells its causes apart: the module clock with and without
the idle-stream prime (``CudaStamps.prime_us``), the kernel timed alone on a busy and on an
idle GPU and back to back, the SM clock and power while each ran (``nvidia-smi``), and for the
MLP's backward the same layer timed alone with the model's own activations and gradients and
the kernels' CUPTI time in situ (hook-free steps, layers named by ``RangeListener``).

``--smoke`` runs tiny sizes on the CPU (checks the script, not the numbers).
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import Tensor, nn
from torch.autograd import DeviceType

import benchmarks.gpu_timing as gt
from moduleprofiler import ModuleProfiler
from moduleprofiler.efficiency import (
    TrafficListener,
    device_peaks,
    measure_peaks,
    transformer_flops_per_token,
    utilization,
    with_efficiency,
)
from moduleprofiler.runner import PassRunner
from moduleprofiler.timing import RangeListener, time_modules, train_step_times
from moduleprofiler.timing.clocks.stamps import CudaStamps

SMOKE = "--smoke" in sys.argv
ONLY = [arg.split("=", 1)[1] for arg in sys.argv if arg.startswith("--only=")]
"""``--only=MLP``: run only the sections whose title contains one of these words."""
DEVICE = torch.device("cuda" if torch.cuda.is_available() and not SMOKE else "cpu")
COLUMNS = ["self_time_median_ms", "achieved_tflops", "compute_fraction", "achieved_gbs",
           "bandwidth_fraction", "bound"]


PRIME_US = CudaStamps.prime_us
"""The default prime; sections set ``CudaStamps.prime_us`` to compare and put it back."""


def section(title: str, body: Callable[[], None]) -> None:
    if ONLY and not any(word in title for word in ONLY):
        return
    print(f"\n=== {title} ===", flush=True)
    began = time.perf_counter()
    try:
        body()
    except Exception:  # one failing section must not hide the others' numbers
        traceback.print_exc(file=sys.stdout)
    finally:
        CudaStamps.prime_us = PRIME_US
    print(f"({time.perf_counter() - began:.1f} s)", flush=True)


@contextlib.contextmanager
def gpu_clock(label: str, quiet: bool = False) -> Iterator[dict[str, float]]:
    """Print (unless ``quiet``) the median SM clock and power ``nvidia-smi`` sampled while the
    block ran; also left in the yielded dict (``mhz``, ``watts``) after the block."""
    tool = shutil.which("nvidia-smi") if DEVICE.type == "cuda" else None
    sampler = subprocess.Popen(
        [tool, "--query-gpu=clocks.sm,power.draw", "--format=csv,noheader,nounits",
         "-lms", "20"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    ) if tool else None
    found: dict[str, float] = {}
    try:
        yield found
    finally:
        if sampler is not None:
            sampler.terminate()
            out, _ = sampler.communicate()
            rows = [line.split(",") for line in out.splitlines() if line.count(",") == 1]
            with contextlib.suppress(ValueError, statistics.StatisticsError):
                found["mhz"] = statistics.median(float(a) for a, _ in rows)
                found["watts"] = statistics.median(float(b) for _, b in rows)
                if not quiet:
                    print(f"    [{label}: SM clock {found['mhz']:.0f} MHz, "
                          f"{found['watts']:.0f} W, {len(rows)} samples]")


def module_ms(model: nn.Module, x: Tensor, prime_us: float, iters: int) -> tuple[Any, float,
                                                                                float]:
    """``time_modules`` of a one-module model with the given prime: the timing, the module's
    median and the interleaved hook-free iteration's median (ms)."""
    CudaStamps.prime_us = prime_us
    with gpu_clock(f"time_modules, prime {prime_us:g} us"):
        timing = time_modules(model, x, num_iters=iters, drop_first=3 if not SMOKE else 1)
    CudaStamps.prime_us = PRIME_US
    unhooked = timing.hook_free
    return (timing, timing.stats("").inclusive.median,
            unhooked.median if unhooked is not None else float("nan"))


def references(fn: Callable[[], Any]) -> dict[str, float]:
    """The same work timed alone: CUDA events behind a spin (busy GPU), on an idle GPU, and
    the mean of 20 back-to-back calls (sustained load)."""
    out = {}
    with torch.no_grad():
        with gpu_clock("alone, busy GPU"):
            out["alone (events, busy GPU)"] = gt.event_ms(fn, reps=20)
        with gpu_clock("alone, idle GPU"):
            out["alone (events, idle GPU)"] = gt.event_ms(fn, reps=20, primed=False)
        with gpu_clock("back to back"):
            out["back to back (mean of 20)"] = gt.block_ms(fn)
    return out


def variants(name: str, model: nn.Module, x: Tensor, fn: Callable[[], Any],
             iters: int) -> tuple[Any, dict[str, float]]:
    """Our module clock with the default prime and without, beside the references; the
    default's timing is returned for the proof."""
    timing, ours, plain = module_ms(model, x, PRIME_US, iters)
    _, unprimed, plain0 = module_ms(model, x, 0.0, iters)
    rows = {f"ours, prime {PRIME_US:g} us (default)": ours, "ours, no prime": unprimed,
            "hook-free iterations, prime (interleaved)": plain,
            "hook-free iterations, no prime": plain0, **references(fn)}
    print(f"{name}: ms per call")
    for label, ms in rows.items():
        print(f"    {label:<46} {ms:8.4f}  ({ms / rows['alone (events, busy GPU)'] - 1:+.2%} "
              "vs alone on a busy GPU)")
    return timing, rows


def profiled(model: nn.Module, inputs: Any, timing: Any, peaks: Any, dtype: Any = None,
             **options: Any) -> Any:
    profile = ModuleProfiler().profile(model, inputs, listeners=[TrafficListener()], **options)
    return profile, with_efficiency(profile.with_timing(timing), peaks, dtype=dtype)


def peaks_section() -> None:
    global PEAKS, MEASURED
    MEASURED = measure_peaks(DEVICE, dtypes=("bf16", "fp32") if DEVICE.type == "cuda"
                             else ("fp32",), matmul_size=8192 if not SMOKE else 128,
                             copy_bytes=2**30 if not SMOKE else 2**20)
    try:
        PEAKS = device_peaks(DEVICE) if DEVICE.type == "cuda" else MEASURED
    except ValueError:
        PEAKS = MEASURED
    print(f"table: {PEAKS.name} ({PEAKS.source}): bf16 {PEAKS.dense_tflops.get('bf16')} "
          f"TFLOP/s, fp32 {PEAKS.dense_tflops.get('fp32')}, {PEAKS.bandwidth_gbs} GB/s")
    print(f"measured: bf16 {MEASURED.dense_tflops.get('bf16')}, fp32 "
          f"{MEASURED.dense_tflops.get('fp32')} TFLOP/s, copy {MEASURED.bandwidth_gbs:.0f} GB/s, "
          f"launch {MEASURED.launch_us:.2f} us")


class MatMul(nn.Module):
    def __init__(self, n: int, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, n, dtype=dtype) / n**0.5)

    def forward(self, x: Tensor) -> Tensor:
        return torch.mm(x, self.weight)


def matmul_section() -> None:
    n = 8192 if not SMOKE else 128
    dtype = torch.bfloat16 if DEVICE.type == "cuda" else torch.float32
    model = MatMul(n, dtype).to(DEVICE)
    x = torch.randn(n, n, device=DEVICE, dtype=dtype)
    timing, rows = variants("torch.mm 8192^3 bf16", model, x,
                            lambda: torch.mm(x, model.weight), 20 if not SMOKE else 3)
    _, eff = profiled(model, x, timing, PEAKS)
    ours = eff.records[0].metrics
    for label in ("alone (events, busy GPU)", "hook-free iterations, prime (interleaved)"):
        reference = 2 * n**3 / (rows[label] / 1e3) / 1e12
        print(f"ours {ours['achieved_tflops']:.1f} TFLOP/s ({ours['compute_fraction']:.1%} of "
              f"peak, {ours['bound']}); {label}: {reference:.1f} TFLOP/s; difference "
              f"{ours['achieved_tflops'] / reference - 1:+.2%}; above peak: {ours['above_peak']}")


class Scale(nn.Module):
    """An elementwise module: reads and writes its input's bytes once, like a copy."""

    def forward(self, x: Tensor) -> Tensor:
        return x * 2.0


def layernorm_section() -> None:
    rows, width = (65536, 4096) if not SMOKE else (256, 256)
    x = torch.randn(rows, width, device=DEVICE)
    for name, model in (("LayerNorm", nn.LayerNorm(width).to(DEVICE)), ("x * 2", Scale())):
        timing, found = variants(f"{name} on {x.numel() * 4 / 2**30:.2f} GiB", model, x,
                                 lambda m=model: m(x), 15 if not SMOKE else 3)
        _, eff = profiled(model, x, timing, PEAKS)
        ours = eff.records[0].metrics
        alone = ours["moved_bytes"] / (found["alone (events, busy GPU)"] / 1e3) / 1e9
        print(f"{name}: moved {ours['moved_bytes'] / 2**30:.3f} GiB, ours "
              f"{ours['achieved_gbs']:.0f} GB/s ({ours['bandwidth_fraction']:.1%} of the "
              f"table's bandwidth, {ours['bound']}); measured copy {MEASURED.bandwidth_gbs:.0f} "
              f"GB/s: {ours['achieved_gbs'] / MEASURED.bandwidth_gbs - 1:+.2%}; the kernel "
              f"alone {alone:.0f} GB/s: {ours['achieved_gbs'] / alone - 1:+.2%}")


def top(eff: Any, columns: list[str], k: int = 12) -> None:
    frame = eff.to_df("module")
    frame = frame[frame["calls"] > 0].sort_values(columns[0], ascending=False).head(k)
    shown = frame[["module", "type", *columns]].copy()
    print(shown.to_string(index=False, float_format=lambda v: f"{v:.4g}"))


def resnet_section() -> None:
    import torchvision

    model = torchvision.models.resnet50().to(DEVICE, torch.bfloat16).eval()
    x = torch.randn(64 if not SMOKE else 2, 3, 224, 224, device=DEVICE, dtype=torch.bfloat16)
    timing = time_modules(model, x, num_iters=15 if not SMOKE else 2, drop_first=3
                          if not SMOKE else 1)
    profile, eff = profiled(model, x, timing, PEAKS)
    top(eff, COLUMNS)
    bounds = eff.to_df("module")["bound"].value_counts().to_dict()
    forward_ms = timing.stats("").inclusive.median
    found = utilization(profile, forward_ms, PEAKS, "bf16")
    print(f"labels: {bounds}; forward {forward_ms:.3f} ms, MFU {found.mfu:.1%}")


def lm_section(name: str, make: Callable[[], tuple[nn.Module, Any, Any]]) -> None:
    model, config, estimate_params = make()
    batch, seq = (8, 1024) if not SMOKE else (1, 16)
    ids = torch.randint(0, config.vocab_size, (batch, seq), device=DEVICE)
    inputs = {"input_ids": ids, "labels": ids}
    timing = train_step_times(model, inputs, num_iters=12 if not SMOKE else 3,
                              drop_first=2 if not SMOKE else 1)
    profile = ModuleProfiler().profile(model, inputs, eval=False, backward=True,
                                       listeners=[TrafficListener()])
    eff = with_efficiency(profile.with_timing(timing), PEAKS, dtype="bf16")
    top(eff, ["self_backward_time_median_ms", "backward_compute_fraction",
              "backward_bandwidth_fraction", "backward_bound", *COLUMNS[:3], "bound"])
    step = timing.phase("step")
    step_ms = step.median if step is not None else float("nan")
    found = utilization(profile, step_ms, PEAKS, "bf16")
    heads = config.num_attention_heads
    estimate = transformer_flops_per_token(estimate_params, config.num_hidden_layers, heads,
                                           config.hidden_size // heads, seq) * batch * seq
    print(f"{name}: step {step_ms:.2f} ms, model FLOPs {found.model_flops:.4g} (ours) vs "
          f"6N+12LHQT {estimate:.4g} ({found.model_flops / estimate - 1:+.2%}); MFU "
          f"{found.mfu:.1%}, HFU {found.hfu:.1%}; complete {found.complete}")


def gpt2() -> tuple[nn.Module, Any, int]:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config() if not SMOKE else GPT2Config(n_layer=2, n_embd=64, n_head=4)
    model = GPT2LMHeadModel(config).to(DEVICE, torch.bfloat16)
    # nanoGPT's N: every parameter but the position embeddings (the tied token embedding
    # does the lm_head's matmul)
    n = sum(p.numel() for p in model.parameters()) - model.transformer.wpe.weight.numel()
    return model, config, n


def llama() -> tuple[nn.Module, Any, int]:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=2048, intermediate_size=5632, num_hidden_layers=8,
                         num_attention_heads=16, num_key_value_heads=16, vocab_size=32000,
                         max_position_embeddings=2048) if not SMOKE else LlamaConfig(
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=4, vocab_size=128)
    model = LlamaForCausalLM(config).to(DEVICE, torch.bfloat16)
    # N: every parameter but the input embedding (a lookup, no matmul)
    n = sum(p.numel() for p in model.parameters()) - model.model.embed_tokens.weight.numel()
    return model, config, n


def backward_chain_section() -> None:
    gt.DEVICE = DEVICE
    gt.calibrate_sleep()
    us = (300, 100, 200, 400, 500)
    model = nn.Sequential(*[gt.Sleep(30, b) for b in us]).to(DEVICE)
    x = torch.zeros(1024, device=DEVICE, requires_grad=True)  # a leaf input
    scale = gt.event_ms(lambda: gt._busy(100)) / 0.1 if DEVICE.type == "cuda" else 1.0
    timing = train_step_times(model, x, num_iters=30 if not SMOKE else 3,
                              drop_first=5 if not SMOKE else 1)
    errors = gt.error_table([(str(i), timing.stats(str(i)).backward.inclusive.median,
                              b / 1000 * scale) for i, b in enumerate(us)])
    print(f"max |error| (modules >= 50 us): {max(abs(e) for e in errors):.2f}%; first layer "
          f"{errors[0]:+.2f}%, last {errors[-1]:+.2f}%")


def in_situ_backward_ms(model: nn.Module, x: Tensor, steps: int) -> dict[str, float]:
    """CUPTI kernel time of each layer's backward inside hook-free training steps (layers
    named by ``RangeListener`` alone: no clock), per step, in ms."""
    if DEVICE.type != "cuda":
        return {}
    runner = PassRunner(model, [RangeListener(nvtx=False)])
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with runner.installed():
        for _ in range(3):
            runner.run(lambda: model(x)).sum().backward()
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=activities) as prof:
            for _ in range(steps):
                runner.run(lambda: model(x)).sum().backward()
            torch.cuda.synchronize()
    totals: dict[str, float] = {}
    for event in prof.events():
        # the CPU ranges only: the trace repeats each range on the GPU's row (a user
        # annotation spanning the same kernels), which would count them twice
        if event.name.endswith(" (backward)") and event.device_type == DeviceType.CPU:
            key = event.name.removesuffix(" (backward)")
            totals[key] = totals.get(key, 0.0) + event.device_time_total / 1e3 / steps
    return totals


def model_data(layers: list[nn.Linear], x: Tensor) -> list[tuple[Tensor, Tensor, Tensor]]:
    """Per layer: its input and output in the model (a leaf cut from the graph) and the
    gradient its output receives from ``sum()`` through the later layers."""
    found = []
    h = x
    for i, layer in enumerate(layers):
        inp = h.detach().requires_grad_(i > 0)
        out = layer(inp)
        found.append([inp, out])
        h = out
    grad: Tensor = torch.ones((), device=DEVICE, dtype=x.dtype).expand_as(h)  # sum's backward
    grads: list[Tensor] = []
    for inp, out in reversed(found):
        grads.append(grad)
        if inp.requires_grad:
            (grad,) = torch.autograd.grad(out, [inp], grad, retain_graph=True)
    return [(inp, out, g) for (inp, out), g in zip(found, reversed(grads))]


def mlp_section(dtype: torch.dtype) -> None:
    sizes = (4096, 4096, 8192, 4096) if not SMOKE else (64, 64, 128, 64)
    rows = 4096 if not SMOKE else 64
    layers = [nn.Linear(a, b) for a, b in itertools.pairwise(sizes)]
    model = nn.Sequential(*layers).to(DEVICE, dtype)
    x = torch.randn(rows, sizes[0], device=DEVICE, dtype=dtype)
    iters = 20 if not SMOKE else 3
    measured = {}
    for prime in (PRIME_US, 0.0):
        CudaStamps.prime_us = prime
        with gpu_clock(f"train_step_times, prime {prime:g} us"):
            timing = train_step_times(model, x, num_iters=iters,
                                      drop_first=4 if not SMOKE else 1)
        measured[prime] = [timing.stats(str(i)).backward.inclusive.median
                           for i in range(len(layers))]
    CudaStamps.prime_us = PRIME_US
    with gpu_clock("in situ, CUPTI"):
        in_situ = in_situ_backward_ms(model, x, 5)
    data = model_data(layers, x)
    table = []
    for i, layer in enumerate(layers):
        inp = torch.randn(rows, layer.in_features, device=DEVICE, dtype=dtype,
                          requires_grad=i > 0)  # the first layer's input needs no grad
        out = layer(inp)
        ones = torch.ones_like(out)
        targets = [t for t in (inp, layer.weight, layer.bias) if t.requires_grad]
        alone = gt.event_ms(lambda: torch.autograd.grad(out, targets, ones,  # noqa: B023
                                                        retain_graph=True), reps=15)
        # the same backward alone, sustained: back-to-back repetitions keep the GPU at the
        # power and clock it runs at inside a training step (one rep per sync does not)
        sustained = gt.block_ms(lambda: torch.autograd.grad(out, targets, ones,  # noqa: B023
                                                            retain_graph=True))
        m_inp, m_out, m_grad = data[i]
        m_targets = [t for t in (m_inp, layer.weight, layer.bias) if t.requires_grad]
        own = gt.event_ms(lambda: torch.autograd.grad(m_out, m_targets, m_grad,  # noqa: B023
                                                      retain_graph=True), reps=15)
        table.append((i, alone, sustained, own, in_situ.get(str(i), float("nan"))))
    print(f"{'layer':<22}{'ours':>9}{'no prime':>10}{'alone 1s':>10}{'err':>8}"
          f"{'sustained':>10}{'err':>8}{'alone own':>10}{'err':>8}{'in situ':>9}{'err':>8}")
    for (i, alone, sustained, own, situ), ours, unprimed in zip(table, measured[PRIME_US],
                                                                measured[0.0]):
        print(f"{f'{i} Linear {dtype}':<22}{ours:9.4f}{unprimed:10.4f}{alone:10.4f}"
              f"{ours / alone - 1:+8.2%}{sustained:10.4f}{ours / sustained - 1:+8.2%}"
              f"{own:10.4f}{ours / own - 1:+8.2%}{situ:9.4f}{ours / situ - 1:+8.2%}")
    print("alone 1s: the layer alone, gradient of ones, random input, one repetition per "
          "synchronisation; sustained: the same, 20 back-to-back repetitions per timing; "
          "alone own: alone with the model's own input and gradient (sum()'s stride-0 "
          "gradient for the last); in situ: CUPTI kernel time inside hook-free steps")


def alone_kernel_ms(layer: nn.Linear, inp: Tensor, grad: Tensor, reps: int = 5) -> float:
    """CUPTI kernel time of the layer's backward alone (mean over ``reps``; the graphs are
    built before tracing starts), gaps between kernels excluded: tells a slower kernel (clock,
    data) from time between kernels in an event interval."""
    if DEVICE.type != "cuda":
        return float("nan")
    targets = [t for t in (inp, layer.weight, layer.bias) if t.requires_grad]
    outs = [layer(inp) for _ in range(reps)]
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for out in outs:
            torch.autograd.grad(out, targets, grad)
        torch.cuda.synchronize()
    return sum(event.device_time_total for event in prof.events()
               if event.device_type == DeviceType.CUDA) / 1e3 / reps


def alone_backward_ms(layer: nn.Linear, inp: Tensor, grad: Tensor, reps: int = 9,
                      spin_us: float = 2000, into_grad: bool = True) -> float:
    """The layer's backward alone, as in a training step: a fresh graph per repetition (built
    outside the timed interval and freed after it, so no graph outlives the repetition),
    CUDA events around the backward behind a ``spin_us`` spin that outlasts the CPU's way
    into the backward; median ms (CPU: wall). ``into_grad``: a backward into ``.grad`` (set
    to ``None`` first, as ``zero_grad()`` does), so the gradient accumulation runs as in the
    step (a weight gradient that arrives transposed is copied into the parameter's layout);
    else ``autograd.grad``, which accumulates nothing."""
    targets = [t for t in (inp, layer.weight, layer.bias) if t.requires_grad]
    samples = []

    def backward(out: Tensor) -> None:
        if into_grad:
            torch.autograd.backward(out, grad, inputs=targets)
        else:
            torch.autograd.grad(out, targets, grad)

    for rep in range(reps + 2):
        out = layer(inp)
        for target in targets:
            target.grad = None
        if DEVICE.type == "cuda":
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(int(spin_us * gt.CYCLES_PER_US))
            start.record()
            backward(out)
            end.record()
            torch.cuda.synchronize()
            ms = start.elapsed_time(end)
        else:
            began = time.perf_counter()
            backward(out)
            ms = (time.perf_counter() - began) * 1e3
        if rep >= 2:  # two warm-up repetitions
            samples.append(ms)
        del out
    for target in targets:
        target.grad = None
    return statistics.median(samples)


def mlp_interleaved_section(dtype: torch.dtype, rounds: int = 6) -> None:
    """Each Linear's backward against the same layer's backward alone (the model's own input
    and output gradient, CUDA events), measured in alternating rounds so both see the same
    clock and power state: a short ``train_step_times``, then every layer alone. No graph is
    kept between steps (a kept graph keeps the parameters' ``AccumulateGrad`` nodes alive,
    which no training loop does). Prints per layer the median over rounds of ours / alone,
    its spread, and the alone kernels' CUPTI time."""
    sizes = (4096, 4096, 8192, 4096) if not SMOKE else (64, 64, 128, 64)
    rows = 4096 if not SMOKE else 64
    layers = [nn.Linear(a, b) for a, b in itertools.pairwise(sizes)]
    model = nn.Sequential(*layers).to(DEVICE, dtype)
    x = torch.randn(rows, sizes[0], device=DEVICE, dtype=dtype)
    # each layer's input (a leaf that requires grad after the first) and output gradient in
    # the model, as plain tensors: the graphs that computed them are gone
    # (the last layer's is ``sum()``'s stride-0 gradient, as in the model)
    data = [(inp.detach().requires_grad_(inp.requires_grad), grad.detach())
            for inp, _, grad in model_data(layers, x)]
    ours: list[list[float]] = [[] for _ in layers]
    alone: list[list[float]] = [[] for _ in layers]
    no_accumulation: list[list[float]] = [[] for _ in layers]
    clocks: dict[str, list[float]] = {"ours": [], "alone": []}
    for _ in range(rounds if not SMOKE else 2):
        with gpu_clock("ours", quiet=True) as clock:
            timing = train_step_times(model, x, num_iters=20 if not SMOKE else 2,
                                      drop_first=4 if not SMOKE else 1, progress=False)
        clocks["ours"].append(clock.get("mhz", float("nan")))
        with gpu_clock("alone", quiet=True) as clock:
            for i, (layer, (inp, grad)) in enumerate(zip(layers, data)):
                ours[i].append(timing.stats(str(i)).backward.inclusive.median)
                alone[i].append(alone_backward_ms(layer, inp, grad))
                no_accumulation[i].append(alone_backward_ms(layer, inp, grad, into_grad=False))
        clocks["alone"].append(clock.get("mhz", float("nan")))
    print("    median SM clock per round, ours / alone (MHz): " + ", ".join(
        f"{a:.0f}/{b:.0f}" for a, b in zip(clocks["ours"], clocks["alone"])))
    in_situ = in_situ_backward_ms(model, x, 5)
    print(f"{'layer':<22}{'ours':>9}{'alone':>9}{'ratio-1 median':>16}{'min':>8}{'max':>8}"
          f"{'autograd.grad':>15}{'alone kernels':>15}{'in situ kernels':>17}")
    for i, (layer, (inp, grad)) in enumerate(zip(layers, data)):
        ratios = [a / b - 1 for a, b in zip(ours[i], alone[i])]
        kernels = alone_kernel_ms(layer, inp, grad)
        print(f"{f'{i} Linear {dtype}':<22}{statistics.median(ours[i]):9.4f}"
              f"{statistics.median(alone[i]):9.4f}{statistics.median(ratios):+16.2%}"
              f"{min(ratios):+8.2%}{max(ratios):+8.2%}"
              f"{statistics.median(no_accumulation[i]):15.4f}{kernels:15.4f}"
              f"{in_situ.get(str(i), float('nan')):17.4f}")
        print("    per round, ours / alone ms: " + ", ".join(
            f"{a:.4f}/{b:.4f}" for a, b in zip(ours[i], alone[i])))
    print("ours: median backward of the layer over a round's steps; alone: the layer's "
          "backward into .grad with the model's own input and output gradient, a fresh graph "
          "per repetition, CUDA events behind a 2 ms spin, median of 9; ratio: per round, then "
          "the median over rounds; autograd.grad: the same without the gradient accumulation; "
          "alone kernels: CUPTI kernel time of the autograd.grad backward; in situ kernels: "
          "CUPTI kernel time of the nodes the layer created, inside hook-free steps (the "
          "accumulation into .grad not included)")


def main() -> None:
    print(f"torch {torch.__version__}, device "
          f"{torch.cuda.get_device_name(DEVICE) if DEVICE.type == 'cuda' else 'cpu'}")
    gt.DEVICE = DEVICE
    gt.calibrate_sleep()  # the spin before "alone" timings lasts the intended 300 us
    print(f"module clock prime (CudaStamps.prime_us): {PRIME_US:g} us")
    section("device peaks", peaks_section)
    section("bf16 matmul 8192^3", matmul_section)
    section("memory-bound LayerNorm", layernorm_section)
    section("ResNet-50 forward (bf16, batch 64)", resnet_section)
    section("GPT-2 small training step (bf16, 8 x 1024)", lambda: lm_section("GPT-2", gpt2))
    section("Llama-shaped training step (bf16, 8 x 1024)", lambda: lm_section("Llama", llama))
    section("backward of known-duration modules", backward_chain_section)
    section("MLP backward per Linear vs alone (fp32)", lambda: mlp_section(torch.float32))
    section("MLP backward per Linear vs alone (bf16)", lambda: mlp_section(torch.bfloat16))
    section("MLP backward per Linear vs alone, interleaved rounds (bf16)",
            lambda: mlp_interleaved_section(torch.bfloat16))
    section("MLP backward per Linear vs alone, interleaved rounds (fp32)",
            lambda: mlp_interleaved_section(torch.float32))


PEAKS: Any = None
MEASURED: Any = None

if __name__ == "__main__":
    main()
