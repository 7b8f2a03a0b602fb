"""The figure of an eager-against-compiled comparison
(:func:`moduleprofiler.compiled.compare_compiled`): each module at ``depth`` with its eager
time and its compiled device time as two bars, and the speed-up written beside them; a module
whose compiled work is fused into an ancestor's kernels shows a compiled bar of 0 and says so,
and one whose compiled time is unknown shows no compiled bar and says that."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from moduleprofiler.export.figures import (
    FIGSIZE,
    _value_axis,
    check_figure_path,
    figure_axes,
    figure_label,
    save_figure,
)
from moduleprofiler.export.frame import module_frame
from moduleprofiler.export.units import is_missing
from moduleprofiler.validate import check_int

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from moduleprofiler.records import ProfileData as Profile


def plot_compiled(profile: Profile, depth: int = 1, *, ax: Axes | None = None,
                  path: str | os.PathLike[str] | None = None,
                  figsize: tuple[float, float] = FIGSIZE) -> Figure:
    """Eager against compiled time of each module at ``depth`` (1: the top-level modules), in
    model order; ``path`` also saves it (``.png``, ``.svg`` or ``.pdf``).

    Raises:
        ValueError: ``profile`` holds no eager times (it is not ``compare_compiled``'s).
    """
    check_figure_path(path)
    check_int(depth, "depth", 0, optional=False)
    frame = module_frame(profile)
    if "eager_ms" not in frame or "device_ms" not in frame:
        raise ValueError("plot_compiled draws compare_compiled's result: profile (argument "
                         "profile) has no eager_ms and device_ms columns")
    names = list(frame["module"])
    level = frame["depth"].tolist()
    rows = [i for i, d in enumerate(level) if d == depth and not is_missing(
        frame["eager_ms"].iloc[i])]
    figure, axes = figure_axes(ax, figsize, feature="plot_compiled")
    labels = [figure_label(names[i]) for i in rows]
    eager = [float(frame["eager_ms"].iloc[i]) for i in rows]
    # an unknown compiled time gets no bar (a bar of 0 would say "fused into an ancestor")
    compiled = [None if is_missing(frame["device_ms"].iloc[i])
                else float(frame["device_ms"].iloc[i]) for i in rows]
    places = range(len(rows))
    known = [(place, after) for place, after in zip(places, compiled) if after is not None]
    axes.barh([p - 0.2 for p in places], eager, height=0.4, color="C0", label="eager")
    axes.barh([p + 0.2 for p, _ in known], [after for _, after in known], height=0.4,
              color="C1", label="compiled")
    for place, before, after in zip(places, eager, compiled):
        text = ("compiled time unknown" if after is None else f"{before / after:.2f}x"
                if after > 0 else "fused into an ancestor")
        axes.annotate(text, (max(before, after or 0.0), place), xytext=(3, 0),
                      textcoords="offset points", va="center", fontsize=8)
    axes.set_yticks(list(places), labels, fontsize=9)
    axes.set_ylim(len(rows) - 0.5, -0.5)  # model order, top down
    _value_axis(axes.xaxis, "eager_ms")
    axes.set_xlabel("time per forward (eager: its clock; compiled: kernel time)")
    axes.set_title(f"eager against compiled, modules at depth {depth}")
    axes.legend(loc="lower right", fontsize=8)
    save_figure(figure, path)
    return figure
