"""``calibrate()``: micro-benchmarks that measure how fast this GPU, and the CPU driving it, run
each class of operator; the prediction model (:mod:`.device_model`, :mod:`.host_model`) reads
the result.

Device times are the device's own kernel records (the summed duration of the kernels one
operator launched, from the PyTorch profiler's CUPTI backend, booked by correlation id to a
labelled range around the operator), never host clocks: a small kernel's launch costs the host
more than the kernel costs the device. Each shape is run once before the recorded session (so
cuBLAS and cuDNN have made their choices) and then ``repeats`` times inside it; the median of
the repeats is kept.

Host times are wall-clock times of tight loops of the same operators on tiny CUDA tensors,
where the host cannot keep ahead of nothing: the median over rounds of the time per call.
They are measured first, before the device's profiler sessions: after one, CUPTI stays
attached to the process and every launch costs the host more than in the user's unprofiled
run (:func:`~moduleprofiler.timing.device_trace.sessions_entered`).
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import platform
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from moduleprofiler.devices import (
    cuda_available,
    default_device,
    device_context,
    empty_cache,
    properties,
    synchronize,
    tf32_math,
    usable_device,
)
from moduleprofiler.efficiency.device_names import matching_devices
from moduleprofiler.efficiency.peaks import device_peaks
from moduleprofiler.prediction.calibrate_backward import add_gemms, backward_tables
from moduleprofiler.prediction.calibrate_kernels import (
    AttentionShape,
    Bench,
    add_memory,
    add_passes,
    attention_bench,
    bmm_bench,
    conv_bench,
    memory_rows,
    pass_rows,
    within_cap,
)
from moduleprofiler.prediction.calibration import Calibration, HostCosts
from moduleprofiler.prediction.device_model import IEEE
from moduleprofiler.prediction.host_calls import depth_cost, leaf_call_us
from moduleprofiler.prediction.host_in_model import with_in_model_factor
from moduleprofiler.prediction.host_loops import interleaved_call_us
from moduleprofiler.prediction.in_chain import booked, measure_in_chain
from moduleprofiler.prediction.residuals import held_out_residuals
from moduleprofiler.timing.device_trace import (
    after_sessions_notes,
    close_range,
    device_trace,
    open_range,
)

_TORCH_DTYPE = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

GEMM_M: tuple[int, ...] = tuple(2 ** i for i in range(17))
GEMM_NK: tuple[int, ...] = (64, 128, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144,
                            8192, 12288, 16384)
UNALIGNED_N: tuple[int, ...] = (1000, 30522, 32001, 50257)
GEMM_FLOP_CAP = 2 * 2 ** 37
"""GEMMs above this many FLOPs are left out: at that size the achieved rate is flat, and the
model extends the largest measured shapes proportionally."""
LINEAR_NK: tuple[int, ...] = (256, 512, 1024, 2048, 3072, 4096, 8192)
VOCABULARY_N: tuple[int, ...] = (1000, 30522, 32000, 32001, 50257, 128256)
"""Output widths of classifier and language-model heads: a vocabulary is rarely a multiple of
the tensor-core tile, and the last wave of tiles runs part-empty."""
VOCABULARY_FLOP_CAP = 2 * 2 ** 40
"""A head's GEMM runs far below the peak (misaligned rows, a part-empty last wave), so its
rate is measured up to a batch of 64 sequences of 128 tokens."""


class _Sweep:
    """Labelled benchmarks run in one profiler session; device time per label.

    A benchmark is added as a factory: its tensors are made when it runs and freed after, so
    a sweep holds one shape's tensors at a time."""

    def __init__(self, device: torch.device, repeats: int) -> None:
        self.device = device
        self.repeats = repeats
        self._runs: list[tuple[str, Callable[[], Bench]]] = []

    def add(self, label: str, make: Callable[[], Bench]) -> None:
        self._runs.append((label, make))

    def run(self) -> dict[str, float]:
        """Median device microseconds per label."""
        with device_trace(self.device) as records:
            for label, make in self._runs:
                bench = make()
                bench()  # warm-up, outside every range: algorithm choices, lazy init
                for repeat in range(self.repeats):
                    scope = open_range(f"{label}#{repeat}")
                    bench()
                    close_range(scope)
                del bench
        times = booked(records)
        result = {label: statistics.median(times[f"{label}#{repeat}"]
                                           for repeat in range(self.repeats))
                  for label, _ in self._runs}
        self._runs.clear()
        return result


def _gemms(sweep: _Sweep, dtype: torch.dtype, quick: bool) -> list[tuple[int, int, int]]:
    ms = GEMM_M[::2] if quick else GEMM_M
    nks = GEMM_NK[::3] if quick else GEMM_NK
    shapes = [(m, n, k) for m in ms for n in nks for k in nks if 2 * m * n * k <= GEMM_FLOP_CAP]
    # vocabulary-sized and other odd widths: no tensor-core tile fits them evenly
    shapes += [(m, n, k) for m in ms[::2] for n in UNALIGNED_N for k in (768, 1024, 4096)
               if 2 * m * n * k <= GEMM_FLOP_CAP]
    add_gemms(sweep, shapes, sweep.device, dtype, {"gemm": "nn"})
    return shapes


def linear_shapes(quick: bool) -> list[tuple[int, int, int]]:
    """The ``(m, n, k)`` of the tables of :data:`LINEAR_TABLES`: ``x @ w.T`` with ``w`` of
    ``n x k``, the layout of ``nn.Linear`` (cuBLAS runs other kernels than for ``a @ b``, up
    to a third faster in TF32, and others again with a bias), with language-model heads'
    vocabulary widths up to larger batches."""
    ms = GEMM_M[::4] if quick else GEMM_M
    nks = LINEAR_NK[::3] if quick else LINEAR_NK
    shapes = [(m, n, k) for m in ms for n in nks for k in nks if 2 * m * n * k <= GEMM_FLOP_CAP]
    shapes += [(m, n, k) for m in ms[::2] for n in VOCABULARY_N for k in (768, 1024, 4096)
               if 2 * m * n * k <= VOCABULARY_FLOP_CAP]
    return shapes


COLD_POOL_BYTES = 256 * 2 ** 20
"""Weights of the linear tables are taken in turn from a pool this large (five times an
H100's or H200's L2 cache), so each call reads its weight from memory, as a layer of a model
does: a model's weights are read once per pass, never from a warm cache."""


class _ColdPool:
    """Consecutive regions of one large tensor, wrapping round: a region comes back only
    after the whole pool has been read, long gone from the cache."""

    def __init__(self, device: torch.device, dtype: torch.dtype) -> None:
        size = torch.tensor([], dtype=dtype).element_size()
        self.data = torch.randn(COLD_POOL_BYTES // size, device=device, dtype=dtype)
        self.next = 0

    def take(self, rows: int, columns: int) -> torch.Tensor:
        """A ``rows x columns`` matrix not read recently (a fresh one if it is too large
        for two in the pool: larger than the cache, it is read from memory anyway)."""
        numel = rows * columns
        if 2 * numel > self.data.numel():
            return torch.randn(rows, columns, device=self.data.device, dtype=self.data.dtype)
        if self.next + numel > self.data.numel():
            self.next = 0
        start, self.next = self.next, self.next + numel
        return self.data[start:start + numel].view(rows, columns)


LINEAR_TABLES: dict[str, tuple[bool, bool]] = {
    "gemm_nt": (True, False), "gemm_bias_nt": (True, True), "gemm_bias": (False, True)}
"""The tables of layers' matrix products, with their weights read from memory: by name,
whether the weight is transposed (``nn.Linear``'s ``x @ w.T``; else ``x @ w``, as GPT-2's
``Conv1D``) and whether a bias is added (``addmm``: cuBLAS adds it in the kernel's
epilogue, another kernel)."""


def _linears(sweep: _Sweep, dtype: torch.dtype, quick: bool,
             name: str = "gemm_nt") -> list[tuple[int, int, int]]:
    shapes = linear_shapes(quick)
    pool = _ColdPool(sweep.device, dtype)
    transposed, bias = LINEAR_TABLES[name]
    for m, n, k in shapes:
        sweep.add(f"{name}:{m}:{n}:{k}", functools.partial(
            _linear_bench, m, n, k, pool, transposed, bias))
    return shapes


def _linear_bench(m: int, n: int, k: int, pool: _ColdPool, transposed: bool,
                  bias: bool) -> Bench:
    """``x @ w.T`` (``transposed``; else ``x @ w``), with ``bias`` plus a bias, on ``m`` rows,
    each call on a weight from ``pool`` (its input is fresh, as a layer's input was just
    written)."""
    x = torch.randn(m, k, device=pool.data.device, dtype=pool.data.dtype)
    b = torch.randn(n, device=pool.data.device, dtype=pool.data.dtype) if bias else None
    rows, columns = (n, k) if transposed else (k, n)
    large = 2 * n * k > pool.data.numel()
    fixed = pool.take(rows, columns) if large else None

    def weight() -> torch.Tensor:
        w = fixed if fixed is not None else pool.take(rows, columns)
        return w.t() if transposed else w
    if b is None:
        return lambda: torch.mm(x, weight())
    return lambda: torch.addmm(b, x, weight())


def _bmms(sweep: _Sweep, dtype: torch.dtype, quick: bool) -> list[tuple[int, int, int, int]]:
    sides = (64, 256, 1024) if quick else (64, 128, 256, 512, 1024, 2048)
    batches = (4, 64) if quick else (1, 4, 16, 64, 256)
    shapes = [(b, m, n, k) for b in batches for m in sides for n in sides for k in sides
              if 2 * b * m * n * k <= GEMM_FLOP_CAP]
    for b, m, n, k in shapes:  # (b x m x k) @ (b x k x n): bmm_bench's "context" product
        sweep.add(f"bmm:{b}:{m}:{n}:{k}", functools.partial(
            bmm_bench, "context", (b, m, n, k), sweep.device, dtype))
    return shapes


ConvShape = tuple[int, int, int, int, int, int, int]
"""(batch, in channels, out channels, height = width, kernel, stride, groups)."""


def conv_shapes(quick: bool) -> list[ConvShape]:
    """The convolutions :func:`calibrate` measures: pointwise, dense 3x3, depthwise 3x3 to 7x7,
    stems and patchifying convolutions, over batch sizes, channels and resolutions."""
    batches = (1, 64) if quick else (1, 8, 64)
    sides = (14, 56) if quick else (7, 14, 28, 56, 112)
    channels = (32, 256) if quick else (16, 32, 64, 128, 256, 512, 1024, 2048)
    shapes: list[ConvShape] = []
    for n in batches:
        for h in sides:
            for c in channels:
                for out in {c // 4, c, 4 * c}:
                    if 16 <= out <= 2048:
                        shapes.append((n, c, out, h, 1, 1, 1))
                if c <= 512:
                    for stride in (1, 2):
                        shapes.append((n, c, c, h, 3, stride, 1))
                if c <= 1152:
                    for kernel in (3, 5, 7):
                        for stride in (1, 2):
                            shapes.append((n, c, c, h, kernel, stride, c))
        for stem in ((3, 64, 224, 7, 2), (3, 32, 224, 3, 2), (3, 16, 224, 3, 2),
                     (3, 768, 224, 16, 16), (3, 96, 224, 4, 4), (3, 128, 224, 4, 4)):
            cin, cout, h, kernel, stride = stem
            shapes.append((n, cin, cout, h, kernel, stride, 1))
    return within_cap(shapes)


def _conv_bench(shape: ConvShape, device: torch.device, dtype: torch.dtype,
                backward: bool) -> Bench:
    """One convolution's forward, or its backward (input and weight gradients), its input
    contiguous (:func:`~.calibrate_kernels.conv_bench`)."""
    return conv_bench((*shape, 0), device, dtype, backward)


def attention_shapes(quick: bool) -> list[AttentionShape]:
    """The attention shapes :func:`calibrate` measures."""
    batches = (1, 64) if quick else (1, 8, 64)
    seqs = (128, 1024) if quick else (64, 128, 256, 512, 1024, 2048)
    return [(b, h, s, d, c) for b in batches for h in (12,) for s in seqs for d in (64, 128)
            for c in (0, 1) if b * s <= 64 * 1024]


MEMORY_KINDS: tuple[str, ...] = ("unary", "binary", "reduction", "softmax", "layer_norm",
                                 "batch_norm_2d", "copy", "transpose_copy", "gather", "cat",
                                 "broadcast", "strided", "permute_copy", "convert",
                                 "strided_cat", "strided_inner_cat")
"""The memory-bound operator kinds :func:`calibrate` measures, each over sizes: elementwise
kernels on contiguous operands (``unary``, ``binary``: vectorised loads), on a broadcast
operand (``broadcast``: a norm's weight) and on permuted ones (``strided``: rotary embeddings
on heads transposed from the sequence), which run without vector loads; copies of contiguous,
transposed (``transpose_copy``: the innermost dimension strided), permuted
(``permute_copy``: whole rows of the innermost dimension) tensors and copies that change the
dtype (``convert``); concatenations of contiguous tensors (``cat``) and of permuted ones, along
an outer dimension (``strided_cat``: a key/value cache) or the innermost one
(``strided_inner_cat``: rotary's ``rotate_half``)."""

HEAD_DIM = 64
HEADS = 16


def heads_view(numel: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """About ``numel`` elements as attention heads, ``(batch, heads, sequence, head_dim)``,
    transposed from a ``(batch, sequence, heads, head_dim)`` tensor as attention layers
    make them (whole rows of ``head_dim`` contiguous, the rest permuted)."""
    sequence = min(128, max(1, numel // (HEADS * HEAD_DIM)))
    batch = max(1, numel // (HEADS * HEAD_DIM * sequence))
    return torch.randn(batch, sequence, HEADS, HEAD_DIM, device=device,
                       dtype=dtype).transpose(1, 2)


def _memory_bench(kind: str, numel: int, device: torch.device,
                  dtype: torch.dtype) -> tuple[Bench, int]:
    """A benchmark of ``kind`` on about ``numel`` elements and the bytes it reads and writes."""
    size = torch.tensor([], dtype=dtype).element_size()
    rows = max(1, numel // 1024)
    x = torch.randn(rows, 1024, device=device, dtype=dtype)
    moved = 2 * x.numel() * size
    if kind == "unary":
        return (lambda: F.gelu(x)), moved
    if kind == "binary":
        y = torch.randn_like(x)
        return (lambda: x + y), 3 * x.numel() * size
    if kind == "reduction":
        return (lambda: x.sum(-1)), x.numel() * size + rows * size
    if kind == "softmax":
        return (lambda: torch.softmax(x, -1)), moved
    if kind == "layer_norm":
        norm = nn.LayerNorm(1024, device=device, dtype=dtype)
        return (lambda: F.layer_norm(x, (1024,), norm.weight, norm.bias)), moved
    if kind == "batch_norm_2d":  # feature maps of 28 x 28, 256 channels where they fit
        batch = numel // (256 * 784)
        images = torch.randn(batch, 256, 28, 28, device=device, dtype=dtype) if batch else \
            torch.randn(1, max(1, numel // 784), 28, 28, device=device, dtype=dtype)
        moved = 2 * images.numel() * size
        mean = torch.zeros(images.shape[1], device=device, dtype=dtype)
        var = torch.ones_like(mean)
        return (lambda: F.batch_norm(images, mean, var, training=False)), moved
    if kind == "copy":
        return (lambda: x.clone()), moved
    if kind == "transpose_copy":
        return (lambda: x.t().contiguous()), moved
    if kind == "gather":
        table = torch.randn(50000, 256, device=device, dtype=dtype)
        index = torch.randint(0, 50000, (max(1, numel // 256),), device=device)
        return (lambda: F.embedding(index, table)), 2 * index.numel() * 256 * size
    if kind == "cat":
        half = x[: max(1, rows // 2)]
        return (lambda: torch.cat([half, half])), moved
    if kind == "broadcast":  # a norm's weight times its normalised input
        weight = torch.randn(1024, device=device, dtype=dtype)
        return (lambda: weight * x), moved + weight.numel() * size
    heads = heads_view(numel, device, dtype)
    if kind == "strided":  # rotary: heads times a cosine table broadcast over them
        table = torch.randn(1, 1, *heads.shape[2:], device=device, dtype=dtype)
        return (lambda: heads * table), 2 * heads.numel() * size + table.numel() * size
    if kind == "permute_copy":
        return (lambda: heads.contiguous()), 2 * heads.numel() * size
    if kind == "convert":  # into dtype from another: an operator's table is its output's
        other = torch.bfloat16 if dtype == torch.float32 else torch.float32
        source = torch.randn(rows, 1024, device=device, dtype=other)
        return (lambda: source.to(dtype)), x.numel() * (size + source.element_size())
    if kind == "strided_cat":  # a key/value cache's first step: nothing cached yet
        empty = heads.new_empty(*heads.shape[:2], 0, heads.shape[3])
        return (lambda: torch.cat([empty, heads], -2)), 2 * heads.numel() * size
    if kind == "strided_inner_cat":  # rotate_half: (-second half, first half)
        first = heads[..., : heads.shape[-1] // 2]
        second = torch.randn(first.shape, device=device, dtype=dtype)
        return (lambda: torch.cat([second, first], -1)), 2 * heads.numel() * size
    raise ValueError(f"unknown memory kind {kind!r}")


HOST_BENCHES: tuple[str, ...] = ("view", "unary", "binary", "gemm", "conv", "batch_norm",
                                 "layer_norm", "softmax", "reduction", "attention", "gather",
                                 "copy", "module_call", "cpu_op", "sort", "topk", "scan",
                                 "histogram", "grouped_gemm")
"""The host costs :func:`calibrate` measures (µs per call, the host cannot keep ahead); the
last five are a mixture-of-experts router's operators, several kernels' host work each (a
device that cannot run one leaves it out: :data:`.host_model.HOST_FALLBACK` prices it)."""


DTYPED_HOST_BENCHES: tuple[str, ...] = ("unary", "binary", "gemm", "conv", "batch_norm",
                                        "layer_norm", "softmax", "reduction", "attention",
                                        "gather", "copy")
"""The launch classes measured again on each reduced-precision dtype
(:attr:`~moduleprofiler.prediction.HostCosts.us_by_dtype`)."""


def _host_benches(device: torch.device, dtype: torch.dtype = torch.float32
                  ) -> dict[str, Bench]:
    x = torch.randn(2, 8, device=device, dtype=dtype)
    w = torch.randn(8, 8, device=device, dtype=dtype)
    b = torch.randn(8, device=device, dtype=dtype)
    # A convolution and a batch norm at a model's shape (64 channels of 14 x 14, a few µs of
    # device time): cuDNN's host work grows with the channels, and on an H200's host a
    # 4-channel convolution cost 0.6 times a 64-channel one, a 4-channel batch norm 1.6 times.
    image = torch.randn(1, 64, 14, 14, device=device, dtype=dtype)
    kernel = torch.randn(64, 64, 3, 3, device=device, dtype=dtype)
    affine = torch.ones(64, device=device, dtype=dtype)
    stats = torch.zeros(64, device=device, dtype=dtype), torch.ones(64, device=device, dtype=dtype)
    q = torch.randn(1, 2, 4, 8, device=device, dtype=dtype)
    index = torch.randint(0, 8, (4,), device=device)
    relu = nn.ReLU()
    cpu = torch.randn(2, 8)
    ids = torch.randint(0, 8, (256,), device=device)
    scores = torch.randn(128, 8, device=device, dtype=dtype)
    counts = torch.arange(1, 9, device=device, dtype=torch.int32)
    # a grouped product in bf16, the dtype mixture-of-experts layers run it in
    rows = torch.randn(64, 32, device=device, dtype=torch.bfloat16)
    experts = torch.randn(4, 16, 32, device=device, dtype=torch.bfloat16)
    offsets = counts[:4] * 16
    return {
        "view": lambda: x.view(8, 2),
        "unary": lambda: torch.relu(x),
        "binary": lambda: x + x,
        "gemm": lambda: F.linear(x, w, b),
        "conv": lambda: F.conv2d(image, kernel, None, 1, 1),
        "batch_norm": lambda: F.batch_norm(image, *stats, affine, affine, training=False),
        "layer_norm": lambda: F.layer_norm(x, (8,), b, b),
        "softmax": lambda: torch.softmax(x, -1),
        "reduction": lambda: x.mean(-1),
        "attention": lambda: F.scaled_dot_product_attention(q, q, q),
        "gather": lambda: F.embedding(index, w),
        "copy": lambda: x.t().contiguous(),
        "module_call": lambda: relu(x),
        "cpu_op": lambda: cpu + cpu,
        "sort": lambda: torch.sort(ids),
        "topk": lambda: torch.topk(scores, 2),
        "scan": lambda: torch.cumsum(counts, 0),
        "histogram": lambda: torch.histc(scores, bins=8, min=0, max=7),
        "grouped_gemm": lambda: torch._grouped_mm(rows, experts.transpose(-2, -1), offsets),
    }


def measure_host(device: torch.device, calls: int = 200, rounds: int = 15,
                 dtypes: tuple[str, ...] = ("bf16", "fp16")) -> HostCosts:
    """Host microseconds per call of each :data:`HOST_BENCHES` entry on ``device`` (CUDA:
    launches; ``module_call`` is an ``nn.ReLU`` called as a module, less a bare ``relu``), on
    fp32 tensors and, for :data:`DTYPED_HOST_BENCHES`, again on each of ``dtypes``
    (``bf16``, ``fp16``), all interleaved; and ``module_call_depth``, what each level of
    nesting adds to a module call (:mod:`.host_calls`). The in-model factor is not measured
    here (:func:`~moduleprofiler.prediction.host_in_model.with_in_model_factor`)."""
    reduced = sorted(set(_TORCH_DTYPE) - {"fp32"})  # fp32's loops are the ones in ``us``
    unknown = [d for d in dtypes if d not in reduced]
    if unknown:
        raise ValueError(f"dtypes: {unknown} not among {reduced}")
    benches: dict[tuple[str, str], Bench] = {
        ("fp32", name): bench for name, bench in _host_benches(device).items()}
    for dtype in dtypes:
        typed = _host_benches(device, _TORCH_DTYPE[dtype])
        benches.update({(dtype, name): typed[name] for name in DTYPED_HOST_BENCHES})
    for key, bench in list(benches.items()):
        try:
            for _ in range(20):
                bench()
        except RuntimeError:  # an operator this device cannot run (a grouped product)
            del benches[key]
    samples = interleaved_call_us(benches, calls, rounds,
                                  before=lambda bench: synchronize(device))
    synchronize(device)
    medians = {key: statistics.median(values) for key, values in samples.items()}
    costs = {name: us for (dtype, name), us in medians.items() if dtype == "fp32"}
    costs["module_call"] = max(0.0, costs["module_call"] - costs["unary"])
    costs["module_call_depth"] = depth_cost(leaf_call_us())
    by_dtype = {dtype: {name: medians[(dtype, name)] for name in DTYPED_HOST_BENCHES}
                for dtype in dtypes}
    return HostCosts(cpu=_cpu_name(), us=costs, us_by_dtype=by_dtype)


def cpu_op_us(calls: int = 100, rounds: int = 7) -> float:
    """Host microseconds of a tiny operator on CPU tensors (``cpu_op``): this CPU's speed,
    which carries a calibration's host costs to another CPU."""
    cpu = torch.randn(2, 8)
    samples = interleaved_call_us({"cpu_op": lambda: cpu + cpu}, calls, rounds,
                                  before=lambda bench: bench())
    return statistics.median(samples["cpu_op"])


def _cpu_name() -> str:
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return name


def calibrate(device: str | torch.device | None = None, *, dtypes: tuple[str, ...] = (
        "fp32", "bf16"), quick: bool = False, backward: bool = True,
        repeats: int = 3) -> Calibration:
    """Measure this CUDA device (and the CPU driving it) for the prediction model.

    Args:
        device: the CUDA device (default: the current one).
        dtypes: ``"fp32"`` (matmuls and convolutions in TF32, as
            ``torch.set_float32_matmul_precision("high")``), ``"bf16"``, ``"fp16"``.
        quick: a sparse grid (about a tenth of the shapes) for a smoke test.
        backward: also measure what a training step runs: convolution and attention
            backwards, matrix products in each transposed layout, normalisation, pooling
            and bias-gradient backwards (:mod:`.calibrate_backward`).
        repeats: recorded runs of each shape (the median is kept).

    Returns:
        A :class:`~moduleprofiler.prediction.Calibration`; ``save()`` it and pass it (or its
        path) to ``predict(device=...)``. Its ``held_out`` residuals (each shape predicted
        from the others) give every prediction from it its error band; its ``in_chain``
        costs (:mod:`.in_chain`, a synthetic chain of small kernels) what a small kernel
        takes inside a model beyond its table's loop; its host costs the CPU's launches by
        class, its module calls by depth (:mod:`.host_calls`) and the factor from tight loops
        to a model's forward (:mod:`.host_in_model`), each measured on synthetic modules.

    Raises:
        RuntimeError: CUDA is not available, or the GPU's kernel records cannot be read
            (:class:`~moduleprofiler.errors.DeviceUnavailableError`: no ``device`` here).
        ValueError: an unknown dtype.
    """
    if not cuda_available():
        raise RuntimeError("calibrate() measures a CUDA device, and CUDA is not available")
    cuda = default_device() if device is None else usable_device(device)
    if cuda.type != "cuda":
        raise ValueError(f"device must be a CUDA device, got {cuda}")
    unknown = [d for d in dtypes if d not in _TORCH_DTYPE]
    if unknown:
        raise ValueError(f"dtypes: unknown {unknown}; use {', '.join(_TORCH_DTYPE)}")
    props = properties(cuda)
    tables: dict[str, dict[str, list[list[float]]]] = {}
    with device_context(cuda), tf32_math(True):
        # the host first, before the tables' profiler sessions: after one, CUPTI stays
        # attached to the process and a launch costs the host 1.3 to 1.7 times what it costs
        # in the user's unprofiled run, the run the host costs are for
        notes = after_sessions_notes("the host costs")
        host = with_in_model_factor(cuda, measure_host(cuda))
        for name in dtypes:
            dtype = _TORCH_DTYPE[name]
            table = tables.setdefault(name, {})
            sweep = _Sweep(cuda, repeats)
            table.update(matmul_tables(sweep, dtype, quick))
            _free()
            convs = conv_shapes(quick)
            add_passes(sweep, "conv", convs, _conv_bench, cuda, dtype, backward)
            table.update(pass_rows(sweep.run(), "conv", convs, backward))
            _free()
            attentions = attention_shapes(quick)
            add_passes(sweep, "attention", attentions, attention_bench, cuda, dtype, backward)
            table.update(pass_rows(sweep.run(), "attention", attentions, backward))
            _free()
            if backward:
                table.update(backward_tables(sweep, cuda, dtype, quick))
                _free()
            sizes = [2 ** i for i in range(10, 29, 2 if quick else 1)]
            moved = add_memory(sweep, MEMORY_KINDS, sizes, _memory_bench, cuda, dtype)
            table.update(memory_rows(sweep.run(), moved))
            _free()
        in_chain = measure_in_chain(cuda, {name: _TORCH_DTYPE[name] for name in dtypes})
        _free()
    # the table's name when CUDA's says the card; else CUDA's, never a guess among cards
    table_names = matching_devices(props.name)
    calibration = Calibration(
        name=table_names[0] if len(table_names) == 1 else props.name, device_name=props.name,
        sms=props.multi_processor_count, torch_version=torch.__version__,
        created=time.strftime("%Y-%m-%d"), tables=tables, host=host, quick=quick,
        in_chain=in_chain, notes=tuple(notes))
    if len(table_names) != 1:  # no datasheet peaks for the roofline ratios: no band
        return dataclasses.replace(calibration, notes=(
            *notes, f"{props.name} has no datasheet peaks: no held-out residuals, so "
            "predictions from this calibration carry no error band"))
    return dataclasses.replace(calibration, held_out=held_out_residuals(
        calibration, device_peaks(table_names[0])))


def matmul_tables(sweep: _Sweep, dtype: torch.dtype, quick: bool
                  ) -> dict[str, list[list[float]]]:
    """The matrix products' tables (``gemm``, :data:`LINEAR_TABLES`, ``bmm``) in ``dtype``,
    with the TF32 setting the caller chose."""
    gemms = _gemms(sweep, dtype, quick)
    for name in LINEAR_TABLES:  # one grid of shapes for all three
        linears = _linears(sweep, dtype, quick, name)
    bmms = _bmms(sweep, dtype, quick)
    times = sweep.run()
    tables = {"gemm": [[m, n, k, times[f"gemm:{m}:{n}:{k}"]] for m, n, k in gemms]}
    for name in LINEAR_TABLES:
        tables[name] = [[m, n, k, times[f"{name}:{m}:{n}:{k}"]] for m, n, k in linears]
    tables["bmm"] = [[b, m, n, k, times[f"bmm:{b}:{m}:{n}:{k}"]] for b, m, n, k in bmms]
    return tables


def ieee_matmul_tables(sweep: _Sweep, dtype: torch.dtype, quick: bool
                       ) -> dict[str, list[list[float]]]:
    """:func:`matmul_tables` of fp32 with TF32 off, PyTorch's default for matrix products
    (``torch.backends.cuda.matmul.allow_tf32`` is ``False``), named with the
    :data:`~moduleprofiler.prediction.device_model.IEEE` suffix: the kernels run then are
    other kernels (on the CUDA cores), not TF32's at the plain FP32 peak.

    Not part of :func:`calibrate`: on an H200 these rows priced small products right
    (ViT-B/16's at 4 x 17 tokens: 0.44 of the kernel clock before, 0.88 with them) but
    mid-sized ones 8 to 18 % fast in a model (GPT-2 small at 8 x 128 tokens: 1.048 before,
    0.920 with them; ``benchmarks/results/prediction/evaluate_ieee_h200_2026-11-30.txt``), so a
    calibration takes them only when merged in by hand
    (``benchmarks/prediction/calibrate_ieee.py``)."""
    with tf32_math(False):
        found = matmul_tables(sweep, dtype, quick)
    return {name + IEEE: rows for name, rows in found.items()}


def _free() -> None:
    gc.collect()
    empty_cache()


def measure_backward_tables(device: torch.device, dtypes: tuple[str, ...] = ("fp32", "bf16"),
                            quick: bool = False, repeats: int = 3
                            ) -> dict[str, dict[str, list[list[float]]]]:
    """The training step's tables of ``device`` by dtype
    (:func:`~moduleprofiler.prediction.calibrate_backward.backward_tables`), measured alone
    (fp32 matmuls in TF32, as :func:`calibrate` measures them): what a calibration made before
    they existed lacks."""
    found: dict[str, dict[str, list[list[float]]]] = {}
    with device_context(device), tf32_math(True):
        for name in dtypes:
            found[name] = backward_tables(_Sweep(device, repeats), device, _TORCH_DTYPE[name],
                                          quick)
            _free()
    return found
