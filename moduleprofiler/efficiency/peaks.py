"""Device peaks: throughput by dtype and memory bandwidth, from vendor datasheets.

Every number of :data:`DEVICE_PEAKS` comes from the datasheet named in its ``source`` (the docs
page ``docs/efficiency.md`` lists them with their links). Dense figures are the datasheets'
figures without sparsity; sparse figures are 2:4 structured sparsity (twice the dense rate,
tensor-core dtypes only). ``fp64`` is the FP64 tensor-core (or matrix) rate where there is one,
``fp32`` the plain FP32 (CUDA-core / vector) rate, ``tf32`` the rate of FP32 matmuls run on
tensor cores. ``None`` is a rate the datasheet does not give (never 0).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from moduleprofiler.devices import cuda_available, device_name
from moduleprofiler.efficiency.device_names import (  # the one lookup of a device's name
    AmbiguousDeviceError as AmbiguousDeviceError,
)
from moduleprofiler.efficiency.device_names import UnknownDeviceError as UnknownDeviceError
from moduleprofiler.efficiency.device_names import match_device as match_device
from moduleprofiler.efficiency.device_names import matching_devices as matching_devices
from moduleprofiler.efficiency.device_names import table_name
from moduleprofiler.shapes import dtype_named
from moduleprofiler.validate import check_real

DTYPES: tuple[str, ...] = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")
"""The dtype names of the peak tables."""

_TORCH_DTYPES: dict[str, str] = {
    "float64": "fp64", "float32": "fp32", "bfloat16": "bf16", "float16": "fp16",
    "float8_e4m3fn": "fp8", "float8_e5m2": "fp8", "float8_e4m3fnuz": "fp8",
    "float8_e5m2fnuz": "fp8", "int8": "int8",
}


def peak_dtype(dtype: str | torch.dtype) -> str | None:
    """The peak-table name (``"bf16"``...) of a torch dtype or dtype name (``None``: no peak,
    e.g. ``int64`` or ``bool``). Table names are returned unchanged."""
    name = str(dtype).removeprefix("torch.")
    return name if name in DTYPES else _TORCH_DTYPES.get(name)


def dtype_argument(dtype: str | torch.dtype | None) -> str | None:
    """A ``dtype=`` argument as its peak-table name (``None`` stays ``None``); a ValueError
    when it has no peak."""
    name = None if dtype is None else peak_dtype(dtype)
    if dtype is not None and name is None:
        raise ValueError(f"dtype {dtype!r} has no peak; use one of {', '.join(DTYPES)}")
    return name


@dataclass(frozen=True)
class DevicePeaks:
    """Peak rates of one device.

    Build one for a device that is not in the table, or pass overrides to
    :func:`device_peaks`; :func:`~moduleprofiler.efficiency.measure_peaks` measures one.
    """

    name: str
    dense_tflops: Mapping[str, float | None]
    """Dense peak by dtype (:data:`DTYPES`), in TFLOP/s (TOP/s for int8)."""
    bandwidth_gbs: float
    """Peak memory bandwidth, GB/s (10**9 bytes per second)."""
    sparse_tflops: Mapping[str, float | None] = field(default_factory=dict)
    """2:4 structured-sparsity peak by dtype, TFLOP/s."""
    launch_us: float = 4.0
    """Fixed cost of one operator launch (the overhead roof), µs."""
    source: str = ""
    """Where the numbers come from (a datasheet, or ``"measured"``)."""

    def __post_init__(self) -> None:
        for table in (self.dense_tflops, self.sparse_tflops):
            unknown = set(table) - set(DTYPES)
            if unknown:
                raise ValueError(f"peaks of {self.name!r}: unknown dtype(s) {sorted(unknown)}; "
                                 f"use {', '.join(DTYPES)}")
            for dtype, value in table.items():
                check_real(value, f"peaks of {self.name!r}: {dtype}", optional=True)
                if value is not None and not value > 0:
                    raise ValueError(f"peaks of {self.name!r}: {dtype} must be positive or "
                                     f"None, got {value!r}")
        check_real(self.bandwidth_gbs, f"peaks of {self.name!r}: bandwidth_gbs")
        check_real(self.launch_us, f"peaks of {self.name!r}: launch_us")
        if not self.bandwidth_gbs > 0 or not self.launch_us >= 0:
            raise ValueError(f"peaks of {self.name!r}: bandwidth_gbs must be positive and "
                             "launch_us not negative")

    def flops_per_s(self, dtype: str | torch.dtype, sparse: bool = False) -> float | None:
        """Peak FLOP/s for ``dtype`` (a torch dtype, its name or a table name; ``None`` where
        the device has no peak for it, or the dtype none at all, ``int64`` or ``bool``).

        Raises:
            ValueError: ``dtype`` is a name of no dtype (a misspelling).
        """
        name = peak_dtype(dtype)
        if name is None and isinstance(dtype, str) and dtype_named(dtype) is None:
            raise ValueError(f"dtype {dtype!r} is no dtype; use a torch dtype or one of "
                             f"{', '.join(DTYPES)}")
        value = (self.sparse_tflops if sparse else self.dense_tflops).get(name) \
            if name is not None else None
        return None if value is None else value * 1e12

    @property
    def bytes_per_s(self) -> float:
        """Peak memory bandwidth in bytes per second."""
        return self.bandwidth_gbs * 1e9


def _nvidia(name: str, fp64: float | None, fp32: float, tf32: float | None, half: float,
            fp8: float | None, int8: float | None, bandwidth: float, source: str, *,
            bf16: bool = True) -> DevicePeaks:
    """A datasheet entry given its dense rates (``half``: fp16 and, with ``bf16``, bf16 on
    tensor cores with FP32 accumulation, as PyTorch's matmuls run); sparse = 2 x dense on
    tensor-core dtypes (Volta and Turing have no bf16 and no sparse tensor cores)."""
    dense = {"fp64": fp64, "fp32": fp32, "tf32": tf32, "bf16": half if bf16 else None,
             "fp16": half, "fp8": fp8, "int8": int8}
    sparse = {k: None if v is None else 2 * v for k, v in dense.items()
              if k not in ("fp64", "fp32")} if bf16 else {}
    return DevicePeaks(name, dense, bandwidth, sparse, source=source)


_H100 = "NVIDIA H100 Tensor Core GPU datasheet"
_A100 = "NVIDIA A100 Tensor Core GPU datasheet"
_V100 = "NVIDIA V100 Tensor Core GPU datasheet"
_GA102 = "NVIDIA Ampere GA102 GPU architecture whitepaper"
DEVICE_PEAKS: dict[str, DevicePeaks] = {peaks.name: peaks for peaks in (
    _nvidia("H100 SXM", 67, 67, 494.7, 989.4, 1978.9, 1978.9, 3350, _H100),
    _nvidia("H100 PCIe", 51, 51, 378, 756.5, 1513, 1513, 2000, _H100),
    _nvidia("H100 NVL", 60, 60, 417.5, 835.5, 1670.5, 1670.5, 3900, _H100),
    _nvidia("H200", 67, 67, 494.7, 989.4, 1978.9, 1978.9, 4800,
            "NVIDIA H200 Tensor Core GPU datasheet (SXM)"),
    _nvidia("B200", 37, 75, 1125, 2250, 4500, 4500, 8000,
            "NVIDIA HGX B200 specifications, 8-GPU figures / 8"),
    _nvidia("A100 40GB", 19.5, 19.5, 156, 312, None, 624, 1555, _A100),
    _nvidia("A100 80GB SXM", 19.5, 19.5, 156, 312, None, 624, 2039, _A100),
    _nvidia("A100 80GB PCIe", 19.5, 19.5, 156, 312, None, 624, 1935, _A100),
    _nvidia("L40S", None, 91.6, 183, 362.05, 733, 733, 864, "NVIDIA L40S datasheet"),
    _nvidia("L4", None, 30.3, 60, 121, 242.5, 242.5, 300, "NVIDIA L4 datasheet"),
    _nvidia("A10", None, 31.2, 62.5, 125, None, 250, 600, "NVIDIA A10 datasheet"),
    _nvidia("V100 SXM2", 7.8, 15.7, None, 125, None, None, 900, _V100, bf16=False),
    _nvidia("V100 PCIe", 7, 14, None, 112, None, None, 900, _V100, bf16=False),
    _nvidia("T4", None, 8.1, None, 65, None, 130, 320, "NVIDIA T4 datasheet", bf16=False),
    _nvidia("RTX A6000", None, 38.7, 77.4, 154.8, None, 309.7, 768, _GA102),
    _nvidia("RTX 3090", None, 35.6, 35.6, 71, None, 284, 936, _GA102),
    _nvidia("RTX 4090", None, 82.6, 82.6, 165.2, 330.3, 660.6, 1008,
            "NVIDIA Ada GPU architecture whitepaper, GeForce RTX 4090"),
    _nvidia("MI300X", 163.4, 163.4, 653.7, 1307.4, 2614.9, 2614.9, 5300,
            "AMD Instinct MI300X datasheet"),
)}
"""Datasheet peaks by table name (see ``docs/efficiency.md`` for the sources)."""

def device_peaks(device: str | int | torch.device | DevicePeaks | None = None,
                 **overrides: Any) -> DevicePeaks:
    """The peaks of ``device``: a table name (``"H100 SXM"``), a device name as CUDA reports it,
    a CUDA ``torch.device`` or index (its name read from ``torch.cuda.get_device_properties``),
    ``None`` for the current CUDA device, or a :class:`DevicePeaks` given as is.

    ``overrides`` replace fields (``bandwidth_gbs=3000``, ``launch_us=6``); ``dense_tflops`` and
    ``sparse_tflops`` given as dicts are merged into a copy of the table's
    (``dense_tflops={"bf16": 800}`` changes bf16 only).

    A name must name one card (:mod:`~moduleprofiler.efficiency.device_names`): ``"H100
    80GB HBM3"`` is the H100 SXM, ``"H200 XYZ"`` no card at all.

    Raises:
        UnknownDeviceError: a ``ValueError``: the device is not in the table (the message
            lists the close names; measure it with
            :func:`~moduleprofiler.efficiency.measure_peaks` or build a :class:`DevicePeaks`).
        AmbiguousDeviceError: a ``ValueError``: the name fits several cards of the table
            (``"H100"``: SXM, PCIe or NVL) and does not say which.
        ValueError: an override names no field.
        RuntimeError: ``device`` is ``None`` or a CUDA device and CUDA is not available.
    """
    if isinstance(device, DevicePeaks):
        peaks = device
    else:
        name = device if isinstance(device, str) and not device.startswith("cuda") \
            else _cuda_name(device)
        peaks = DEVICE_PEAKS[table_name(name)]
    fields = {f.name for f in dataclasses.fields(DevicePeaks)}
    unknown = set(overrides) - fields
    if unknown:
        raise ValueError(f"device_peaks: no field(s) {sorted(unknown)}; fields are "
                         f"{', '.join(sorted(fields))}")
    for table in ("dense_tflops", "sparse_tflops"):
        if table in overrides:
            overrides[table] = {**getattr(peaks, table), **overrides[table]}
    return dataclasses.replace(peaks, **overrides) if overrides else peaks


def _cuda_name(device: str | int | torch.device | None) -> str:
    if not cuda_available():
        raise RuntimeError("device_peaks() without a table name reads the CUDA device's name, "
                           "but CUDA is not available: pass a table name such as 'H100 SXM'")
    if device is None or isinstance(device, int):
        return device_name(None if device is None else torch.device("cuda", device))
    return device_name(torch.device(device))
