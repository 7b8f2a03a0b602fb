"""The roofline figure: each module by arithmetic intensity and achieved FLOP/s, against the
device's roofs (matplotlib, the ``plot`` extra: ``pip install ".[plot]"`` in a checkout).

A point is one module's own work (children excluded) in one phase: x its FLOPs per byte moved,
y its FLOPs over its measured self time, both on log scales, coloured by its label (compute,
memory or overhead bound, :func:`~moduleprofiler.efficiency.with_efficiency`). The roofs are
``min(peak, bandwidth x intensity)``: one slope for the memory bandwidth and one ceiling per
dtype the modules ran in. The modules that take the most time are named (path and type). A
module with no FLOPs, no bytes or no time has no point (never a point at 0); the title says how
many.

Like the profile's other figures (``Profile.plot``: same size, name length and formats), it is
a ``matplotlib.figure.Figure`` made without pyplot (no global state), shown by Jupyter, saved
with ``path=`` (PNG, SVG or PDF).
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Any, Literal

from moduleprofiler.efficiency.peaks import DevicePeaks, dtype_argument
from moduleprofiler.efficiency.roofline import call_dtype, with_efficiency
from moduleprofiler.export.figures import (
    FIGSIZE,
    check_figure_path,
    figure_axes,
    figure_label,
    save_figure,
)
from moduleprofiler.export.frame import module_values
from moduleprofiler.export.names import module_name
from moduleprofiler.export.profile import Profile
from moduleprofiler.validate import check_choice, check_int

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

BOUND_COLORS = {"compute": "C3", "memory": "C0", "overhead": "0.55"}


def _points(profile: Profile, prefix: str, peaks: DevicePeaks, dtype: str | None,
            tf32: bool | None) -> tuple[list[dict[str, Any]], int]:
    """One dict per module with an intensity and an achieved rate, and how many modules ran
    without one."""
    first: dict[str, Any] = {}
    for record in profile.records:
        first.setdefault(record.path, record)
    modules = module_values(profile, [prefix + "intensity", prefix + "achieved_tflops",
                                      prefix + "bound", f"self_{prefix}device_ms",
                                      f"self_{prefix}time_median_ms"])
    points, missing = [], 0
    for path, record in first.items():
        metrics = modules.get(path, {})
        x, y = metrics.get(prefix + "intensity"), metrics.get(prefix + "achieved_tflops")
        if x is None or y is None or not x > 0 or not y > 0:
            missing += 1
            continue
        points.append({
            "name": f"{module_name(path)} ({record.type_name})",
            "x": float(x), "y": float(y) * 1e12,
            "bound": metrics.get(prefix + "bound"),
            "time": (metrics.get(f"self_{prefix}device_ms")
                     or metrics.get(f"self_{prefix}time_median_ms") or 0.0),
            "dtype": call_dtype(record, peaks, dtype, tf32)})
    return points, missing


def _roofs(ax: Axes, peaks: DevicePeaks, dtypes: list[str], low: float, high: float) -> None:
    """The memory slope up to the highest ridge, and a ceiling per dtype from its ridge on."""
    bandwidth = peaks.bytes_per_s
    ceilings = sorted({(rate, name) for name in dtypes
                       if (rate := peaks.flops_per_s(name)) is not None}, reverse=True)
    top_ridge = ceilings[0][0] / bandwidth if ceilings else high
    end = max(top_ridge, high)
    ax.plot([low, min(top_ridge, end)], [bandwidth * low, bandwidth * min(top_ridge, end)],
            color="k", linewidth=1.2, label=f"memory {peaks.bandwidth_gbs:,.0f} GB/s")
    for number, (rate, name) in enumerate(ceilings):
        ridge = rate / bandwidth
        ax.plot([ridge, end], [rate, rate], color="k", linewidth=1.2,
                linestyle=("-", "--", ":", "-.")[number % 4],
                label=f"{name} peak {rate / 1e12:,.4g} TFLOP/s")


def plot_roofline(profile: Profile, peaks: DevicePeaks, *,
                  phase: Literal["forward", "backward"] = "forward",
                  dtype: str | None = None, tf32: bool | None = None, top: int = 8,
                  ax: Axes | None = None, title: str | None = None,
                  path: str | os.PathLike[str] | None = None,
                  figsize: tuple[float, float] = FIGSIZE) -> Figure:
    """The roofline figure of ``profile`` on the device of ``peaks`` (module docstring).

    Args:
        profile: profiled with a :class:`~moduleprofiler.efficiency.TrafficListener`, times
            merged in with ``Profile.merge`` (training-step times for the backward); the
            efficiency columns are computed here against ``peaks``.
        peaks: the device's :class:`~moduleprofiler.efficiency.DevicePeaks`.
        phase: ``"forward"`` or ``"backward"`` (a ``backward=True`` profile).
        dtype: as in :func:`~moduleprofiler.efficiency.with_efficiency`.
        tf32: as in :func:`~moduleprofiler.efficiency.with_efficiency`.
        top: how many modules, those with the most self time, are named.
        ax: draw into these axes instead of a new figure.
        title: replaces the default title.
        path: also save the figure there (``.png``, ``.svg`` or ``.pdf``).

    Raises:
        ValueError: a bad argument, no traffic in the profile, or no module with both an
            intensity and a measured time.
        ImportError: matplotlib is not installed.
    """
    check_choice(phase, "phase", ("forward", "backward"))
    check_int(top, "top", 0, optional=False)
    check_figure_path(path)
    fixed = dtype_argument(dtype)
    prefix = "" if phase == "forward" else "backward_"
    efficient = with_efficiency(profile, peaks, dtype=fixed, tf32=tf32)
    points, missing = _points(efficient, prefix, peaks, fixed, tf32)
    if not points:
        raise ValueError(f"no module has both FLOPs per byte and a measured {phase} time: "
                         "merge times into it with profile.merge(timing)"
                         + (" from train_step_times" if phase == "backward" else ""))
    figure, ax = figure_axes(ax, figsize, feature="plot_roofline")
    xs = [p["x"] for p in points]
    low, high = min(xs) / 4, max(xs) * 4
    _roofs(ax, peaks, sorted({p["dtype"] for p in points if p["dtype"]}), low, high)
    for bound, color in BOUND_COLORS.items():
        chosen = [p for p in points if p["bound"] == bound]
        if chosen:
            ax.scatter([p["x"] for p in chosen], [p["y"] for p in chosen], s=22, color=color,
                       zorder=3, label=f"{bound} bound ({len(chosen)})")
    # a module whose dtype has no peak on this device has no compute roof, so no label; it
    # is drawn all the same (the title counts it), apart, and the legend says why
    unbound = [p for p in points if p["bound"] not in BOUND_COLORS]
    if unbound:
        dtypes = sorted({p["dtype"] for p in unbound if p["dtype"]})
        ax.scatter([p["x"] for p in unbound], [p["y"] for p in unbound], s=22, color="C2",
                   marker="x", zorder=3, label=(f"no {'/'.join(dtypes)} peak" if dtypes
                                                else "no peak for its dtype")
                   + f" ({len(unbound)})")
    for rank, point in enumerate(sorted(points, key=lambda p: -p["time"])[:top]):
        # above and below their points in turn, so that neighbours' names rarely overlap;
        # leftwards from the points in the right half, so that none runs off the axes
        right = math.log(point["x"] / low) > math.log(high / low) / 2
        ax.annotate(figure_label(point["name"]), (point["x"], point["y"]),
                    xytext=(-4 if right else 4, 3 if rank % 2 == 0 else -9),
                    textcoords="offset points", fontsize=7, ha="right" if right else "left")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(low, high)
    ax.set_xlabel("arithmetic intensity (FLOPs per byte moved)")
    ax.set_ylabel(f"achieved FLOP/s ({phase}, own work)")
    ax.legend(fontsize=7, loc="best", frameon=False)
    heading = f"Roofline on {peaks.name}: {len(points)} modules"
    if missing:
        heading += f"\n({missing} more with no FLOPs, bytes or time, not drawn)"
    ax.set_title(title if title is not None else heading, fontsize=10)
    save_figure(figure, path)
    return figure
