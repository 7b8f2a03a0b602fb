"""The prediction's columns: the per-call ones the prediction listener declares
(:data:`CALL_COLUMNS`, ``PredictionListener.columns``) and the pass-level ones the sweep
declares (:data:`PASS_COLUMNS`, ``PredictionSweep.columns``)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from moduleprofiler.export.columns import ColumnSpec, Derived, inclusive_of, register_column


def _bound(prefix: str) -> Derived:
    device, host = f"predicted_{prefix}device_ms", f"predicted_{prefix}host_ms"

    def derive(calls: pd.DataFrame) -> list[Any]:
        if host not in calls:
            return [None] * len(calls)
        return [None if pd.isna(d) or pd.isna(h) else "host" if h > d else "device"
                for d, h in zip(calls[device], calls[host])]
    return Derived((device, host), derive)


def _phase_columns(prefix: str, phase: str) -> list[ColumnSpec]:
    """Register the per-call columns of one phase (``prefix`` ``""`` or ``"backward_"``)."""
    specs = []
    for what in ("device", "host"):
        specs.append(register_column(
            f"self_predicted_{prefix}{what}_ms", "time", f"{phase}self predicted {what}",
            aggregation="sum", unit="ms", needs="run predict() first",
            description=f"predicted {phase}{what} time of the call's own operators"))
        specs.append(register_column(
            f"predicted_{prefix}{what}_ms", "time", f"{phase}predicted {what}",
            aggregation="inclusive", unit="ms", needs="run predict() first",
            derive=inclusive_of(f"self_predicted_{prefix}{what}_ms"),
            description=f"predicted {phase}{what} time of the call and everything it called"))
    for end, percentile in (("low", "10th"), ("high", "90th")):
        specs.append(register_column(
            f"self_predicted_{prefix}device_ms_{end}", "time",
            f"{phase}self predicted device {end}", aggregation="sum", unit="ms",
            description=f"the {phase}self predicted device time at the {end} end of its "
                        "expected error: each operator's time times the "
                        f"{percentile} percentile of measured over predicted time of its "
                        "calibration table's held-out shapes",
            needs="run predict() first"))
        specs.append(register_column(
            f"predicted_{prefix}device_ms_{end}", "time", f"{phase}predicted device {end}",
            aggregation="inclusive", unit="ms",
            derive=inclusive_of(f"self_predicted_{prefix}device_ms_{end}"),
            description=f"predicted {phase}device time of the call and everything it called "
                        f"at the {end} end of its expected error (the {percentile} percentile "
                        "of its operators' held-out residuals)", needs="run predict() first"))
    specs.append(register_column(
        f"predicted_{prefix}bound", "text", f"{phase}predicted bound", aggregation="none",
        derive=_bound(prefix), needs="run predict() first",
        description="host: the host takes longer to issue the call's work than the device to "
                    "run it"))
    return specs


CALL_COLUMNS: tuple[ColumnSpec, ...] = (*_phase_columns("", ""),
                                        *_phase_columns("backward_", "backward "))
"""The per-call columns the prediction listener writes (``self_predicted_*``) and those
derived from them, forward then backward."""

PASS_COLUMNS: tuple[ColumnSpec, ...] = (
    register_column("predicted_latency_ms", "time", "predicted latency", aggregation="none",
                    unit="ms", description="predicted latency of the whole pass, host and "
                    "device together: the minimum over runs (a host-bound pass's runs "
                    "spread widely above it)", needs="run sweep() first"),
    register_column("predicted_throughput", "number", "predicted items/s", aggregation="none",
                    unit="items/s", description="the batch size over the predicted latency",
                    needs="run sweep() first"),
    register_column("predicted_peak_bytes", "bytes", "predicted peak", aggregation="none",
                    unit="bytes", description="the pass's peak of live tensors on the device, "
                    "planned on the meta device (the CUDA context and the allocator's "
                    "fragmentation not included)", needs="run sweep() first"),
    register_column("predicted_regime", "text", "predicted regime", aggregation="none",
                    description="host-bound: the device would be idle over half the predicted "
                    "pass; else device-bound", needs="run sweep() first"),
)
"""The sweep's pass-level columns: one row per batch size and dtype."""
