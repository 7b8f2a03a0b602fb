"""Sweeps: one model profiled over a grid of sequence lengths and batch sizes, as one tidy
table (one row per size) and, with matplotlib installed, a figure of any column against the
sequence length."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable
from typing import Any

import pandas as pd
from torch import nn

from moduleprofiler.core import Profiler
from moduleprofiler.export.figures import figure_axes
from moduleprofiler.language.models import text_inputs
from moduleprofiler.timing import TimingOptions
from moduleprofiler.validate import check_bool, check_sizes

InputFactory = Callable[[int, int], Any]
"""``(batch_size, seq_len) -> input`` as :meth:`Profiler.profile` takes it."""


def sweep(
    model: nn.Module,
    seq_lens: Iterable[int],
    batch_sizes: Iterable[int] = (1,),
    *,
    make_input: InputFactory | None = None,
    backward: bool = False,
    time: bool = False,
    memory: bool = False,
    profiler: Profiler | None = None,
    **benchmark_options: Any,
) -> pd.DataFrame:
    """Profile ``model`` at every ``(batch_size, seq_len)`` of the grid.

    Args:
        model: any module; for a Transformers model the inputs default to
            :func:`~moduleprofiler.language.text_inputs` (with ``labels`` when ``backward``).
        seq_lens, batch_sizes: the grid (every pair is profiled).
        make_input: ``(batch_size, seq_len) -> input`` for other models.
        backward: also count a backward pass (``self_backward_flops``).
        time: also measure the whole-model latency (:meth:`Profiler.benchmark`, its keywords
            and those of :class:`~moduleprofiler.timing.TimingOptions` in
            ``benchmark_options``): ``time_ms`` is its median.
        memory: also measure the inference peak (``peak_bytes``, training peak with
            ``backward``) with :meth:`Profiler.measure_memory`.
        profiler: the profiler whose formulas count (default: a new one).

    Returns:
        One row per size: ``batch_size``, ``seq_len``, ``tokens``, ``params``, ``ops``,
        ``macs``, ``flops``, ``flops_per_token``, ``complete``, and ``self_backward_flops``,
        ``time_ms``, ``peak_bytes`` when asked.

    Raises:
        ValueError: a size is not a positive int, or the grid is empty.
    """
    for name, flag in (("backward", backward), ("time", time), ("memory", memory)):
        check_bool(flag, name)
    lengths, batches = check_sizes(seq_lens, "seq_lens"), check_sizes(batch_sizes, "batch_sizes")
    if make_input is None:
        def make_input(batch: int, length: int) -> Any:
            return text_inputs(model, batch, length, labels=backward)
    profiler = profiler or Profiler()
    fields = {field.name for field in dataclasses.fields(TimingOptions)}
    timing = TimingOptions(**{k: v for k, v in benchmark_options.items() if k in fields})
    benchmark_options = {k: v for k, v in benchmark_options.items() if k not in fields}
    rows = []
    for batch, length in itertools.product(batches, lengths):
        given = make_input(batch, length)
        profile = profiler.profile(model, given, backward=backward)
        row: dict[str, Any] = {
            "batch_size": batch, "seq_len": length, "tokens": batch * length,
            "params": profile.total_params, "ops": profile.total_ops,
            "macs": profile.total_macs, "flops": profile.total_flops,
            "flops_per_token": (profile.total_flops or 0) / (batch * length),  # it counts
            "complete": profile.complete}
        if backward:
            macs = profile.total_backward_macs
            row["self_backward_flops"] = None if macs is None else 2 * macs
        if time:
            row["time_ms"] = profiler.benchmark(model, given, timing,
                                                 **benchmark_options).latency_ms
        if memory:
            row["peak_bytes"] = profiler.measure_memory(model, given, train=backward).peak_bytes
        rows.append(row)
    return pd.DataFrame(rows)


def plot_sweep(frame: pd.DataFrame, y: str = "flops", x: str = "seq_len", ax: Any = None) -> Any:
    """A line per batch size of ``y`` against ``x`` from a :func:`sweep` table, on ``ax`` or a
    new figure; returns the matplotlib ``Figure`` (``figure.savefig(path)`` writes it).

    Raises:
        ImportError: matplotlib is not installed (the ``plot`` extra).
        KeyError: ``x`` or ``y`` is not a column of ``frame``.
    """
    for column in (x, y):
        if column not in frame:
            raise KeyError(f"{column!r} is not a column of the sweep (columns: "
                           f"{', '.join(str(c) for c in frame.columns)})")
    figure, ax = figure_axes(ax, (6, 4), feature="plot_sweep")
    groups: Any = frame.groupby("batch_size") if "batch_size" in frame else [(None, frame)]
    for batch, rows in groups:
        rows = rows.sort_values(x)
        ax.plot(rows[x], rows[y], marker="o",
                label=None if batch is None else f"batch {batch!s}")
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    if "batch_size" in frame:
        ax.legend()
    return figure
