"""Predicted against measured: a measured profile scaled from the device it ran on to another
(each module's measured device time times the ratio of the two devices' predictions for it,
the idea of Habitat applied per module), the ratio column that compares the two, and the
figure of one against the other."""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any

import pandas as pd

from moduleprofiler.export.columns import Derived, register_column
from moduleprofiler.export.figures import LABEL_CHARS, figure_axes, save_figure
from moduleprofiler.export.frame import module_values
from moduleprofiler.export.names import elide_name
from moduleprofiler.records import ProfileData

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from moduleprofiler.export.profile import Profile
    from moduleprofiler.prediction.predict import PredictedProfile

MEASURED = "device_ms"
"""The measured column predictions are compared with: the kernel clock's device time of
:meth:`~moduleprofiler.ModuleProfiler.time_modules` on CUDA."""


def _ratio(calls: pd.DataFrame) -> list[Any]:
    return [None if pd.isna(p) or pd.isna(m) or not m > 0 else p / m
            for p, m in zip(calls["predicted_device_ms"], calls[MEASURED])]


register_column("scaled_device_ms", "time", "scaled device", aggregation="inclusive",
                unit="ms", description="the module's measured device time times the ratio of "
                "the two devices' predictions for it", needs="run predict(measured=...)")
register_column("predicted_to_measured", "ratio", "predicted / measured", aggregation="none",
                derive=Derived(("predicted_device_ms", MEASURED), _ratio),
                description="predicted device time over the measured one (1: exact); "
                "with predict(measured=...) per module too, the module's own times",
                needs="merge a timing profile into a prediction")


def _per_module(profile: Profile, column: str) -> dict[str, float]:
    """Per module path, ``column`` of the module frame (missing values left out)."""
    return {path: float(values[column]) for path, values in module_values(
        profile, [column]).items() if values[column] is not None}


def scaled(target: PredictedProfile, source: PredictedProfile,
           measured: ProfileData, reference: PredictedProfile | None = None
           ) -> PredictedProfile:
    """``target`` with each module's ``scaled_device_ms``: its measured device time (in
    ``measured``, a timing profile of the same model and input on the source device: the
    median over iterations) times ``reference``'s prediction for the module (default:
    ``target``'s) over ``source``'s; and ``measured``'s own columns beside the predicted ones.

    Raises:
        ValueError: ``measured`` has no device time (a CPU timing, or counts only).
    """
    merged = target.merge(measured)
    times = _per_module(merged, MEASURED)
    if not times:
        raise ValueError(f"measured: the profile has no {MEASURED!r} column (time the model "
                         "with time_modules on a CUDA device, whose kernel clock gives it)")
    wanted = _per_module(target if reference is None else reference, "predicted_device_ms")
    have = _per_module(source, "predicted_device_ms")
    metrics = {path: {"scaled_device_ms": value * wanted[path] / have[path]}
               for path, value in times.items()
               if path in wanted and have.get(path, 0.0) > 0}
    # per module too (a ratio is no sum of its calls' ratios): the module's predicted device
    # time over its measured one, shown beside scaled_device_ms in a module table
    predicted = _per_module(target, "predicted_device_ms")
    for path, value in times.items():
        if path in predicted and value > 0:
            metrics.setdefault(path, {})["predicted_to_measured"] = predicted[path] / value
    return merged.with_metrics(metrics)  # type: ignore[return-value]


def plot_prediction(profile: PredictedProfile, *, ax: Axes | None = None,
                    path: str | os.PathLike[str] | None = None,
                    title: str | None = None) -> Figure:
    """Predicted against measured device time, one point per module (log-log), with the
    line of equality and a ±25 % band. ``profile``: a prediction with a measured profile
    merged in (``predict(...).merge(timing)``, or ``predict(..., measured=timing)``).

    Raises:
        ValueError: no module has both times.
        ImportError: matplotlib is not installed.
    """
    frame = profile.to_df("module")
    if MEASURED not in frame or "predicted_device_ms" not in frame:
        raise ValueError("profile: no module has both a predicted and a measured device time "
                         "(merge a time_modules profile measured on CUDA into the prediction)")
    points = frame[(frame[MEASURED] > 0) & (frame["predicted_device_ms"] > 0)]
    if points.empty:
        raise ValueError("profile: no module has both a predicted and a measured device time")
    figure, ax = figure_axes(ax, feature="plot_prediction")
    measured = points[MEASURED].astype(float)
    predicted = points["predicted_device_ms"].astype(float)
    low = min(measured.min(), predicted.min()) / 1.5
    high = max(measured.max(), predicted.max()) * 1.5
    ax.fill_between([low, high], [low / 1.25, high / 1.25], [low * 1.25, high * 1.25],
                    color="0.9", label="±25 %")
    ax.plot([low, high], [low, high], color="0.4", linewidth=1, label="predicted = measured")
    ax.scatter(measured, predicted, s=18, zorder=3)
    for name, x, y in sorted(zip(points["module"], measured, predicted),
                             key=lambda p: -p[1])[:5]:
        # names shortened as on every figure, and written leftwards from the points in the
        # right half, so that none runs off the axes
        right = math.log(x / low) > math.log(high / low) / 2
        ax.annotate(elide_name(str(name), LABEL_CHARS), (x, y), fontsize=7,
                    xytext=(-3 if right else 3, 3), textcoords="offset points",
                    ha="right" if right else "left")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)
    ax.set_xlabel("measured device time (ms)")
    ax.set_ylabel("predicted device time (ms)")
    errors = [abs(p / m - 1) for p, m in zip(predicted, measured)]
    median = sorted(errors)[len(errors) // 2] if errors else math.nan
    ax.set_title(title or f"{profile.predicted_for}: median |error| {100 * median:.0f} % "
                          f"over {len(errors)} modules")
    ax.legend(loc="upper left", fontsize=8)
    save_figure(figure, path)
    return figure
