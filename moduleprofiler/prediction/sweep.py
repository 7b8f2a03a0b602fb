"""What-if answers before renting a GPU: one model predicted over batch sizes and dtypes on one
device, as a table (latency, device time, throughput, predicted peak memory, host- or
device-bound) with the batch at which the pass turns device-bound and the largest batch that
fits the card's memory, and a figure of them.

Every row is a :func:`~moduleprofiler.prediction.predict` pass and a memory plan, both on the
meta device (nothing is allocated or computed); the two searches (the turning batch, the largest
batch that fits) run more of them between the swept sizes, by bisection.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import pandas as pd
import torch
from torch import nn

from moduleprofiler.export.columns import ColumnSpec
from moduleprofiler.export.figures import FIGSIZE, check_figure_path, figure_axes, save_figure
from moduleprofiler.export.view import View
from moduleprofiler.inputs import add_note
from moduleprofiler.memory.measure import measure_memory
from moduleprofiler.prediction.columns import PASS_COLUMNS
from moduleprofiler.prediction.meta_copy import (
    materialise_lazy,
    meta_copy,
    meta_input,
    meta_limit,
)
from moduleprofiler.prediction.predict import (
    DEFAULT_HOST,
    DeviceSpec,
    HostSpec,
    PredictedProfile,
    dtype_of,
    resolve_device,
)
from moduleprofiler.shapes import iter_tensors, map_tensors
from moduleprofiler.validate import check_callable, check_module, check_sizes

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PredictFn = Callable[..., PredictedProfile]
"""``Profiler.predict``: ``(module, input, device=, host=, dtype=, backward=, tf32=)``."""

InputFn = Callable[[int], Any]
"""``batch -> input`` as :meth:`~moduleprofiler.Profiler.profile` takes it."""

DEVICE_MEMORY_MIB: dict[str, int] = {
    "H100 SXM": 81559, "H100 PCIe": 81559, "H100 NVL": 95830, "H200": 143771,
    "A100 40GB": 40536, "A100 80GB SXM": 81920, "A100 80GB PCIe": 81920,
    "L40S": 46068, "L4": 23034, "A10": 23028,
}
"""A card's memory as its driver reports it (``nvidia-smi``'s MiB; the datasheet's "80 GB" of
an H100 is 79.6 GiB), by peak-table name; a card not listed has no capacity (pass
``memory_bytes``)."""

SWEEP_COLUMNS = ("batch_size", "dtype", "predicted_latency_ms", "predicted_device_ms",
                 "predicted_device_ms_low", "predicted_device_ms_high", "predicted_host_ms",
                 "predicted_throughput", "predicted_peak_bytes", "predicted_regime")
"""The sweep table's columns, in order."""

_OVERRIDES = {"batch_size": ColumnSpec("batch_size", "int", "batch", "none"),
              "dtype": ColumnSpec("dtype", "text", "dtype", "none")}
"""The sweep's two coordinates, shown as themselves (the registry knows neither)."""

_SEARCH_STEPS = 64
"""At most this many guesses past the largest batch swept for the largest batch that fits."""

_SHORT = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


class SweepInputError(ValueError):
    """The sweep cannot make the model's input at another batch size."""


@dataclass(frozen=True)
class PredictionSweep:
    """A model predicted over batch sizes and dtypes on one device.

    ``frame``: one row per ``(batch_size, dtype)`` (:data:`SWEEP_COLUMNS`): the predicted
    latency, device time (with its expected error band, ``predicted_device_ms_low`` and
    ``_high``) and host time of the pass (ms), ``predicted_throughput`` (items per second:
    the batch over the latency), ``predicted_peak_bytes`` (the pass's peak of live tensors,
    planned on the meta device) and ``predicted_regime`` (``host-bound`` / ``device-bound``)."""

    columns: ClassVar[tuple[ColumnSpec, ...]] = PASS_COLUMNS
    """The pass-level columns the sweep declares (the per-call ones are the prediction
    listener's)."""
    KEYS: ClassVar[dict[str, str]] = {
        "rows": "a sweep: one object a (batch_size, dtype), the columns of to_df()",
        "device_bound_from": "a sweep: by dtype, the smallest batch at which the pass is "
                             "device-bound (None: not within the batches searched)",
        "largest_batch": "a sweep: by dtype, the largest batch whose predicted peak fits "
                         "memory_bytes",
        "memory_bytes": "a sweep: the card's memory the predicted peaks were held against",
        "notes": "what a result says in words under its tables",
    }
    """The keys of :meth:`to_dict` that no other table of the glossary holds, with their
    meaning (docs/glossary.md lists them)."""
    frame: pd.DataFrame
    device: str
    """The device (and host) predicted for."""
    device_bound_from: dict[str, int | None]
    """By dtype: the smallest batch at which the pass is device-bound (``None``: not within
    the batches searched, or no host model; the notes give the bound)."""
    largest_batch: dict[str, int | None]
    """By dtype: the largest batch whose predicted peak fits ``memory_bytes`` (0: not even
    one; ``None``: the card's memory is unknown, or the search ended: the notes say)."""
    memory_bytes: int | None
    """The card's memory the peaks were held against."""
    notes: tuple[str, ...] = ()

    def view(self) -> View:
        """The table as a view (``print(sweep.view())``, ``.to_markdown()``, ...), the answers
        and notes under it."""
        return View(self.frame, SWEEP_COLUMNS, title=f"Predicted on {self.device}",
                    notes=(*self.answers(), *self.notes), overrides=_OVERRIDES,
                    keep=("batch_size", "dtype", "predicted_latency_ms"))

    def answers(self) -> tuple[str, ...]:
        """The two answers, one line per dtype each."""
        lines = []
        for dtype, batch in self.device_bound_from.items():
            if batch is not None:
                lines.append(f"{dtype}: device-bound from batch {batch}")
        for dtype, batch in self.largest_batch.items():
            if batch is not None and self.memory_bytes is not None:
                lines.append(f"{dtype}: largest batch that fits {self.memory_bytes / 2 ** 30:.1f}"
                             f" GiB: {batch}")
        return tuple(lines)

    def to_df(self) -> pd.DataFrame:
        """The table as a DataFrame, one row per ``(batch_size, dtype)`` (a copy of
        :attr:`frame`), as every result's ``to_df()``."""
        return self.frame.copy()

    def to_dict(self) -> dict[str, Any]:
        """Everything as plain Python (the rows as records, unknowns as ``None``)."""
        rows = self.frame.astype(object).where(self.frame.notna(), None).to_dict("records")
        return {"device": self.device, "rows": rows,
                "device_bound_from": self.device_bound_from,
                "largest_batch": self.largest_batch, "memory_bytes": self.memory_bytes,
                "notes": list(self.notes)}

    def to_json(self) -> str:
        """:meth:`to_dict` as JSON text."""
        return json.dumps(self.to_dict(), indent=2)

    def plot(self, *, path: str | os.PathLike[str] | None = None,
             title: str | None = None) -> Figure:
        """Latency, throughput and predicted peak memory against the batch size (log 2), one
        line per dtype; the card's memory as a line, each dtype's turning batch dotted.

        Raises:
            ImportError: matplotlib is not installed (the ``plot`` extra).
        """
        check_figure_path(path)
        width, height = FIGSIZE
        figure, first = figure_axes(None, (2.2 * width, 0.75 * height),
                                    feature="PredictionSweep.plot")
        figure.delaxes(first)
        axes = figure.subplots(1, 3)
        panels = (("predicted_latency_ms", "latency (ms)", 1.0),
                  ("predicted_throughput", "throughput (items/s)", 1.0),
                  ("predicted_peak_bytes", "peak memory (GiB)", 2.0 ** -30))
        for index, dtype in enumerate(dict.fromkeys(self.frame["dtype"])):
            rows = self.frame[self.frame["dtype"] == dtype].sort_values("batch_size")
            color = f"C{index}"
            for ax, (column, _, scale) in zip(axes, panels):
                known = rows[rows[column].notna()]
                ax.plot(known["batch_size"], known[column].astype(float) * scale, marker="o",
                        color=color, label=dtype)
                turn = self.device_bound_from.get(dtype)
                if turn is not None and column != "predicted_peak_bytes":
                    ax.axvline(turn, color=color, linestyle=":", linewidth=1)
        if self.memory_bytes is not None:
            axes[2].axhline(self.memory_bytes / 2 ** 30, color="0.4", linewidth=1,
                            label="card memory")
        batches = sorted(set(self.frame["batch_size"]))
        for ax, (_, label, _) in zip(axes, panels):
            ax.set_xscale("log", base=2)
            ax.set_xticks(batches, labels=[str(batch) for batch in batches])
            ax.set_xlabel("batch size")
            ax.set_ylabel(label)
        axes[2].set_yscale("log")  # the card's memory and a small model's peaks on one axis
        axes[0].legend(fontsize=8)
        axes[2].legend(fontsize=8)
        figure.suptitle(title or f"Predicted on {self.device} (dotted: device-bound from)",
                        fontsize=11)
        save_figure(figure, path)
        return figure


def batch_input(example: Any, batch: int) -> Any:
    """``example`` at batch size ``batch``: every tensor of it with a dimension as a meta tensor
    whose first dimension is ``batch`` (0-d tensors and other values kept).

    Raises:
        SweepInputError: no tensor has a dimension, or their first dimensions differ (which of
            them is the batch is then unknown: pass ``input_fn``).
    """
    tensors = [t for t in iter_tensors(example) if t.dim()]
    if not tensors:
        raise SweepInputError("input: no tensor with a batch dimension to resize; pass "
                              "input_fn=lambda batch: ... to build the input at each batch size")
    firsts = sorted({int(t.shape[0]) for t in tensors})
    if len(firsts) > 1:
        raise SweepInputError(f"input: its tensors' first dimensions differ ({firsts}), so "
                              "which is the batch is unknown; pass input_fn=lambda batch: ... "
                              "to build the input at each batch size")

    def resize(value: torch.Tensor) -> torch.Tensor:
        if value.dim():
            return torch.empty((batch, *value.shape[1:]), dtype=value.dtype, device="meta")
        return value
    return map_tensors(example, resize)



def _dtype_names(dtypes: Sequence[str | torch.dtype] | str | torch.dtype) -> list[str]:
    given = [dtypes] if isinstance(dtypes, (str, torch.dtype)) else list(dtypes)
    if not given:
        raise ValueError("dtypes: name at least one (\"bf16\", \"fp32\")")
    names = []
    for dtype in given:
        converted = dtype_of(dtype)  # raises ValueError naming the known ones
        if converted not in _SHORT:
            raise ValueError(f"dtypes: {dtype!r} is not a floating dtype a GPU computes in "
                             f"({', '.join(_SHORT.values())})")
        names.append(_SHORT[converted])
    return list(dict.fromkeys(names))


class _Sweeper:
    """The passes of one sweep: a prediction and a memory plan per ``(batch, dtype)``."""

    def __init__(self, predict: PredictFn, module: nn.Module, make: InputFn,
                 settings: dict[str, Any], backward: bool) -> None:
        self.predict, self.module, self.make = predict, module, make
        self.settings, self.backward = settings, backward
        self._models: dict[str, nn.Module] = {}

    def time(self, batch: int, dtype: str) -> PredictedProfile:
        with _hinted_on_meta():
            return self.predict(self.module, self.make(batch), dtype=dtype,
                                backward=self.backward, **self.settings)

    def peak_bytes(self, batch: int, dtype: str) -> int:
        """The pass's predicted peak of live tensors on a CUDA device, planned on meta."""
        if dtype not in self._models:
            self._models[dtype] = meta_copy(self.module, dtype_of(dtype))
        model = self._models[dtype]
        given = meta_input(self.make(batch), dtype_of(dtype))
        with _hinted_on_meta():
            materialise_lazy(model, given)
            return measure_memory(model, given, train=self.backward, device="meta",
                                  emulate="cuda", progress=False).peak_bytes


META_HINT = ("hint: a sweep runs the model on the meta device, where tensors have no values "
             "and some meta kernels refuse what a device runs: if the model runs on this "
             "input on a real device, it cannot be swept there; predict() it at each batch "
             "size with a real input (that prediction then runs a copy where the model is)")
"""Noted on an error of the meta device during a sweep. Conditional: a meta kernel's shape
check also refuses an input no device would take (a product of mismatched sizes)."""


@contextlib.contextmanager
def _hinted_on_meta() -> Iterator[None]:
    """Note :data:`META_HINT` on an exception that is the meta device's limit."""
    try:
        yield
    except Exception as exc:
        if meta_limit(exc):
            add_note(exc, META_HINT)
        raise


# outside the caller's inference mode, as predict(): under it the meta device's memory plan
# sees composite operators whole (a layer norm without the statistics its kernel writes)
@torch.inference_mode(False)
def sweep_predictions(predict: PredictFn, module: nn.Module, input: Any = None, *,
                      device: DeviceSpec = "H100 SXM",
                      batch_sizes: Iterable[int] | int = (1, 8, 64, 256),
                      dtypes: Sequence[str | torch.dtype] | str | torch.dtype = ("bf16", "fp32"),
                      input_fn: InputFn | None = None, host: HostSpec = DEFAULT_HOST,
                      backward: bool = False, tf32: bool | None = None,
                      memory_bytes: int | None = None) -> PredictionSweep:
    """``module`` predicted at every batch size and dtype on ``device``
    (:meth:`moduleprofiler.Profiler.sweep` is the front door; ``predict`` is its
    ``predict``).

    Args:
        input: an example input whose tensors' first dimension is the batch (resized on the
            meta device, :func:`batch_input`), or ``None`` with ``input_fn``.
        input_fn: ``batch -> input``, for inputs whose batch is not every tensor's first
            dimension.
        memory_bytes: the card's memory (default: :data:`DEVICE_MEMORY_MIB`'s for a card it
            lists; else the largest batch that fits is not searched).
        device, host, backward, tf32: as for ``predict``.

    Raises:
        SweepInputError: ``input`` cannot be resized (pass ``input_fn``).
        ValueError: a batch size is not a positive int, a dtype is unknown, or neither or
            both of ``input`` and ``input_fn`` are given.
    """
    check_module(module)
    if (input is None) == (input_fn is None):
        raise ValueError("pass input (an example whose first dimension is the batch) or "
                         "input_fn (batch -> input), one of them")
    if input_fn is not None:
        check_callable(input_fn, "input_fn", "a callable: batch -> input")
        make: InputFn = input_fn
    else:
        batch_input(input, 1)  # refuse an input that cannot be resized before any pass

        def make(batch: int) -> Any:
            return batch_input(input, batch)
    batches = sorted(set(check_sizes(batch_sizes, "batch_sizes")))
    names = _dtype_names(dtypes)
    if memory_bytes is not None and (isinstance(memory_bytes, bool)
                                     or not isinstance(memory_bytes, int) or memory_bytes < 1):
        raise ValueError(f"memory_bytes must be a positive int, got {memory_bytes!r}")
    card = resolve_device(device)[0].peaks.name
    notes: list[str] = []
    if memory_bytes is None and card in DEVICE_MEMORY_MIB:
        memory_bytes = DEVICE_MEMORY_MIB[card] * 2 ** 20
    elif memory_bytes is None:
        notes.append(f"the memory of {card} is not known: pass memory_bytes for the largest "
                     "batch that fits")
    sweeper = _Sweeper(predict, module, make, {"device": device, "host": host, "tf32": tf32},
                       backward)
    rows, regimes, peaks = [], {}, {}
    predicted_for = card
    for dtype in names:
        for batch in batches:
            profile = sweeper.time(batch, dtype)
            peak = sweeper.peak_bytes(batch, dtype)
            predicted_for = profile.predicted_for
            latency = profile.predicted_latency_ms
            rows.append({"batch_size": batch, "dtype": dtype, "predicted_latency_ms": latency,
                         "predicted_device_ms": profile.predicted_device_ms,
                         "predicted_device_ms_low": profile.predicted_device_ms_low,
                         "predicted_device_ms_high": profile.predicted_device_ms_high,
                         "predicted_host_ms": profile.predicted_host_ms,
                         "predicted_throughput": batch / (latency / 1e3) if latency else None,
                         "predicted_peak_bytes": peak,
                         "predicted_regime": profile.predicted_regime})
            regimes[(dtype, batch)] = profile.predicted_regime
            peaks[(dtype, batch)] = peak
            notes.extend(n for n in profile.prediction_notes if n not in notes)
    turning = {dtype: _turning_batch(sweeper, dtype, batches, regimes, notes) for dtype in names}
    largest = {dtype: _largest_batch(sweeper, dtype, batches, peaks, memory_bytes, notes)
               for dtype in names}
    if memory_bytes is not None:
        notes.append("predicted_peak_bytes counts the pass's tensors (parameters, inputs, "
                     "activations): the CUDA context (about 0.5 GiB), library workspaces and "
                     "the caching allocator's fragmentation come on top, so the largest batch "
                     "that fits is an upper bound")
    frame = pd.DataFrame(rows, columns=list(SWEEP_COLUMNS))
    for column in ("predicted_latency_ms", "predicted_device_ms_low", "predicted_device_ms_high",
                   "predicted_host_ms", "predicted_throughput"):
        frame[column] = frame[column].astype("float64")
    return PredictionSweep(frame, predicted_for, turning, largest, memory_bytes, tuple(notes))


def _turning_batch(sweeper: _Sweeper, dtype: str, batches: list[int],
                   regimes: dict[tuple[str, int], str | None], notes: list[str]) -> int | None:
    """The smallest batch at which the pass is device-bound: bisected between the last
    host-bound and the first device-bound batch swept (the regime assumed to change once)."""
    seen = [(batch, regimes[(dtype, batch)]) for batch in batches]
    if any(regime is None for _, regime in seen):
        return None  # no host model, or unknown device times: the prediction's notes say so
    first = next((batch for batch, regime in seen if regime == "device-bound"), None)
    if first is None:
        notes.append(f"{dtype}: host-bound at every batch swept (up to {batches[-1]}): "
                     "device-bound, if ever, above it")
        return None
    below = [batch for batch, regime in seen if regime == "host-bound" and batch < first]
    if below:
        low, high = below[-1], first
    elif first == 1 or sweeper.time(1, dtype).predicted_regime == "device-bound":
        return 1
    else:
        low, high = 1, first
    while high - low > 1:
        middle = (low + high) // 2
        if sweeper.time(middle, dtype).predicted_regime == "host-bound":
            low = middle
        else:
            high = middle
    return high


def _largest_batch(sweeper: _Sweeper, dtype: str, batches: list[int],
                   peaks: dict[tuple[str, int], int], memory: int | None,
                   notes: list[str]) -> int | None:
    """The largest batch whose predicted peak fits ``memory``: bracketed from the swept
    peaks (past the largest, extrapolated from the last two with a quarter to spare), then
    bisected with memory plans."""
    if memory is None:
        return None
    known = dict(sorted((batch, peak) for (kind, batch), peak in peaks.items() if kind == dtype))
    fits = [batch for batch, peak in known.items() if peak <= memory]
    low = fits[-1] if fits else 0
    high = next((batch for batch, peak in known.items() if peak > memory and batch > low), None)
    for _ in range(_SEARCH_STEPS):
        if high is not None:
            break
        sizes = [batch for batch in known if batch <= low][-2:]
        if len(sizes) == 2:
            slope = (known[sizes[1]] - known[sizes[0]]) / (sizes[1] - sizes[0])
            if slope <= 0:
                notes.append(f"{dtype}: the predicted peak does not grow with the batch (from "
                             f"{sizes[0]} to {sizes[1]}): the largest batch that fits is "
                             "unknown")
                return None
            guess = low + int(1.25 * (memory - known[low]) / slope) + 1
        else:
            guess = 2 * low
        known[guess] = sweeper.peak_bytes(guess, dtype)
        known = dict(sorted(known.items()))
        if known[guess] > memory:
            high = guess
        else:
            low = guess
    if high is None:
        notes.append(f"{dtype}: every batch up to {low} fits: the largest batch that fits "
                     "was not found")
        return None
    while high - low > 1:
        middle = (low + high) // 2
        if sweeper.peak_bytes(middle, dtype) > memory:
            high = middle
        else:
            low = middle
    if low == 0:
        notes.append(f"{dtype}: not even batch 1 fits the card's memory")
    return low
