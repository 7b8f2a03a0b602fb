"""The roofline figure: each module by arithmetic intensity and achieved FLOP/s, against the
device's roofs (matplotlib, the ``plot`` extra: ``pip install "moduleprofiler[plot]"``).

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

import os
from typing import TYPE_CHECKING, Any, Literal

from moduleprofiler.efficiency.peaks import DevicePeaks, peak_dtype
from moduleprofiler.efficiency.roofline import compute_dtype, with_efficiency
from moduleprofiler.export.figures import FIGSIZE, FIGURE_SUFFIXES, LABEL_CHARS
from moduleprofiler.export.names import elide_name, module_name
from moduleprofiler.export.profile import Profile

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

BOUND_COLORS = {"compute": "C3", "memory": "C0", "overhead": "0.55"}


def _matplotlib() -> Any:
    """The ``matplotlib.figure`` module, or an ImportError that names the extra."""
    try:
        from matplotlib import figure
    except ImportError as exc:
        raise ImportError('plot_roofline needs matplotlib: pip install "moduleprofiler[plot]" '
                          "(or pip install matplotlib)") from exc
    return figure


def _points(profile: Profile, prefix: str, peaks: DevicePeaks, dtype: str | None,
            tf32: bool | None) -> tuple[list[dict[str, Any]], int]:
    """One dict per module with an intensity and an achieved rate, and how many modules ran
    without one."""
    first: dict[str, Any] = {}
    for record in profile.records:
        first.setdefault(record.path, record)
    points, missing = [], 0
    for path, record in first.items():
        metrics = profile.module_metrics.get(path, {})
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
            "dtype": dtype or compute_dtype((*record.output_dtypes, *record.input_dtypes),
                                            record.macs, peaks, tf32)})
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
            attached with ``Profile.with_timing`` (training-step times for the backward); the
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
    if phase not in ("forward", "backward"):
        raise ValueError(f"phase must be 'forward' or 'backward', got {phase!r}")
    if isinstance(top, bool) or not isinstance(top, int) or top < 0:
        raise ValueError(f"top must be an int >= 0, got {top!r}")
    suffix = os.path.splitext(os.fspath(path))[1].lower() if path is not None else None
    if path is not None and suffix not in FIGURE_SUFFIXES:
        raise ValueError(f"path {os.fspath(path)!r} (argument path): a figure is saved as "
                         f"{', '.join(FIGURE_SUFFIXES)}")
    fixed = None if dtype is None else peak_dtype(dtype)
    if dtype is not None and fixed is None:
        raise ValueError(f"dtype {dtype!r} has no peak; use one of fp64, fp32, tf32, bf16, "
                         "fp16, fp8, int8")
    prefix = "" if phase == "forward" else "backward_"
    efficient = with_efficiency(profile, peaks, dtype=fixed, tf32=tf32)
    points, missing = _points(efficient, prefix, peaks, fixed, tf32)
    if not points:
        raise ValueError(f"no module has both FLOPs per byte and a measured {phase} time: "
                         "attach times with profile.with_timing(...)"
                         + (" from train_step_times" if phase == "backward" else ""))
    figure_module = _matplotlib()
    if ax is None:
        figure = figure_module.Figure(figsize=figsize, layout="constrained")
        ax = figure.add_subplot()
    else:
        figure = ax.figure
    xs = [p["x"] for p in points]
    low, high = min(xs) / 4, max(xs) * 4
    _roofs(ax, peaks, sorted({p["dtype"] for p in points if p["dtype"]}), low, high)
    for bound, color in BOUND_COLORS.items():
        chosen = [p for p in points if p["bound"] == bound]
        if chosen:
            ax.scatter([p["x"] for p in chosen], [p["y"] for p in chosen], s=22, color=color,
                       zorder=3, label=f"{bound} bound ({len(chosen)})")
    for rank, point in enumerate(sorted(points, key=lambda p: -p["time"])[:top]):
        # above and below their points in turn, so that neighbours' names rarely overlap
        ax.annotate(elide_name(point["name"], LABEL_CHARS), (point["x"], point["y"]),
                    xytext=(4, 3 if rank % 2 == 0 else -9), textcoords="offset points",
                    fontsize=7)
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
    if path is not None:
        figure.savefig(path, dpi=200 if suffix == ".png" else None)
    return figure  # type: ignore[no-any-return]
