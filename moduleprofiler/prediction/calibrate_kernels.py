"""Micro-benchmarks of the shapes where cuDNN and PyTorch pick other kernels than the main grids
of :func:`~moduleprofiler.prediction.calibrate` show: measured on synthetic shapes, added as rows
to the tables that time them (older calibrations without them still predict, from their rows).

* normalisations and softmaxes by the width of the row they reduce (``mem_layer_norm``,
  ``mem_layer_norm_backward``, ``mem_softmax``: ``[bytes, width, us]``; the main grid's rows,
  ``[bytes, us]``, are 1024 wide): a narrow row leaves most of a warp idle;
* ``mem_roll``: ``torch.roll`` of an image's rows and columns (``[bytes, us]``), a gather through
  computed indices, far slower per byte than a unary kernel;
* batched matrix products at attention shapes (``bmm``): many small products, the scores with the
  keys stored transposed;
* grouped convolutions (neither dense nor depthwise), convolutions with channel counts no power of
  two, and channels-last convolutions (``conv`` / ``conv_backward`` rows of nine entries, the
  eighth ``1``: cuDNN runs other kernels for a channels-last input);
* fused attention over sequences no multiple of the kernels' tiles (``attention`` /
  ``attention_backward``).

Each ``*_shapes`` function also names held-out shapes (``held_out=True``): shapes off the grid
that prove the rows cover their class. The sweep helpers here (:func:`add_passes`,
:func:`add_memory` and their rows) fill and read every calibration grid's sweep.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

import torch
import torch.nn.functional as F

WIDTH_KINDS: tuple[str, ...] = ("layer_norm", "layer_norm_backward", "softmax")
"""Memory kinds measured by row width as well as size."""

NORM_WIDTHS: tuple[int, ...] = (48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 2048, 4096)
"""Layer norm widths measured: powers of two and their 1.5x, 48 to 4096."""
NORM_WIDTHS_HELD_OUT: tuple[int, ...] = (80, 160, 320, 640, 1280)
SOFTMAX_WIDTHS: tuple[int, ...] = (16, 24, 32, 48, 64, 96, 128, 192, 256, 512, 2048)
"""Softmax widths measured (attention scores over short windows to long sequences)."""
SOFTMAX_WIDTHS_HELD_OUT: tuple[int, ...] = (40, 49, 80, 197)
WIDTH_SIZES: tuple[int, ...] = tuple(2 ** i for i in range(12, 29, 2))
"""Element counts each width is measured at."""
ROLL_SIZES: tuple[int, ...] = tuple(2 ** i for i in range(10, 29, 2))

ConvShape = tuple[int, int, int, int, int, int, int, int]
"""(batch, in channels, out channels, side, kernel, stride, groups, channels-last)."""
AttentionShape = tuple[int, int, int, int, int]
"""(batch, heads, sequence, head dim, causal)."""
BmmShape = tuple[int, int, int, int]
"""(batch, m, n, k)."""

_CONV_FLOP_CAP = 2 * 2 ** 36
_BMM_ELEMENT_CAP = 2 ** 29

Shape = TypeVar("Shape", bound=tuple[int, ...])


class _SweepLike(Protocol):
    def add(self, label: str, make: Callable[[], Callable[[], Any]]) -> None: ...

    def run(self) -> dict[str, float]: ...


Bench = Callable[[], Any]
MemoryBench = Callable[[str, int, torch.device, torch.dtype], tuple[Bench, int]]
"""``(kind, numel, device, dtype) -> (benchmark, bytes it moves)``."""


def mm_bench(a: torch.Tensor, b: torch.Tensor) -> Bench:
    """``a @ b``."""
    return lambda: torch.mm(a, b)


def grad_bench(output: torch.Tensor, inputs: tuple[torch.Tensor, ...]) -> Bench:
    """The backward of ``output`` to ``inputs``, from a random output gradient."""
    grad = torch.randn_like(output)
    return lambda: torch.autograd.grad(output, inputs, grad, retain_graph=True)


def bench_of(make: Callable[..., tuple[Bench, int]], *args: Any) -> Bench:
    """The benchmark ``make(*args)`` returns beside its bytes: a sweep's factory, which makes
    its tensors when it runs."""
    return make(*args)[0]


def add_passes(sweep: _SweepLike, table: str, shapes: Sequence[Any],
               bench: Callable[..., Bench], device: torch.device, dtype: torch.dtype,
               backward: bool = True) -> None:
    """Add ``bench(shape, device, dtype, backward)`` of each of ``shapes`` to ``sweep``: its
    forward (``table:shape``) and, with ``backward``, its backward (``table_backward:shape``)."""
    for shape in shapes:
        for phase in (False, True) if backward else (False,):
            sweep.add(f"{table}{'_backward' if phase else ''}:{shape}",
                      functools.partial(bench, shape, device, dtype, phase))


def pass_rows(times: dict[str, float], table: str, shapes: Sequence[Any],
              backward: bool = True) -> dict[str, list[list[float]]]:
    """The rows of ``table`` (and, with ``backward``, of ``table_backward``) from the times of
    a sweep :func:`add_passes` filled."""
    names = (table, f"{table}_backward") if backward else (table,)
    return {name: [[*shape, times[f"{name}:{shape}"]] for shape in shapes] for name in names}


def add_memory(sweep: _SweepLike, kinds: Sequence[str], sizes: Sequence[int],
               bench: MemoryBench, device: torch.device,
               dtype: torch.dtype) -> dict[str, list[int]]:
    """Add ``bench`` of every kind of ``kinds`` at every element count of ``sizes`` to
    ``sweep`` (labels ``mem:<kind>:<bytes>``; a size moving the bytes of an earlier one is
    left out); the bytes of each, by kind."""
    moved: dict[str, list[int]] = {}
    for kind in kinds:
        moved[kind] = []
        for numel in sizes:
            nbytes = bench(kind, numel, torch.device("meta"), dtype)[1]
            if nbytes not in moved[kind]:
                moved[kind].append(nbytes)
                sweep.add(f"mem:{kind}:{nbytes}",
                          functools.partial(bench_of, bench, kind, numel, device, dtype))
    return moved


def memory_rows(times: dict[str, float],
                moved: dict[str, list[int]]) -> dict[str, list[list[float]]]:
    """The ``mem_<kind>`` rows, ``[bytes, us]``, from the times of a sweep :func:`add_memory`
    filled."""
    return {f"mem_{kind}": [[nbytes, times[f"mem:{kind}:{nbytes}"]] for nbytes in sizes]
            for kind, sizes in moved.items()}


def _norm_width(kind: str, held_out: bool) -> tuple[int, ...]:
    if kind == "softmax":
        return SOFTMAX_WIDTHS_HELD_OUT if held_out else SOFTMAX_WIDTHS
    return NORM_WIDTHS_HELD_OUT if held_out else NORM_WIDTHS


def width_bench(kind: str, numel: int, width: int, device: torch.device,
                dtype: torch.dtype) -> tuple[Callable[[], Any], int]:
    """A benchmark of ``kind`` (:data:`WIDTH_KINDS`) over rows ``width`` wide, about ``numel``
    elements, and the bytes it is priced on (as the main grid's 1024-wide rows count them)."""
    size = torch.tensor([], dtype=dtype).element_size()
    x = torch.randn(max(1, numel // width), width, device=device, dtype=dtype,
                    requires_grad=kind == "layer_norm_backward")
    if kind == "softmax":
        return (lambda: torch.softmax(x, -1)), 2 * x.numel() * size
    weight = torch.ones(width, device=device, dtype=dtype, requires_grad=x.requires_grad)
    bias = torch.zeros(width, device=device, dtype=dtype, requires_grad=x.requires_grad)
    if kind == "layer_norm":
        return (lambda: F.layer_norm(x, (width,), weight, bias)), 2 * x.numel() * size
    y = F.layer_norm(x, (width,), weight, bias)
    return grad_bench(y, (x, weight, bias)), 3 * x.numel() * size


def roll_bench(numel: int, device: torch.device, dtype: torch.dtype,
               held_out: bool = False) -> tuple[Callable[[], Any], int]:
    """``torch.roll`` of an image's rows and columns (channels last, 28 x 28 x 128; held out:
    14 x 14 x 384), about ``numel`` elements, and its bytes (read once, written once)."""
    side, channels = (14, 384) if held_out else (28, 128)
    batch = max(1, numel // (side * side * channels))
    x = torch.randn(batch, side, side, channels, device=device, dtype=dtype)
    shift = (-3, -3) if held_out else (3, 3)
    return (lambda: torch.roll(x, shift, (1, 2))), 2 * x.numel() * x.element_size()


def bmm_shapes(held_out: bool = False, seqs: Sequence[int] | None = None
               ) -> list[tuple[str, BmmShape]]:
    """Attention-shaped batched products: ``("scores", (batch, s, s, d))`` (queries times the
    keys stored transposed) and ``("context", (batch, s, d, s))`` (scores times the values);
    ``seqs``: the sequence lengths (default: the table's, or its held-out ones)."""
    if seqs is None:
        seqs = (49, 144, 197) if held_out else (16, 24, 32, 48, 64, 96, 128, 192, 256, 384,
                                                512)
    batches = (48, 768, 6144) if held_out else (16, 64, 256, 1024, 4096, 16384)
    shapes: list[tuple[str, BmmShape]] = []
    for b in batches:
        for s in seqs:
            for d in (32, 64):
                if b * s * s <= _BMM_ELEMENT_CAP:
                    shapes += [("scores", (b, s, s, d)), ("context", (b, s, d, s))]
    return shapes


def bmm_bench(pattern: str, shape: BmmShape, device: torch.device,
              dtype: torch.dtype) -> Callable[[], Any]:
    """One attention-shaped batched product (:func:`bmm_shapes`)."""
    b, m, n, k = shape
    a = torch.randn(b, m, k, device=device, dtype=dtype)
    if pattern == "scores":
        keys = torch.randn(b, n, k, device=device, dtype=dtype)
        return lambda: torch.bmm(a, keys.transpose(1, 2))
    values = torch.randn(b, k, n, device=device, dtype=dtype)
    return lambda: torch.bmm(a, values)


def conv_shapes(held_out: bool = False) -> list[ConvShape]:
    """Grouped convolutions (3 x 3, group widths 8 to 64; held out: 24 and 48), pointwise ones
    between channel counts no power of two, and channels-last depthwise (3 x 3 and 7 x 7;
    held out: 5 x 5), pointwise and 2 x 2 downsampling convolutions."""
    batches = (1, 8, 64)
    sides = (7, 14, 28, 56)
    shapes: list[ConvShape] = []
    for n in batches:
        for h in sides:
            for c in (64, 128, 256, 512, 1024):
                for width in ((24, 48) if held_out else (8, 16, 32, 64)):
                    if c % width == 0 and c // width > 1:
                        for stride in (1, 2):
                            shapes.append((n, c, c, h, 3, stride, c // width, 0))
            odd = (48, 144, 480) if held_out else (24, 40, 72, 120, 200, 336, 576, 960)
            for c in odd:
                for out in {max(8, c // 6 // 8 * 8), c, min(1152, 6 * c)}:
                    shapes.append((n, c, out, h, 1, 1, 1, 0))
            for c in ((96, 768) if held_out else (32, 64, 128, 256, 512, 1024)):
                for kernel in ((5,) if held_out else (3, 7)):
                    for stride in (1, 2):
                        shapes.append((n, c, c, h, kernel, stride, c, 1))
                if not held_out:
                    shapes.append((n, c, c, h, 1, 1, 1, 1))
                    if 2 * c <= 2048:
                        shapes.append((n, c, 2 * c, h, 2, 2, 1, 1))
    return within_cap(shapes)


def within_cap(shapes: list[Shape]) -> list[Shape]:
    """Convolution ``shapes`` (batch, in, out, side, kernel, stride, groups, ...) once each,
    in order, leaving out those over :data:`_CONV_FLOP_CAP`."""
    return [s for s in dict.fromkeys(shapes)
            if 2 * s[0] * s[2] * (s[3] // s[5]) ** 2 * s[1] // s[6] * s[4] ** 2 <= _CONV_FLOP_CAP]


def conv_bench(shape: ConvShape, device: torch.device, dtype: torch.dtype,
               backward: bool) -> Callable[[], Any]:
    """One convolution's forward or backward (input and weight gradients), its input
    channels-last where the shape says (the weight as a layer keeps it, contiguous)."""
    n, cin, cout, h, kernel, stride, groups, channels_last = shape
    x = torch.randn(n, cin, h, h, device=device, dtype=dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    x.requires_grad_(backward)
    w = torch.randn(cout, cin // groups, kernel, kernel, device=device, dtype=dtype,
                    requires_grad=backward)
    pad = kernel // 2 if stride < kernel else 0
    if not backward:
        return lambda: F.conv2d(x, w, None, stride, pad, 1, groups)
    y = F.conv2d(x, w, None, stride, pad, 1, groups)
    return grad_bench(y, (x, w))


def attention_shapes(held_out: bool = False) -> list[AttentionShape]:
    """Fused attention over sequences no multiple of the kernels' tiles (held out: 145, 401)."""
    seqs = (145, 401) if held_out else (50, 100, 197, 320, 577, 1000)
    return [(b, h, s, d, 0) for b in (1, 8, 64) for h in (6, 12) for s in seqs
            for d in (64,) if b * s <= 64 * 1024]


def attention_bench(shape: AttentionShape, device: torch.device, dtype: torch.dtype,
                    backward: bool) -> Callable[[], Any]:
    """``scaled_dot_product_attention``'s forward, or its backward."""
    b, h, s, d, causal = shape
    q, k, v = (torch.randn(b, h, s, d, device=device, dtype=dtype, requires_grad=backward)
               for _ in range(3))
    if not backward:
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
    return grad_bench(out, (q, k, v))


def kernel_tables(sweep: _SweepLike, device: torch.device, dtype: torch.dtype,
                  held_out: bool = False) -> dict[str, list[list[float]]]:
    """Measure the rows of the module docstring (``held_out``: the held-out shapes instead)
    on ``device`` in ``dtype``: ``{table: rows}``, rows in the tables' formats."""
    meta = torch.device("meta")
    tables: dict[str, list[list[float]]] = {}
    width_rows: dict[str, list[tuple[int, int, str]]] = {}
    for kind in WIDTH_KINDS:
        for width in _norm_width(kind, held_out):
            for numel in WIDTH_SIZES:
                if numel < width:
                    continue
                nbytes = width_bench(kind, numel, width, meta, dtype)[1]
                label = f"{kind}:{width}:{nbytes}"
                width_rows.setdefault(kind, []).append((nbytes, width, label))
                sweep.add(label, functools.partial(bench_of, width_bench, kind, numel, width,
                                                   device, dtype))
    roll_rows = []
    for numel in ROLL_SIZES:
        nbytes = roll_bench(numel, meta, dtype, held_out)[1]
        roll_rows.append((nbytes, f"roll:{nbytes}"))
        sweep.add(f"roll:{nbytes}", functools.partial(bench_of, roll_bench, numel, device,
                                                      dtype, held_out))
    times = sweep.run()
    for kind, rows in width_rows.items():
        tables[f"mem_{kind}"] = [[nbytes, width, times[label]] for nbytes, width, label
                                 in dict.fromkeys(rows)]
    tables["mem_roll"] = [[nbytes, times[label]] for nbytes, label in dict.fromkeys(roll_rows)]
    bmms = bmm_shapes(held_out)
    for pattern, shape in bmms:
        sweep.add(f"bmm:{pattern}:{shape}", functools.partial(bmm_bench, pattern, shape,
                                                              device, dtype))
    times = sweep.run()
    tables["bmm"] = [[*shape, times[f"bmm:{pattern}:{shape}"]] for pattern, shape in bmms]
    convs = conv_shapes(held_out)
    attentions = attention_shapes(held_out)
    add_passes(sweep, "conv", convs, conv_bench, device, dtype)
    add_passes(sweep, "attention", attentions, attention_bench, device, dtype)
    times = sweep.run()
    return {**tables, **pass_rows(times, "conv", convs),
            **pass_rows(times, "attention", attentions)}
