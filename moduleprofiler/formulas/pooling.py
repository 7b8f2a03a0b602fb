"""Pooling layers: max, average, power-average, adaptive, fractional pools and max-unpooling.

All pools here use box windows, so the number of real input elements summed over every output
position factorises per spatial dimension: ``sum over outputs of w = prod_d S_d`` with ``S_d``
the sum of the per-dimension window lengths. Window lengths are the *real* ones: taps that fall
in the padding or past the border (``ceil_mode``) are not counted, because nothing is computed
with them. Reference and worked examples: ``docs/formulas/pooling.md``.

* max pools: ``w - 1`` comparisons per output
* average pools: ``w - 1`` adds + 1 divide = ``w`` per output
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from moduleprofiler.formulas._common import no_macs
from moduleprofiler.registry import register_macs, register_ops

_SPATIAL_DIMS: dict[type, int] = {
    nn.MaxPool1d: 1, nn.MaxPool2d: 2, nn.MaxPool3d: 3,
    nn.AvgPool1d: 1, nn.AvgPool2d: 2, nn.AvgPool3d: 3,
    nn.LPPool1d: 1, nn.LPPool2d: 2, nn.LPPool3d: 3,
    nn.AdaptiveMaxPool1d: 1, nn.AdaptiveMaxPool2d: 2, nn.AdaptiveMaxPool3d: 3,
    nn.AdaptiveAvgPool1d: 1, nn.AdaptiveAvgPool2d: 2, nn.AdaptiveAvgPool3d: 3,
    nn.FractionalMaxPool2d: 2, nn.FractionalMaxPool3d: 3,
}  # fmt: skip


def spatial_dims(module: nn.Module) -> int:
    """Number of pooled (trailing) dimensions of a pooling module, found along its MRO."""
    for base in type(module).__mro__:
        if base in _SPATIAL_DIMS:
            return _SPATIAL_DIMS[base]
    raise TypeError(f"{type(module).__name__} is not a known pooling module")


def first_tensor(output: Any) -> Tensor:
    """The pooled tensor: ``output`` itself, or ``output[0]`` for ``return_indices=True``."""
    if isinstance(output, (tuple, list)):
        return output[0]  # type: ignore[no-any-return]
    return output  # type: ignore[no-any-return]


def expand(value: int | Sequence[int] | None, n: int, default: Sequence[int]) -> tuple[int, ...]:
    """``value`` as an ``n``-tuple of ints (an int repeats; ``None``/``[]`` give ``default``)."""
    if value is None:
        return tuple(default)
    if isinstance(value, (int, torch.SymInt)):
        return (int(value),) * n
    values = tuple(int(v) for v in value)
    if not values:
        return tuple(default)
    return values * n if len(values) == 1 else values


def real_taps(length: int, outputs: int, kernel: int, stride: int, padding: int,
              dilation: int) -> int:
    """Sum over outputs ``i`` of the taps ``i*stride - padding + j*dilation`` in ``[0, length)``."""
    total = 0
    for i in range(outputs):
        start = i * stride - padding
        first = -(start // dilation) if start < 0 else 0  # first j with start + j*d >= 0
        last = min(kernel - 1, (length - 1 - start) // dilation)  # last j, start + j*d < length
        total += max(0, last - first + 1)
    return total


def adaptive_taps(length: int, outputs: int) -> int:
    """Sum of adaptive window lengths ``ceil((i+1)*L/O) - floor(i*L/O)`` over ``i < O``."""
    return sum(
        -(-(i + 1) * length // outputs) - (i * length // outputs) for i in range(outputs)
    )


def pooled_elements(x: Tensor, out: Tensor, dims: int,
                    windows: tuple[Sequence[int], ...] | None = None) -> int:
    """Real input elements summed over all windows of a pool of ``x``'s last ``dims`` dims into
    ``out``'s: strided windows when ``windows`` is ``(kernel, stride, padding, dilation)``, one
    int per dim each; adaptive ones when ``None``."""
    in_sizes = [int(s) for s in x.shape[x.dim() - dims :]]
    out_sizes = [int(s) for s in out.shape[out.dim() - dims :]]
    per_map = math.prod(out_sizes)
    lead = int(out.numel()) // per_map if per_map else 0
    if windows is None:
        return lead * math.prod(adaptive_taps(i, o) for i, o in zip(in_sizes, out_sizes))
    return lead * math.prod(real_taps(in_sizes[d], out_sizes[d], *(w[d] for w in windows))
                            for d in range(dims))


def _window_elements(module: nn.Module, x: Tensor, out: Tensor) -> int:
    """Real input elements summed over all output windows of a strided (optionally padded) pool."""
    n = spatial_dims(module)
    kernel = expand(module.kernel_size, n, ())  # type: ignore[arg-type]
    stride = expand(module.stride, n, kernel)  # type: ignore[arg-type]
    padding = expand(getattr(module, "padding", 0), n, (0,) * n)
    dilation = expand(getattr(module, "dilation", 1), n, (1,) * n)
    return pooled_elements(x, out, n, (kernel, stride, padding, dilation))


def adaptive_window_elements(module: nn.Module, x: Tensor, out: Tensor) -> int:
    """Input elements summed over all output windows of an adaptive pool."""
    return pooled_elements(x, out, spatial_dims(module))


_WindowFn = Callable[[nn.Module, Tensor, Tensor], int]


def _max_ops(windows: _WindowFn, module: nn.Module, inputs: tuple[Any, ...], output: Any) -> int:
    """sum over outputs of (w - 1) comparisons."""
    out = first_tensor(output)
    return windows(module, inputs[0], out) - int(out.numel())


@register_ops(nn.modules.pooling._MaxPoolNd)
def maxpool_ops(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> int:
    """sum over outputs of (w - 1), w = real (clipped, dilated) window size."""
    return _max_ops(_window_elements, module, inputs, output)


@register_ops(nn.modules.pooling._AdaptiveMaxPoolNd)
def adaptive_maxpool_ops(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> int:
    """sum over outputs of (w - 1), w = adaptive window size."""
    return _max_ops(adaptive_window_elements, module, inputs, output)


@register_ops(nn.modules.pooling._AvgPoolNd)
def avgpool_ops(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> int:
    """sum over outputs of w: w - 1 adds + 1 divide, w = real (clipped) window size."""
    return _window_elements(module, inputs[0], first_tensor(output))


@register_ops(nn.modules.pooling._AdaptiveAvgPoolNd)
def adaptive_avgpool_ops(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> int:
    """sum over outputs of w: w - 1 adds + 1 divide, w = adaptive window size."""
    return adaptive_window_elements(module, inputs[0], first_tensor(output))


@register_ops(nn.modules.pooling._LPPoolNd)
def lppool_ops(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> int:
    """numel (x**p) + sum over outputs of (w - 1) adds + 1 root: numel + sum of w."""
    x: Tensor = inputs[0]
    return int(x.numel()) + _window_elements(module, x, first_tensor(output))


@register_ops(nn.FractionalMaxPool2d, nn.FractionalMaxPool3d)
def fractional_maxpool_ops(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> int:
    """outputs * (prod(kernel_size) - 1): the pseudo-random windows always lie inside the input."""
    out = first_tensor(output)
    kernel = expand(module.kernel_size, spatial_dims(module), ())  # type: ignore[arg-type]
    return int(out.numel()) * (math.prod(kernel) - 1)


@register_ops(nn.modules.pooling._MaxUnpoolNd)
def maxunpool_ops(module: nn.Module, inputs: tuple[Any, ...], output: Any) -> int:
    """0: max-unpooling scatters values to the saved indices, no arithmetic."""
    return 0


register_macs(
    nn.modules.pooling._MaxPoolNd,
    nn.modules.pooling._AdaptiveMaxPoolNd,
    nn.modules.pooling._AvgPoolNd,
    nn.modules.pooling._AdaptiveAvgPoolNd,
    nn.modules.pooling._LPPoolNd,
    nn.FractionalMaxPool2d,
    nn.FractionalMaxPool3d,
    nn.modules.pooling._MaxUnpoolNd,
)(no_macs)

