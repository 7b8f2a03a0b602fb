"""Figures of a profile for papers and slides, drawn with matplotlib (the ``plot`` extra:
``pip install ".[plot]"`` in a checkout); the HTML report draws its own charts without it.

Four charts, each of any quantity (``ops``, ``macs``, ``flops``, ``params``, one its producer
declared, such as ``time`` or ``memory``, or a column name):

* ``"type"``: the own work of each module type, largest first (the rest in one bar);
* ``"module"``: each module at ``depth`` (1: the top-level modules) with its children's work
  (in both bar charts, rows whose value is 0 are left out, and the title says how many);
* ``"layer"``: each layer's own work in execution order, coloured by type (a layer: a module
  that calls no other module, or one with own work of its own, such as a residual add);
* ``"time_vs_flops"``: each layer's measured own time against its own FLOPs (log-log), for a
  profile that holds both (the quantity ``"time"``, whichever columns declared it).

:func:`plot_summary` draws several models side by side: one panel per quantity of the
multi-model summary (parameters, MACs, FLOPs, and the whole-model latency or memory when the
profiles have them), one bar per model, labelled with the summary table's headers.

Data comes from the views (``top``, ``tree``) and the module frame; unknown values are not
drawn (never as 0) and the title says how many there are; a bar whose value is a lower bound
(work without a formula in it) has ``≥`` before its label. Figures are
``matplotlib.figure.Figure`` objects made without pyplot: no global state, shown by Jupyter,
saved with ``path=`` (PNG, SVG or PDF) or ``figure.savefig``. Other figures of the package
make, check and save theirs with :func:`figure_axes`, :func:`check_figure_path` and
:func:`save_figure`, so all of them behave alike.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

import pandas as pd

from moduleprofiler.export.cells import BOUND_NOTE, LOWER_MARK, UNICODE, formatter, header
from moduleprofiler.export.columns import FLOPS, column_spec, metric_columns, quantity
from moduleprofiler.export.frame import lower_bound_rows, module_frame
from moduleprofiler.export.model_summary import lower_bound_models, summary_view
from moduleprofiler.export.names import elide_name, module_name
from moduleprofiler.export.select import top_view, tree_view
from moduleprofiler.export.units import is_missing
from moduleprofiler.validate import check_choice, check_int, check_str

if TYPE_CHECKING:
    from collections.abc import Mapping

    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from moduleprofiler.records import ProfileData as Profile

PlotKind = Literal["type", "module", "layer", "time_vs_flops"]
PLOT_KINDS: tuple[str, ...] = ("type", "module", "layer", "time_vs_flops")
FIGSIZE = (6.4, 4.8)
"""matplotlib's default size in inches: what a slide or a paper column scales from."""
FIGURE_SUFFIXES = (".png", ".svg", ".pdf")
PNG_DPI = 200
LABEL_CHARS = 28
"""Names on an axis are shortened in their middle to this many characters."""
TYPE_COLORS = 9
"""Types coloured one by one in the per-layer and scatter charts; the rest share grey."""

_ZEROS = re.compile(r"\.0+(?=\D|$)")
"""Zero decimals of an axis tick (``200.00M`` -> ``200M``)."""



def literal(text: str) -> str:
    """``text`` as matplotlib draws it verbatim: a ``$`` escaped. A pair of them in a module
    name (a ``ModuleDict`` key) or a type made matplotlib typeset the text between as math
    (``c$x^2$d`` drawn as ``cx²d``), and an unknown command there (``$\\foo$``) raised
    ``ValueError`` when the figure was drawn or saved."""
    return text.replace("$", r"\$")


def figure_label(name: str) -> str:
    """A module, type or model name as a tick or legend label: elided to
    :data:`LABEL_CHARS` characters in its middle, drawn verbatim (:func:`literal`)."""
    return literal(elide_name(name, LABEL_CHARS))

def figure_axes(ax: Axes | None, figsize: tuple[float, float] = FIGSIZE, *,
                feature: str = "profile.plot") -> tuple[Figure, Axes]:
    """``ax`` and its figure, or a new figure (constrained layout, no pyplot) with one axes;
    an ImportError naming the ``plot`` extra when matplotlib is missing (``feature`` says
    what needed it). Shared by every figure of the package."""
    try:
        from matplotlib import figure
    except ImportError as exc:
        raise ImportError(f"{feature} needs matplotlib: pip install matplotlib (the plot "
                          'extra; from a moduleprofiler checkout: pip install ".[plot]")') from exc
    if ax is not None:
        return cast("Figure", ax.figure), ax
    new = figure.Figure(figsize=figsize, layout="constrained")
    return new, new.add_subplot()


def check_figure_path(path: str | os.PathLike[str] | None) -> None:
    """A ValueError naming ``path`` unless it is ``None`` or ends in .png, .svg or .pdf."""
    if path is not None and os.path.splitext(os.fspath(path))[1].lower() not in FIGURE_SUFFIXES:
        raise ValueError(f"path {os.fspath(path)!r} (argument path): a figure is saved as "
                         f"{', '.join(FIGURE_SUFFIXES)}")


def save_figure(figure: Figure, path: str | os.PathLike[str] | None) -> None:
    """Write ``figure`` to ``path`` (PNG at 200 dpi, SVG, PDF); nothing when ``None``."""
    if path is not None:
        check_figure_path(path)
        png = os.fspath(path).lower().endswith(".png")
        figure.savefig(path, dpi=PNG_DPI if png else None)


def _columns(metric: str, available: Sequence[str]) -> tuple[str, str, str]:
    """``(own column, inclusive column, axis label)`` of ``metric``: a declared quantity
    (:func:`~moduleprofiler.export.columns.register_quantity`) or a column."""
    declared = quantity(metric, available)
    if declared is not None:
        return declared.own, declared.inclusive, declared.label
    own, inclusive = metric_columns(metric, list(available))
    if not column_spec(inclusive).numeric:
        raise ValueError(f"metric {metric!r} is not a numeric column")
    return own, inclusive, column_spec(inclusive).label


def _known(labels: Sequence[str], values: Sequence[Any]) -> tuple[list[str], list[float], int]:
    """Labels and values of the known values, and how many were unknown."""
    pairs = [(label, float(value)) for label, value in zip(labels, values)
             if not is_missing(value)]
    return [p[0] for p in pairs], [p[1] for p in pairs], len(labels) - len(pairs)


def _nonzero(labels: Sequence[str], values: Sequence[float]) -> tuple[list[str], list[float], int]:
    """Labels and values of the values that are not 0, and how many were 0: a bar chart of
    where the work goes has no use for empty bars (BERT's FLOPs by type: 8 of 10)."""
    pairs = [(label, value) for label, value in zip(labels, values) if value != 0]
    return [p[0] for p in pairs], [p[1] for p in pairs], len(labels) - len(pairs)


def _title(text: str, unknown: int, zero: int = 0, noun: str = "", bounds: int = 0,
           joint: str = "\n") -> str:
    """``text`` and, after ``joint`` (on a second line), what was not drawn: ``zero`` rows (of
    ``noun``) whose value is 0 and ``unknown`` ones; and, where ``bounds`` bars are lower
    bounds (their labels marked), what the mark means."""
    notes = []
    if zero:
        notes.append(f"{zero} {noun}{'s' if zero != 1 else ''} with none, left out")
    if unknown:
        notes.append(f"{unknown} unknown, not drawn")
    if bounds:
        notes.append(BOUND_NOTE)
    return text if not notes else f"{text}{joint}({'; '.join(notes)})"


def _marked(labels: Sequence[str], frame: pd.DataFrame, column: str) -> list[str]:
    """``labels`` (one per row of ``frame``), :data:`LOWER_MARK` before those whose
    ``column`` is a lower bound (:func:`~moduleprofiler.export.frame.lower_bound_rows`)."""
    bounded = lower_bound_rows(frame, column).tolist()
    return [LOWER_MARK + label if low else label for label, low in zip(labels, bounded)]


def _value_axis(axis: Any, column: str, log: bool = False) -> None:
    """Ticks in human units (``1.5G``, ``2.00 ms``), few enough not to collide; a ``log``
    axis has them at 1, 2 and 5 of each decade (unlabelled minor ticks)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    text = formatter(column_spec(column), UNICODE)
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0), numticks=7) if log
                           else MaxNLocator(nbins=5))
    axis.set_major_formatter(FuncFormatter(lambda value, _: _ZEROS.sub("", text(value))))
    if log:
        axis.set_minor_formatter(NullFormatter())


def _bars(ax: Axes, labels: list[str], values: list[float], column: str, top: int | None) -> None:
    """Horizontal bars, largest on top, the values after ``top`` summed into one bar."""
    order = sorted(range(len(values)), key=lambda i: -values[i])
    shown = [(labels[i], values[i]) for i in order]
    if top is not None and len(shown) > top:
        rest = shown[top:]
        mark = LOWER_MARK if any(label.startswith(LOWER_MARK) for label, _ in rest) else ""
        shown = [*shown[:top], (f"{mark}other ({len(rest)})", sum(v for _, v in rest))]
    names = [figure_label(label) for label, _ in shown]
    ax.barh(range(len(shown)), [v for _, v in shown], color="C0")
    ax.set_yticks(range(len(shown)), names, fontsize=9)
    ax.invert_yaxis()
    _value_axis(ax.xaxis, column)


def _layers(profile: Profile, frame: pd.DataFrame, column: str) -> pd.DataFrame:
    """The rows of the layers in the order they first ran: the modules that call no other
    module, and the others whose own ``column`` is known and not 0 (a block's residual add,
    an attention's matrix products), so that no own work is left out."""
    callers = {record.parent for record in profile.records}
    calls_others = {record.path for record in profile.records if record.index in callers}
    own = frame.set_index("module")[column]
    order = [module_name(path) for path in dict.fromkeys(r.path for r in profile.records)
             if path not in calls_others
             or (not is_missing(own[module_name(path)]) and own[module_name(path)] != 0)]
    return frame.set_index("module").loc[order].reset_index()


def _type_colors(types: Sequence[str] | pd.Series) -> dict[str, Any]:
    """A colour per type, the most frequent first; grey for the rest."""
    ranked = pd.Series(list(types)).value_counts().index.tolist()
    return {kind: f"C{i}" if i < TYPE_COLORS else "0.6" for i, kind in enumerate(ranked)}


def _legend(ax: Axes, colors: dict[str, Any], own_figure: bool) -> None:
    """The type colours: under the figure when it is ours (never over the data), else in
    the axes."""
    from matplotlib.patches import Patch

    shown = list(colors.items())[:TYPE_COLORS]
    handles = [Patch(color=color, label=figure_label(kind)) for kind, color in shown]
    if len(colors) > TYPE_COLORS:
        handles.append(Patch(color="0.6", label=f"other ({len(colors) - TYPE_COLORS})"))
    if own_figure:
        ax.figure.legend(handles=handles, fontsize=8, loc="outside lower center",
                         ncols=min(len(handles), 4), frameon=False)
    else:
        ax.legend(handles=handles, fontsize=8, loc="best", frameon=False)


def _layer_chart(ax: Axes, profile: Profile, own: str, label: str, own_figure: bool) -> str:
    rows = _layers(profile, module_frame(profile), own)
    colors = _type_colors(rows["type"])
    known = [i for i, value in enumerate(rows[own]) if not is_missing(value)]
    ax.bar(known, [float(rows[own][i]) for i in known], width=0.8,
           color=[colors[rows["type"][i]] for i in known])
    # one name per slot of about 1.6 label heights along the axis: rotated labels never touch
    fontsize = 7
    length = ax.bbox.width / ax.figure.dpi * 72 * 0.9  # points; the layout shrinks it a bit
    step = max(1, math.ceil(len(rows) * fontsize * 1.6 / length))
    ticks = list(range(0, len(rows), step))
    ax.set_xticks(ticks, [figure_label(str(rows["module"][i])) for i in ticks],
                  rotation=90, fontsize=fontsize)
    ax.set_xlim(-0.6, len(rows) - 0.4)
    ax.set_ylabel(label)
    _value_axis(ax.yaxis, own)
    _legend(ax, colors, own_figure)
    return _title(f"{label[:1].upper()}{label[1:]} per layer, in execution order",
                  len(rows) - len(known))


def _scatter(ax: Axes, profile: Profile, own_figure: bool) -> str:
    frame = module_frame(profile)
    own_time = _columns("time", list(frame.columns))[0]
    rows = _layers(profile, frame, "self_flops")
    keep = [i for i in range(len(rows)) if not is_missing(rows["self_flops"][i])
            and not is_missing(rows[own_time][i]) and rows["self_flops"][i] > 0
            and rows[own_time][i] > 0]
    colors = _type_colors(rows["type"][keep])
    ax.scatter([float(rows["self_flops"][i]) for i in keep],
               [float(rows[own_time][i]) for i in keep],
               c=[colors[rows["type"][i]] for i in keep], s=18)
    # a log axis with no positive data cannot be drawn (matplotlib raises when the figure
    # is shown or saved): with no point, the empty axes stay linear
    if keep:
        ax.set_xscale("log")
        ax.set_yscale("log")
    _value_axis(ax.xaxis, "flops", log=bool(keep))
    _value_axis(ax.yaxis, own_time, log=bool(keep))
    ax.set_xlabel(FLOPS)
    ax.set_ylabel("time")
    _legend(ax, colors, own_figure)
    missing = len(rows) - len(keep)
    heading = f"Time vs FLOPs per layer ({len(keep)} layers)"
    return heading if not missing else \
        f"{heading}\n({missing} more with no FLOPs or no time, not drawn)"


def plot_profile(profile: Profile, kind: PlotKind = "type", metric: str = "ops", *,
                 top: int | None = 10, depth: int = 1, ax: Axes | None = None,
                 title: str | None = None, path: str | os.PathLike[str] | None = None,
                 figsize: tuple[float, float] = FIGSIZE) -> Figure:
    """A figure of ``profile`` (see the module docstring for the ``kind``\\ s); ``metric``
    is ``ops``, ``macs``, ``flops``, ``params``, ``time``, ``memory`` or a column name;
    ``top`` bars at most in the ``type`` and ``module`` charts; ``depth`` of the ``module``
    chart; ``ax`` draws into your own axes; ``path`` also saves it (``.png``, ``.svg`` or
    ``.pdf``)."""
    check_choice(kind, "kind", PLOT_KINDS)
    check_str(metric, "metric")
    check_int(top, "top", 1)
    check_int(depth, "depth", 0, optional=False)
    check_figure_path(path)
    own_figure = ax is None
    figure, ax = figure_axes(ax, figsize)
    if kind == "time_vs_flops":
        heading = _scatter(ax, profile, own_figure)
    else:
        own, inclusive, label = _columns(metric, list(module_frame(profile).columns))
        if kind == "layer":
            heading = _layer_chart(ax, profile, own, label, own_figure)
        elif kind == "type":
            frame = top_view(profile, None, by=own).frame
            names, values, unknown = _known(list(frame["type"]), list(frame[own]))
            names, values, zero = _nonzero(names, values)
            _bars(ax, names, values, own, top)
            # a quantity with no own share (own is the inclusive column) holds the children
            ax.set_xlabel(f"{label} ({'with children' if own == inclusive else 'own work'})")
            heading = _title(f"{label[:1].upper()}{label[1:]} by module type", unknown, zero,
                             "type")
        else:
            frame = tree_view(profile, [inclusive], max_depth=depth).frame
            frame = frame[frame["depth"] == depth]
            names = _marked([f"{m} ({t})" for m, t in zip(frame["module"], frame["type"])],
                            frame, inclusive)
            names, values, unknown = _known(names, list(frame[inclusive]))
            names, values, zero = _nonzero(names, values)
            _bars(ax, names, values, inclusive, top)
            ax.set_xlabel(f"{label} (with children)")
            where = "top-level module" if depth == 1 else f"module at depth {depth}"
            heading = _title(f"{label[:1].upper()}{label[1:]} by {where}", unknown, zero,
                             "module", sum(n.startswith(LOWER_MARK) for n in names))
    ax.set_title(title if title is not None else heading, fontsize=11)
    save_figure(figure, path)
    return figure


SUMMARY_METRICS = ("params", "macs", "flops")
"""The quantities :func:`plot_summary` draws by default, before any whole-model latency or
memory column of the summary (``ops`` is in the summary table; it is 2 x MACs plus the
work without multiply-accumulates, so a panel of it would repeat the FLOPs one)."""


def plot_summary(profiles: Mapping[str, Profile] | Iterable[Profile],
                 metrics: Sequence[str] | None = None, *, title: str | None = None,
                 path: str | os.PathLike[str] | None = None,
                 figsize: tuple[float, float] = FIGSIZE) -> Figure:
    """Several models side by side (the figure of :func:`moduleprofiler.export.summary`):
    one panel per quantity, one bar per model in the same colour in every panel.

    ``profiles`` is a mapping name -> profile (or a sequence, named by their model types);
    ``metrics`` are columns of the summary frame (default: ``params``, ``macs``, ``flops``,
    then the whole-model latency and memory columns the profiles carry); ``path`` also
    saves it (``.png``, ``.svg`` or ``.pdf``). Each panel's axis label is the summary
    table's header of its column; unknown values are not drawn (never as 0) and the label
    says how many."""
    check_figure_path(path)
    if isinstance(metrics, str):
        raise TypeError(f"metrics must be a sequence of column names, not the string "
                        f"{metrics!r} (argument metrics): pass [{metrics!r}]")
    if isinstance(profiles, Iterator):  # read once: the table and every panel's marks use it
        profiles = list(profiles)
    view = summary_view(profiles)
    default = [*SUMMARY_METRICS, *(c for c in view.columns
                                   if c not in ("model", "ops", *SUMMARY_METRICS))]
    chosen = list(metrics) if metrics is not None else default
    if not chosen:
        raise ValueError("metrics (argument metrics) is empty: name at least one column")
    missing = [c for c in chosen if c not in view.frame or c == "model"
               or not column_spec(c).numeric]
    if missing:
        numeric = [c for c in view.frame.columns if c != "model" and column_spec(c).numeric]
        raise KeyError(f"metrics (argument metrics): unknown column(s) {missing}; "
                       f"available: {numeric}")
    specs = view.specs(tuple(chosen))
    figure, first = figure_axes(None, figsize, feature="plot_summary")
    figure.delaxes(first)
    columns = 1 if len(chosen) <= 3 else 2
    rows = math.ceil(len(chosen) / columns)
    axes = figure.subplots(rows, columns, squeeze=False).ravel()
    models = [str(name) for name in view.frame["model"]]
    colors = {name: f"C{i % 10}" for i, name in enumerate(models)}
    for ax, column in zip(axes, chosen):
        bounded = lower_bound_models(profiles, column)
        marked = [LOWER_MARK + model if model in bounded else model for model in models]
        names, values, unknown = _known(marked, list(view.frame[column]))
        ax.barh(range(len(names)), values,
                color=[colors[name.removeprefix(LOWER_MARK)] for name in names])
        ax.set_yticks(range(len(names)), [figure_label(n) for n in names],
                      fontsize=9)
        ax.set_ylim(len(names) - 0.5, -0.5)  # the first model on top, as in the table
        _value_axis(ax.xaxis, column)
        ax.set_xlabel(_title(header(specs[column], UNICODE), unknown, joint=" ",
                             bounds=sum(n.startswith(LOWER_MARK) for n in names)))
    for ax in axes[len(chosen):]:
        figure.delaxes(ax)
    figure.suptitle(title if title is not None else "Model comparison", fontsize=11)
    save_figure(figure, path)
    return figure
