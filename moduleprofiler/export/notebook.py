"""A view as it shows in a notebook (``_repr_html_``): its title, the HTML table, the totals
and the notes, in one ``<div>`` whose id is new at every rendering.

Each rendering draws a fresh random id, used by the wrapper and by the table's own ``Styler``
rules (``#T_<id>_row0_col3``), and every rule of the small style sheet starts with it (number
headers are right-aligned over their numbers by ``th.col<i>``, ``Styler``'s classes): two
views on one page (or an output left from an earlier kernel) never style each other.
"""

from __future__ import annotations

import html

from moduleprofiler.export.cells import UNICODE
from moduleprofiler.export.html_table import render_html_table, unique_id
from moduleprofiler.export.text import totals_line
from moduleprofiler.export.view_data import ViewData

_CSS = """
#{id} {{ font-family: system-ui, -apple-system, "Segoe UI", sans-serif; font-size: 13px;
         margin-bottom: 12px; }}
#{id} .mp-title {{ font-weight: 600; margin: 4px 0; }}
#{id} table {{ border-collapse: collapse; font-variant-numeric: tabular-nums; }}
#{id} th {{ border-bottom: 1px solid #888; padding: 2px 10px; text-align: left; }}
#{id} td {{ padding: 1px 10px; white-space: nowrap; }}
#{id} .mp-foot {{ color: #555; margin: 4px 0; }}
"""


def notebook_html(view: ViewData) -> str:
    """``view`` as one self-contained, uniquely identified ``<div>`` for a notebook cell; a
    tree folds identical sibling blocks as its text does (:meth:`View.folded`)."""
    view = view.folded()
    element = unique_id()
    table = render_html_table(view, table_id=element)
    foot = [line for line in (totals_line(view, UNICODE),
                              *(f"note: {note}" for note in (*view.hints, *view.notes))) if line]
    specs = view.specs(view.data_columns).values()
    numeric = "".join(f"#{element} th.col{index} {{ text-align: right; }}\n"
                      for index, spec in enumerate(specs) if spec.numeric)
    parts = [f'<div id="{element}" class="moduleprofiler">',
             f"<style>{_CSS.format(id=element)}{numeric}</style>"]
    if view.title:
        parts.append(f'<div class="mp-title">{html.escape(view.title)}</div>')
    parts.append(table)
    parts.extend(f'<div class="mp-foot">{html.escape(line)}</div>' for line in foot)
    parts.append("</div>")
    return "\n".join(parts)
