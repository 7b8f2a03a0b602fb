"""Device time of one operator from a calibration: the measured shapes nearest to it, each
scaled by the ratio of the two shapes' roofline times.

For an operator with work ``roof`` (``max(flops / peak, bytes / bandwidth)`` on the device's
datasheet peaks) the prediction is the weighted geometric mean, over the ``k`` nearest
measured shapes of its table (distance in the table's log2 features), of
``us_i * (roof + floor) / (roof_i + floor)``, where ``floor`` is the table's fastest
measurement: a large operator runs at its neighbours' achieved fraction of the peak (wave
quantisation and tile occupancy are in the neighbours' times), a tiny one takes about as long as
its tiny neighbours (launch-bound kernels do not get faster with less work).

A memory-bound operator is never priced faster than its table's rows of at least
:data:`DRAM_BYTES` run, at their achieved fraction of the bandwidth: the calibration times
each shape by running it again and again on the same operands, so its rows of 8 to 50 MB run
out of the L2 cache (on an H200 a 12 MB addition at 5.4 TB/s, above the 4.8 TB/s of its
memory), while a model's operators read what earlier ones wrote and write what later ones
read, through the device's memory.

A device measured by :func:`~moduleprofiler.prediction.calibrate` uses its own tables; a
device with datasheet peaks only uses a reference calibration's achieved fractions on its own
peaks (``transferred``), which is what the prediction's notes then say.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from moduleprofiler.efficiency.peaks import DevicePeaks
from moduleprofiler.prediction.backward_classes import (
    FALLBACK,
    GEMM_LAYOUT_TABLES,
    ChannelWork,
    layout_gemm_features,
)
from moduleprofiler.prediction.calibration import Calibration
from moduleprofiler.prediction.op_classes import (
    DEFAULT_WIDTH,
    GEMM_TABLES,
    WIDTH_TABLES,
    OpWork,
    attention_features,
    bmm_features,
    conv_features,
    gemm_features,
    grouped_gemm_features,
    tiled_sequence,
)

NEIGHBOURS = 4

DRAM_BYTES = 2 ** 28
"""Rows of a memory-bound table that move at least this many bytes (256 MiB, beyond the L2
cache of every GPU the package knows) time the device's memory, not its cache."""


@dataclass
class _Table:
    features: NDArray[np.float64]
    us: NDArray[np.float64]
    roof_us: NDArray[np.float64]
    floor_us: float
    dram_fraction: float | None = None
    """A memory-bound table's achieved fraction of the roofline on its rows of at least
    :data:`DRAM_BYTES` (the fastest of them); ``None``: not memory-bound, or no such rows."""
    dram_rows: tuple[int, ...] = ()
    """The indices of those rows (a row held out of the table gives no floor)."""


LINEAR_TABLES = GEMM_TABLES - {"gemm"}
"""The tables of ``nn.Linear``'s and ``addmm``'s products with a weight read from memory,
timed apart from the plain ``gemm`` (their rows have its format)."""

_FALLBACK = {"mem_batch_norm_2d": "mem_unary", "gemm_nt": "gemm", "gemm_bias_nt": "gemm",
             "gemm_bias": "gemm",
             "mem_broadcast": "mem_binary",
             "mem_strided": "mem_binary", "mem_permute_copy": "mem_copy",
             "mem_convert": "mem_copy", "mem_strided_cat": "mem_cat",
             "mem_strided_inner_cat": "mem_cat", "mem_roll": "mem_unary",
             "mem_sort": "mem_unary", "mem_topk": "mem_unary", "grouped_gemm": "gemm_nt",
             **FALLBACK}
"""A table an older calibration lacks, and the one to use instead."""

MATMUL_TABLES = frozenset({"gemm", "bmm", "grouped_gemm"}) | LINEAR_TABLES | GEMM_LAYOUT_TABLES
"""Tables of fp32 work that TF32 runs on tensor cores as the matmul precision says
(``torch.backends.cuda.matmul.fp32_precision``)."""
CONV_TABLES = frozenset({"conv", "conv_backward"})
"""Tables of fp32 work that TF32 runs on tensor cores as cuDNN's setting says
(``torch.backends.cudnn.conv.fp32_precision``)."""
_COMPUTE_TABLES = MATMUL_TABLES | CONV_TABLES | {"attention", "attention_backward"}
"""Tables whose fp32 rows :func:`~moduleprofiler.prediction.calibrate` measured in TF32 (it
turns TF32 on for matmuls and convolutions); fused attention's fp32 kernels are taken as
measured whatever the settings."""


IEEE = "_ieee"
"""Suffix of an fp32 matrix-product table measured with TF32 off (``gemm_ieee``...: the kernels
PyTorch runs by default, ``torch.backends.cuda.matmul.allow_tf32`` being ``False``): its rows
have the format of the table without it."""

_ELEMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


def _row_work(table: str, row: list[float],
              size: int) -> tuple[tuple[float, ...], float, float]:
    """Features, FLOPs and bytes of one calibration row (the last entry, µs, excluded) of
    elements of ``size`` bytes."""
    log2 = np.log2
    if table in GEMM_LAYOUT_TABLES:
        m, n, k = row[:3]
        return (layout_gemm_features(m, n, k, size, table.removeprefix("gemm_grad_")),
                2 * m * n * k, size * (m * k + k * n + m * n))
    if table == "gemm" or table in LINEAR_TABLES:
        m, n, k = row[:3]
        return gemm_features(m, n, k, size), 2 * m * n * k, size * (m * k + k * n + m * n)
    if table == "grouped_gemm":  # every expert's rows: one expert's shape, all the work
        experts, m, n, k = row[:4]
        return (grouped_gemm_features(experts, experts * m, n, k, size),
                2 * experts * m * n * k, size * experts * (m * k + k * n + m * n))
    if table == "bmm":
        b, m, n, k = row[:4]
        return (bmm_features(b, m, n, k, size), 2 * b * m * n * k,
                size * b * (m * k + k * n + m * n))
    if table in ("conv", "conv_backward"):
        n, cin, cout, h, kernel, stride, groups = (int(v) for v in row[:7])
        channels_last = len(row) > 8 and bool(row[7])
        out = max(1, h // stride)
        flops = 2.0 * n * out * out * cout * (cin // groups) * kernel * kernel
        nbytes = size * (n * cin * h * h + cout * (cin // groups) * kernel ** 2
                        + n * cout * out * out)
        factor = 2.0 if table == "conv_backward" else 1.0
        return (conv_features(n, cin, cout, h, kernel, stride, groups, channels_last),
                factor * flops, factor * nbytes)
    if table in ("attention", "attention_backward"):
        b, h, s, d, causal = (int(v) for v in row[:5])
        factor = 2.5 if table == "attention_backward" else 1.0
        tiled = tiled_sequence(s, table, "fp32" if size == 4 else "bf16")
        return (attention_features(b * h, tiled, d, bool(causal)),
                factor * 4.0 * b * h * tiled * tiled * d,
                factor * 4.0 * b * h * s * d * size)
    if table in WIDTH_TABLES:  # [bytes, us] rows are the main grid's, 1024 wide
        width = row[1] if len(row) > 2 else DEFAULT_WIDTH
        return (log2(max(row[0], 1.0)), log2(max(width, 1.0))), 0.0, row[0]
    return (log2(max(row[0], 1.0)),), 0.0, row[0]


_KERNEL_CHOICE = {**{name: ("row widths", DEFAULT_WIDTH) for name in WIDTH_TABLES},
                  "grouped_gemm": ("products over several experts", 1.0),
                  "conv": ("channels-last layouts", 0.0),
                  "conv_backward": ("channels-last layouts", 0.0)}
"""Tables whose last feature says which kernel runs (a row's width, a channels-last layout),
what it is, and its value in the rows of a calibration that did not measure it
(:mod:`.calibrate_kernels`): such a table predicts without the feature."""


def _dram_fraction(rows: tuple[int, ...], roofs: NDArray[np.float64], us: NDArray[np.float64],
                   exclude: int | None = None) -> float | None:
    """:attr:`_Table.dram_fraction` from those rows' roofs and times (``exclude``: a row
    left out)."""
    fractions = [roofs[i] / us[i] for i in rows if i != exclude]
    return max(fractions) if fractions else None


@dataclass
class DeviceModel:
    """Predicts device microseconds per operator for one device."""

    calibration: Calibration
    """The measured tables (the device's own, or a reference device's)."""
    peaks: DevicePeaks
    """The device's datasheet peaks: the roofline the tables' ratios apply to."""
    reference_peaks: DevicePeaks
    """The peaks of the device the calibration measured."""
    matmul_tf32: bool = True
    """fp32 matmuls (:data:`MATMUL_TABLES`) run in TF32: at the TF32 tensor-core peak, as
    calibrated; else at the plain FP32 peak."""
    conv_tf32: bool = True
    """fp32 convolutions (:data:`CONV_TABLES`) run in TF32; else at the plain FP32 peak."""
    donor: DeviceModel | None = None
    """Another device's model whose tables stand in for those this calibration lacks (its
    achieved fractions of the peak, applied to this device's peaks); ``None``: the tables of
    :data:`_FALLBACK` stand in."""
    borrowed: set[str] = field(default_factory=set)
    """The tables taken from :attr:`donor` so far."""
    unmeasured: set[str] = field(default_factory=set)
    """What the calibration's tables did not measure and operators priced so far asked for
    (``"mem_layer_norm row widths"``): those were priced as the measured kernels."""
    stood_in: set[str] = field(default_factory=set)
    """Dtypes the calibration has no tables of that operators asked for, priced from its
    stand-in's (``fp16`` from ``bf16``, any other from ``fp32``)."""
    no_peak: set[str] = field(default_factory=set)
    """Rates operators asked for that this device's datasheet gives no peak of (``bf16`` on
    Volta and Turing, which have no bf16 tensor cores): priced at its plain FP32 peak."""
    without_in_chain: bool = False
    """A memory-bound operator was priced while the calibration holds no in-chain costs
    (:attr:`Calibration.in_chain`): priced as the calibration's loops ran it."""
    _tables: dict[tuple[str, str], _Table | None] = field(default_factory=dict, repr=False)
    _cache: dict[tuple[str, str, tuple[float, ...], float, float], float] = field(
        default_factory=dict, repr=False)

    @property
    def transferred(self) -> bool:
        """Whether the tables come from another device (scaled by the peaks)."""
        return self.peaks.name != self.reference_peaks.name

    def tf32(self, table: str) -> bool:
        """Whether fp32 work of ``table`` runs on TF32 tensor cores on this device."""
        if table in MATMUL_TABLES:
            return self.matmul_tf32
        if table in CONV_TABLES:
            return self.conv_tf32
        return table in _COMPUTE_TABLES

    @staticmethod
    def _rate(peaks: DevicePeaks, dtype: str, tf32: bool) -> tuple[float, float]:
        """(FLOP/s, bytes/s) of ``peaks`` in ``dtype`` (fp32 at the TF32 rate with ``tf32``)."""
        name = "tf32" if dtype == "fp32" and tf32 else dtype
        flops = peaks.flops_per_s(name) or peaks.flops_per_s("fp32") or 1e12
        return flops, peaks.bytes_per_s

    @classmethod
    def roof_us(cls, peaks: DevicePeaks, dtype: str, flops: float, nbytes: float,
                tf32: bool) -> float:
        """The roofline time ``max(flops / peak, bytes / bandwidth)`` on ``peaks``, µs."""
        flop_rate, byte_rate = cls._rate(peaks, dtype, tf32)
        return max(flops / flop_rate, nbytes / byte_rate) * 1e6

    def _rows(self, table: str, dtype: str, fallback: bool) -> tuple[str, list[list[float]]]:
        """The calibration's rows of ``table`` in ``dtype`` (with ``fallback``: those of the
        table an older calibration has instead, :data:`_FALLBACK`), after the name of the
        table they are (their format)."""
        tables = self.calibration.tables
        source = tables.get(dtype)
        if not source:
            source = tables.get("bf16" if dtype == "fp16" else "fp32") or {}
            self.stood_in.add(dtype)
        measured = table if source.get(table) or not fallback else _FALLBACK.get(table, "")
        rows = source.get(measured)
        return measured, [row for row in rows or () if row[-1] > 0]  # no kernel: no lesson

    def measured_as(self, table: str, dtype: str) -> str:
        """The table that prices ``table``'s work in ``dtype``: for fp32 matrix products with
        TF32 off, the rows measured so (:data:`IEEE`; those of the table standing in for it
        in an older calibration, :data:`_FALLBACK`) where the calibration has them."""
        if dtype == "fp32" and table in MATMUL_TABLES and not self.matmul_tf32:
            fp32 = self.calibration.tables.get("fp32", {})
            for candidate in (table, _FALLBACK.get(table)):
                if candidate and fp32.get(candidate + IEEE):
                    return candidate + IEEE
        return table

    def table(self, table: str, dtype: str) -> _Table | None:
        """The measured rows of ``table`` in ``dtype`` with their features and roofline
        times (``None``: the calibration has none)."""
        key = (table, dtype)
        if key not in self._tables:
            measured, rows = self._rows(table, dtype, fallback=False)
            if not rows and self.donor is not None and \
                    self.donor._rows(table, dtype, fallback=False)[1]:
                # the donor's rows with the donor's roofs: its achieved fractions, applied
                # to this device's peaks by op_us
                self._tables[key] = self.donor.table(table, dtype)
                self.borrowed.add(table)
                return self._tables[key]
            if not rows:
                measured, rows = self._rows(table, dtype, fallback=True)
            if not rows:
                self._tables[key] = None
            else:
                size = _ELEMENT_BYTES.get(dtype, 4)
                form = measured.removesuffix(IEEE)  # the rows' format
                works = [_row_work(form, row, size) for row in rows]
                # the rows' roofs as they were measured: fp32 compute in TF32, unless the
                # table says it ran without
                roofs = [self.roof_us(self.reference_peaks, dtype, f, b,
                                      table in _COMPUTE_TABLES) for _, f, b in works]
                us = np.array([row[-1] for row in rows], dtype=np.float64)
                features = np.array([w[0] for w in works], dtype=np.float64)
                if form in _KERNEL_CHOICE and np.ptp(features[:, -1]) == 0:
                    # every row has one kernel choice (the calibration never measured
                    # another): the table predicts without that feature
                    features = features[:, :-1]
                # a memory-bound table's rows that time the device's memory (_Table.dram_rows)
                dram = tuple(i for i, (_, _, nbytes) in enumerate(works)
                             if form.startswith("mem_") and nbytes >= DRAM_BYTES)
                self._tables[key] = _Table(features, us, np.array(roofs), float(us.min()),
                                           _dram_fraction(dram, np.array(roofs), us), dram)
        return self._tables[key]

    def op_us(self, work: OpWork) -> float | None:
        """Predicted device microseconds of ``work`` (0 for an operator that launches
        nothing; ``None`` when the calibration has no table for it)."""
        if work.prelude is not None:  # its own kernel first, priced by the prelude's table
            first = self.op_us(work.prelude)
            rest = self.op_us(dataclasses.replace(work, prelude=None))
            return None if first is None or rest is None else first + rest
        if isinstance(work, ChannelWork):
            work = work.spread_over(self.calibration.sms)
        if work.table is None:
            return 0.0
        key = (work.table, work.dtype, work.features, work.flops, work.moved_bytes)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        measured = self.measured_as(work.table, work.dtype)
        table = self.table(measured, work.dtype)
        if table is None:
            return None
        # plain fp32 on a TF32-measured row (a calibration without the IEEE rows): its
        # achieved fraction of the peak, on the FP32 peak
        tf32 = self.tf32(work.table)
        rate = "tf32" if work.dtype == "fp32" and tf32 else work.dtype
        if work.flops and rate != "tf32" and self.peaks.flops_per_s(rate) is None:
            self.no_peak.add(rate)  # _rate falls back to the FP32 peak: said in the notes
        roof = self.roof_us(self.peaks, work.dtype, work.flops, work.moved_bytes, tf32)
        query = np.array(work.features, dtype=np.float64)
        if len(query) > table.features.shape[1]:  # a table without the kernel-choice feature
            what, default = _KERNEL_CHOICE[work.table]
            if query[-1] != (np.log2(default) if default else default):
                self.unmeasured.add(f"{work.table} {what}")
            query = query[: table.features.shape[1]]
        predicted = floored(table, query, roof) + self.in_chain_us(work.table, work.dtype)
        self._cache[key] = predicted
        return predicted

    def in_chain_us(self, table: str, dtype: str) -> float:
        """What a kernel of ``table`` takes inside a model beyond its table's loop
        (:attr:`Calibration.in_chain`; fp16 as bf16): 0 for a table it does not list."""
        if not table.startswith("mem_"):
            return 0.0
        costs = self.calibration.in_chain
        if not costs:
            self.without_in_chain = True
            return 0.0
        source = costs.get(dtype) or costs.get("bf16" if dtype == "fp16" else "fp32") or {}
        return source.get(table, 0.0)

    def error_band(self, work: OpWork) -> tuple[float, float] | None:
        """The factors by which the truth of ``work``'s predicted time is expected to lie
        (the 10th and 90th percentiles of measured over predicted time of its table's shapes
        held out of the calibration, :attr:`Calibration.held_out`); ``(1, 1)`` for an
        operator that launches nothing; ``None`` when the calibration holds no residuals for
        its table."""
        if work.table is None:
            return 1.0, 1.0
        if work.table in self.borrowed and self.donor is not None:
            return self.donor.error_band(work)
        held_out = self.calibration.held_out
        source = held_out.get(work.dtype) or held_out.get(
            "bf16" if work.dtype == "fp16" else "fp32") or {}
        row = source.get(self.measured_as(work.table, work.dtype)) or source.get(
            work.table) or source.get(_FALLBACK.get(work.table, ""))
        return (row[0], row[2]) if row else None


def floored(table: _Table, query: NDArray[np.float64], roof: float,
            exclude: int | None = None) -> float:
    """:func:`interpolate`, and a memory-bound operator no faster than the device's memory
    (the module docstring): the time :meth:`DeviceModel.op_us` prices ``query`` at, with
    ``exclude`` (a row left out) giving neither a neighbour nor the floor."""
    predicted = interpolate(table, query, roof, exclude)
    fraction = table.dram_fraction if exclude is None else _dram_fraction(
        table.dram_rows, table.roof_us, table.us, exclude)
    return max(predicted, roof / fraction) if fraction else predicted


def interpolate(table: _Table, query: NDArray[np.float64], roof: float,
                exclude: int | None = None) -> float:
    """The time of an operator at ``query`` (features) with roofline time ``roof``: the
    weighted geometric mean over the nearest rows of ``table`` of their times scaled by the
    ratio of roofline times (the module docstring); ``exclude``: a row left out (to predict
    it from the others)."""
    distance = np.sqrt(((table.features - query) ** 2).sum(axis=1))
    if exclude is not None:
        distance[exclude] = np.inf
    # rows at one distance (a query between grid points) are taken in row order, the same on
    # every CPU: numpy's default sort, and its logarithms, differ by the vector instructions
    # the CPU has (AVX-512 or not), which picked other neighbours among equals and moved a
    # ResNet-50's predicted device time by 0.3 %
    nearest = np.argsort(np.round(distance, 9), kind="stable")[:NEIGHBOURS]
    weights = 1.0 / (distance[nearest] ** 2 + 1e-3)
    floor = table.floor_us
    scaled = table.us[nearest] * (roof + floor) / (table.roof_us[nearest] + floor)
    return float(np.exp((weights * np.log(scaled)).sum() / weights.sum()))
