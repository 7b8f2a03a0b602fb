"""The prediction's per-call columns, registered like any listener's."""

from __future__ import annotations

from typing import Any

import pandas as pd

from moduleprofiler.export.columns import Derived, inclusive_of, register_column


def _bound(prefix: str) -> Derived:
    device, host = f"predicted_{prefix}device_ms", f"predicted_{prefix}host_ms"

    def derive(calls: pd.DataFrame) -> list[Any]:
        if host not in calls:
            return [None] * len(calls)
        return [None if pd.isna(d) or pd.isna(h) else "host" if h > d else "device"
                for d, h in zip(calls[device], calls[host])]
    return Derived((device, host), derive)


for _prefix, _phase in (("", ""), ("backward_", "backward ")):
    for _what in ("device", "host"):
        register_column(f"self_predicted_{_prefix}{_what}_ms", "time",
                        f"{_phase}self predicted {_what}", aggregation="sum", unit="ms",
                        description=f"predicted {_phase}{_what} time of the call's own "
                                    "operators", needs="run predict() first")
        register_column(f"predicted_{_prefix}{_what}_ms", "time",
                        f"{_phase}predicted {_what}", aggregation="inclusive", unit="ms",
                        derive=inclusive_of(f"self_predicted_{_prefix}{_what}_ms"),
                        description=f"predicted {_phase}{_what} time of the call and "
                                    "everything it called", needs="run predict() first")
    for _end, _percentile in (("low", "10th"), ("high", "90th")):
        register_column(f"self_predicted_{_prefix}device_ms_{_end}", "time",
                        f"{_phase}self predicted device {_end}", aggregation="sum", unit="ms",
                        description=f"the {_phase}self predicted device time at the {_end} end "
                                    "of its expected error: each operator's time times the "
                                    f"{_percentile} percentile of measured over predicted time "
                                    "of its calibration table's held-out shapes",
                        needs="run predict() first")
        register_column(f"predicted_{_prefix}device_ms_{_end}", "time",
                        f"{_phase}predicted device {_end}", aggregation="inclusive", unit="ms",
                        derive=inclusive_of(f"self_predicted_{_prefix}device_ms_{_end}"),
                        description=f"predicted {_phase}device time of the call and everything "
                                    f"it called at the {_end} end of its expected error (the "
                                    f"{_percentile} percentile of its operators' held-out "
                                    "residuals)", needs="run predict() first")
    register_column(f"predicted_{_prefix}bound", "text", f"{_phase}predicted bound",
                    aggregation="none", derive=_bound(_prefix),
                    description="host: the host takes longer to issue the call's work than "
                                "the device to run it", needs="run predict() first")


# the sweep's pass-level columns (prediction.sweep): one row per batch size and dtype
register_column("predicted_latency_ms", "time", "predicted latency", aggregation="none",
                unit="ms", description="predicted latency of the whole pass, host and device "
                "together", needs="run sweep() first")
register_column("predicted_throughput", "number", "predicted items/s", aggregation="none",
                unit="items/s", description="the batch size over the predicted latency",
                needs="run sweep() first")
register_column("predicted_peak_bytes", "bytes", "predicted peak", aggregation="none",
                unit="bytes", description="the pass's peak of live tensors on the device, "
                "planned on the meta device (the CUDA context and the allocator's "
                "fragmentation not included)", needs="run sweep() first")
register_column("predicted_regime", "text", "predicted regime", aggregation="none",
                description="host-bound: the device would be idle over half the predicted "
                "pass; else device-bound", needs="run sweep() first")
