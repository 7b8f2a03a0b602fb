"""The measurements the prediction model reads: one :class:`Calibration` per device, saved as
JSON. The package ships the calibrations measured on the GPUs it was tested on
(``moduleprofiler/prediction/calibrations/``); :func:`~moduleprofiler.prediction.calibrate`
measures another."""

from __future__ import annotations

import functools
import json
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import Any

SHIPPED_PACKAGE = "moduleprofiler.prediction.calibrations"


@dataclass(frozen=True)
class HostCosts:
    """Host microseconds per call by operator class (:data:`.calibrate.HOST_BENCHES`), measured
    on the CPU named ``cpu`` while it drove a CUDA device; ``cpu_op`` is a tiny operator on CPU
    tensors on the same CPU (the ratio to it carries the costs to another CPU);
    ``module_call_depth`` what a module call costs more per level of nesting
    (:mod:`.host_calls`; absent in costs measured before it was: every call then costs
    ``module_call``)."""

    cpu: str
    us: dict[str, float]
    in_model: float | None = None
    """A launch inside a model's forward relative to the tight loops of ``us``, measured on
    synthetic stacks (:func:`~moduleprofiler.prediction.host_in_model.in_model_factor`);
    ``None`` in costs measured before it was (the host model then takes
    :data:`~moduleprofiler.prediction.host_model.IN_SITU_HOST_FACTOR`)."""
    us_by_dtype: dict[str, dict[str, float]] = field(default_factory=dict)
    """The launch classes' loops measured again on ``bf16`` / ``fp16`` tensors (``us`` is
    fp32's): a reduced-precision convolution, batch norm, matmul or attention costs the host
    more than an fp32 one (a batch norm at a model's shape 1.7 times on an H200's host). Empty
    in costs measured before the loops were measured by dtype: every dtype is then priced at
    fp32's costs."""

    def for_dtype(self, dtype: str) -> dict[str, float]:
        """The cost per class of a launch on ``dtype`` tensors (``fp32``, ``bf16``, ``fp16``):
        the loops measured in that dtype, fp32's for a class or dtype not measured."""
        measured = self.us_by_dtype.get(dtype)
        return {**self.us, **measured} if measured else self.us


@dataclass(frozen=True)
class Calibration:
    """Measured operator times of one device, by dtype and table.

    ``tables[dtype][table]`` is a list of rows; the last entry of a row is device microseconds:

    * ``gemm``: ``[m, n, k, us]`` for ``(m x k) @ (k x n)``; ``bmm``: ``[batch, m, n, k, us]``;
    * ``conv`` / ``conv_backward``: ``[batch, in, out, side, kernel, stride, groups, us]``;
    * ``attention`` / ``attention_backward``: ``[batch, heads, seq, head_dim, causal, us]``;
    * ``mem_<kind>``: ``[bytes moved, us]`` (:data:`.calibrate.MEMORY_KINDS`);
    * the training step's (:mod:`.calibrate_backward`): ``gemm_grad_nn`` / ``gemm_grad_nt`` /
      ``gemm_grad_tn``: ``[m, n, k, us]`` with an operand stored transposed, and ``mem_<kind>``
      for :data:`.calibrate_backward.BACKWARD_MEMORY_KINDS`.
    """

    name: str
    """The peak-table name (``"H100 SXM"``) or the device's own name."""
    device_name: str
    sms: int
    torch_version: str
    created: str
    tables: dict[str, dict[str, list[list[float]]]]
    host: HostCosts | None = None
    quick: bool = False
    notes: tuple[str, ...] = field(default=())
    held_out: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    """How far the model is from this device's own measurements, by dtype and table:
    ``[p10, p50, p90, rows]`` of measured over predicted time of each row predicted from the
    table's other rows (:func:`~moduleprofiler.prediction.residuals.held_out_residuals`); the
    error band of every prediction from this calibration. Empty in a calibration made before
    it was kept."""
    in_chain: dict[str, dict[str, float]] = field(default_factory=dict)
    """By dtype and memory-bound table: the µs a kernel takes inside a chain of other kernels
    beyond what its table's loop of it alone measured (:mod:`.in_chain`), added to every such
    operator's time. Empty in a calibration that did not measure it: such kernels are then
    priced as in the loops."""

    def to_json(self) -> str:
        """The calibration as JSON text."""
        return json.dumps(asdict(self), separators=(",", ":"))

    def save(self, path: str | Path) -> None:
        """Write the calibration to ``path`` (JSON)."""
        Path(path).write_text(self.to_json(), encoding="utf-8")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Calibration:
        """A calibration from the dict its JSON holds."""
        host = data.get("host")
        return cls(**{**data, "host": HostCosts(**host) if host else None,
                      "notes": tuple(data.get("notes", ()))})

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        """Read a calibration :meth:`save` wrote.

        Raises:
            OSError: the file cannot be read.
            ValueError: it is not JSON, or not a calibration (naming the file and what it
                lacks).
        """
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise ValueError(f"calibration {str(path)!r} is not JSON: {exc}") from exc
        needed = [f.name for f in fields(cls) if f.default is MISSING
                  and f.default_factory is MISSING]
        missing = [name for name in needed if not isinstance(data, dict) or name not in data]
        if missing:
            raise ValueError(f"calibration {str(path)!r} is not one that Calibration.save() "
                             f"wrote (calibrate() makes them): it has no {', '.join(missing)}")
        return cls.from_dict(data)


def common_rows(a: Calibration, b: Calibration) -> tuple[Calibration, Calibration]:
    """``a`` and ``b`` keeping only the tables both have, and in each only the rows both
    measured (the same shape), and the in-chain costs both measured. Moving a measured time
    from one device to the other by the ratio of their predictions compares like with like
    this way: a table or a shape measured on one card only would move its prediction and not
    the other's (the other prices that work from a neighbouring shape, or a stand-in table on
    its datasheet peaks). The same objects where the tables already match."""

    def kept(own: Calibration, other: Calibration) -> Calibration:
        tables: dict[str, dict[str, list[list[float]]]] = {}
        changed = False
        for dtype, kinds in own.tables.items():
            tables[dtype] = {}
            for kind, rows in kinds.items():
                theirs = other.tables.get(dtype, {}).get(kind)
                if theirs is None:  # measured here only: both price it by its stand-in
                    changed = True
                    continue
                shapes = {tuple(row[:-1]) for row in theirs}
                common = [row for row in rows if tuple(row[:-1]) in shapes]
                changed = changed or len(common) != len(rows)
                tables[dtype][kind] = common or rows  # no common row: the table as it is
        # in-chain costs only where both measured them, as the tables
        in_chain = {dtype: common_costs for dtype, costs in own.in_chain.items()
                    if (common_costs := {table: us for table, us in costs.items()
                                         if table in other.in_chain.get(dtype, {})})}
        changed = changed or in_chain != own.in_chain
        return replace(own, tables=tables, in_chain=in_chain) if changed else own

    return kept(a, b), kept(b, a)


@functools.cache
def shipped_calibrations() -> dict[str, Calibration]:
    """The calibrations shipped with the package, by device name (``"H100 SXM"``); read once
    per process (treat them as read-only)."""
    found: dict[str, Calibration] = {}
    for entry in resources.files(SHIPPED_PACKAGE).iterdir():
        if entry.name.endswith(".json"):
            calibration = Calibration.from_dict(json.loads(entry.read_text(encoding="utf-8")))
            found[calibration.name] = calibration
    return found
