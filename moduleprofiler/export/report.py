"""The HTML report: one self-contained page (inline CSS and JS, no network request) with the
summary, bar charts of where the work goes, the collapsible module tree and a sortable
table of every module. Numbers come from the views; this file arranges and formats them.
Every name is escaped: by the template's autoescaping, and by ``Styler`` in the table."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import jinja2
from markupsafe import Markup

from moduleprofiler._version import __version__
from moduleprofiler.export.cells import LOWER_MARK, UNICODE, formatter
from moduleprofiler.export.columns import FLOPS, MACS, column_spec
from moduleprofiler.export.frame import lower_bound_rows
from moduleprofiler.export.html_table import render_html_table
from moduleprofiler.export.names import SHARED_MARK, module_path
from moduleprofiler.export.report_assets import CSS, JS, TEMPLATE
from moduleprofiler.export.select import (
    column_total,
    default_columns,
    extra_columns,
    lower_bound_totals,
    profile_hints,
    profile_notes,
    table_view,
    top_view,
    tree_view,
)
from moduleprofiler.export.tree import parents, relative_name
from moduleprofiler.export.units import is_missing
from moduleprofiler.records import UNCALLED, UNHOOKED, model_name

if TYPE_CHECKING:
    from moduleprofiler.export.view import View
    from moduleprofiler.records import ProfileData as Profile

CHART_BARS = 10
"""Bars per chart; the rest are summed into one "other" bar."""
OPEN_DEPTH = 1
"""Tree nodes up to this depth start expanded."""
TABLE_COLUMNS = ("module", "type", "calls", "params", "input_shapes", "output_shapes",
                 "self_macs", "self_ops", "ops", "ops_pct")
"""The table of every module starts with these; every other quantity of the profile and the
ops source follow."""


@dataclass
class Bar:
    """One bar of a report chart: its label, value text, share and width in percent."""

    label: str
    text: str
    pct: str
    width: float


@dataclass
class Chart:
    """A bar chart of the report (where ops, time or memory go)."""

    id: str
    title: str
    bars: list[Bar]


@dataclass
class Node:
    """One module of the report's collapsible tree."""

    name: str
    type: str
    stats: str
    pct: str
    width: float | None
    open: bool
    children: list[Node] = field(default_factory=list)


def _text(column: str, value: Any) -> str:
    return formatter(column_spec(column), UNICODE)(value)


def _chart(chart_id: str, title: str, labels: Sequence[str], values: Sequence[Any],
           pcts: Sequence[Any], column: str) -> Chart | None:
    """Bars of the largest ``values`` (the rest in one "other" bar), widths relative to the
    largest bar."""
    items = [(label, value, pct) for label, value, pct in zip(labels, values, pcts)
             if not is_missing(value) and value > 0]
    if not items:
        return None
    items.sort(key=lambda item: -float(item[1]))
    shown, rest = items[:CHART_BARS], items[CHART_BARS:]
    if rest:
        rest_pct = [p for _, _, p in rest if not is_missing(p)]
        shown.append((f"other ({len(rest)})", sum(v for _, v, _ in rest),
                      sum(rest_pct) if rest_pct else None))
    largest = max(float(value) for _, value, _ in shown)
    bars = [Bar(label=label, text=_text(column, value), pct=_text("ops_pct", pct),
                width=round(100.0 * float(value) / largest, 2))
            for label, value, pct in shown]
    return Chart(id=chart_id, title=title, bars=bars)


def _params_held_once(profile: Profile, tops: Sequence[str]) -> list[int]:
    """The parameters of each top-level module's subtree, each tensor counted once in the
    whole model (its owner's :attr:`~moduleprofiler.records.ModuleInfo.self_params`): a tied
    output layer holds none of its own, so the bars add up to the model's parameters."""
    held = dict.fromkeys(tops, 0)
    for info in profile.modules:  # one pass: each module adds to the tops it lies under
        parts = info.path.split(".")
        for end in range(1, len(parts) + 1):
            prefix = ".".join(parts[:end])
            if prefix in held:
                held[prefix] += info.self_params
    return [held[top] for top in tops]


def _charts(profile: Profile) -> list[Chart]:
    """Ops by module type (own work), ops and parameters by top-level module, and one chart
    per timing/memory quantity that has a total."""
    charts: list[Chart | None] = []
    by_type = top_view(profile, None, by="ops").frame
    charts.append(_chart("ops-by-type", "Ops by module type (own work)", list(by_type["type"]),
                         list(by_type["self_ops"]), list(by_type["self_ops_pct"]), "ops"))
    top = tree_view(profile, ["ops", "ops_pct", "params", "params_pct"],
                    max_depth=1).frame
    top = top[top["depth"] == 1]
    shared = top["shared_with"] if "shared_with" in top else [None] * len(top)
    labels = [f"{path} ({kind})" + (SHARED_MARK.format(owner) if isinstance(owner, str) else "")
              for path, kind, owner in zip(top["module"], top["type"], shared)]
    # a module's ops with work without a formula inside is a lower bound: its bar says so
    bounded = [LOWER_MARK + label if low else label
               for label, low in zip(labels, lower_bound_rows(top, "ops"))]
    charts.append(_chart("ops-by-module", "Ops by top-level module", bounded,
                         list(top["ops"]), list(top["ops_pct"]), "ops"))
    held = _params_held_once(profile, [module_path(name) for name in top["module"]])
    total = profile.total_params
    charts.append(_chart("params-by-module", "Parameters by top-level module", labels, held,
                         [100.0 * count / total if total else None for count in held],
                         "params"))
    for column in extra_columns(top):
        if column_spec(column).inclusive:
            frame = tree_view(profile, [column, f"{column}_pct"], max_depth=1).frame
            frame = frame[frame["depth"] == 1]
            charts.append(_chart(column.replace("_", "-"),
                                 f"{column_spec(column).label} by top-level module", labels,
                                 list(frame[column]), list(frame[f"{column}_pct"]), column))
    return [chart for chart in charts if chart is not None]


def _bar_column(columns: Sequence[str], bounded: Sequence[str] = ()) -> str | None:
    """The quantity the tree's bars show each module's share of: ops where the view shows
    them, else the first other inclusive quantity it shows (a timing result's time, a memory
    report's live bytes), else parameters; never one whose total is a lower bound
    (``bounded``: work without a formula), of which no share is known."""
    shown = [c for c in columns if not c.endswith("_pct") and c not in bounded]
    if "ops" in shown:
        return "ops"
    for column in shown:
        spec = column_spec(column)
        if column != "params" and spec.inclusive and spec.kind in ("count", "time", "bytes"):
            return column
    return "params" if "params" in shown else None


def _tree(view: View, bar: str | None) -> list[Node]:
    """The nodes of a tree view with its default columns (every quantity of the profile);
    ``bar``: the column whose ``_pct`` share each node's bar shows."""
    frame, columns = view.frame, view.columns
    paths = [str(path) for path in frame["module"]]
    parent_of = parents(paths)
    nodes: list[Node] = []
    roots: list[Node] = []
    share = f"{bar}_pct" if bar is not None else None
    # a share no row knows (of a total that is a lower bound) says nothing in every node:
    # the table and the notes say why
    stat_columns = [c for c in columns if c != share
                    and not (c.endswith("_pct") and not frame[c].notna().any())]
    for index, row in enumerate(frame.to_dict("records")):
        parent = parent_of[index]
        name = relative_name(paths[index], paths[parent] if parent is not None else None)
        stats = " · ".join(f"{column_spec(c).label} {_text(c, row[c])}" for c in stat_columns)
        if row["ops_source"] in (UNCALLED, UNHOOKED):
            stats += " · not called" if row["ops_source"] == UNCALLED else " · not hooked"
        elif row["calls"] > 1:
            stats += f" · {row['calls']} calls"
        pct = row[share] if share is not None else None
        node = Node(name=name, type=str(row["type"]), stats=stats,
                    pct=_text(share, pct) if share is not None else "",
                    width=None if pct is None or is_missing(pct)
                    else round(min(float(pct), 100.0), 2),
                    open=int(row["depth"]) < OPEN_DEPTH)
        nodes.append(node)
        (roots if parent is None else nodes[parent].children).append(node)
    return roots


def _cards(profile: Profile) -> list[dict[str, Any]]:
    modules = tree_view(profile, []).frame
    cards: list[tuple[str, str, Any]] = [
        ("params", "parameters", profile.total_params),
        ("macs", MACS, profile.total_macs),
        ("flops", FLOPS, profile.total_flops),
        ("ops", "ops", profile.total_ops),
    ]
    if profile.total_backward_macs is not None:
        cards.append(("macs", f"backward {MACS}", profile.total_backward_macs))
        cards.append(("flops", f"backward {FLOPS}", 2 * profile.total_backward_macs))
    for column in extra_columns(modules):
        total = column_total(modules, column, {})
        if total is not None:
            cards.append((column, column_spec(column).label, total))
    cards.append(("calls", "module calls", len(profile.records)))
    cards.append(("modules", "modules", len(profile.modules)))
    # a total that is a lower bound says so on its card: "≥ 11.41K", as the repr's ">="
    bounded = {label for column, label, _ in cards if (
        "backward" if label.startswith("backward") else column) in profile.lower_bounds}
    out = [{"label": label, "text": (LOWER_MARK if label in bounded and not is_missing(value)
                                     else "") + _text(column, value),
            "raw": "" if is_missing(value) else str(value)} for column, label, value in cards]
    out.append({"label": "totals", "raw": "",
                "text": "exact" if profile.complete
                else "lower bounds: " + ", ".join(profile.lower_bounds)})
    return out


def report_context(profile: Profile, title: str | None = None) -> dict[str, Any]:
    """Everything the template shows, as plain strings, numbers and lists."""
    inputs = profile.roots[0].input_shapes if profile.roots else None
    subtitle = f"{len(profile.records)} module calls · {len(profile.modules)} modules"
    if inputs is not None:
        subtitle = f"input {_text('input_shapes', inputs)} · " + subtitle
    tree = tree_view(profile)
    bar = _bar_column(tree.columns, lower_bound_totals(profile))
    if bar is not None and f"{bar}_pct" not in tree.columns:
        tree = tree_view(profile, [*tree.columns, f"{bar}_pct"])
    table = table_view(profile, [*default_columns(profile, TABLE_COLUMNS, tree.frame),
                                 "ops_source"])
    return {
        "title": title if title is not None else f"{model_name(profile)} profile",
        "subtitle": subtitle,
        "version": __version__,
        "cards": _cards(profile),
        # the profile's notes, then what the module table adds (why its shares are unknown)
        "notes": [*profile_hints(profile), *dict.fromkeys([*profile_notes(profile),
                                                           *table.notes])],
        "charts": _charts(profile),
        "tree": _tree(tree, bar),
        "tree_caption": "Numbers of a module include its children" + (
            f"; bars show its share of {column_spec(bar).label}." if bar is not None else "."),
        "table": Markup(render_html_table(table, sortable=True, table_id="modules")),
        "css": Markup(CSS),
        "js": Markup(JS),
    }


_ENVIRONMENT = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined,
                                  keep_trailing_newline=True)


def report_text(profile: Profile, *, title: str | None = None) -> str:
    """The report page of ``profile`` (``title`` defaults to "<root type> profile")."""
    return str(_ENVIRONMENT.from_string(TEMPLATE).render(**report_context(profile, title)))
