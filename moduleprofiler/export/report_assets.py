"""The HTML report's page template, stylesheet and script, inlined into every report (the
file makes no network request). Nothing here sees user text except through the template's
autoescaping."""

from __future__ import annotations

CSS = """
:root { --fg: #1f2328; --muted: #59636e; --line: #d1d9e0; --bg: #ffffff; --panel: #f6f8fa;
  --bar: #4a90d9; --accent: #0969da; }
@media (prefers-color-scheme: dark) {
  :root { --fg: #e6edf3; --muted: #9198a1; --line: #3d444d; --bg: #0d1117; --panel: #151b23;
    --bar: #4493f8; --accent: #4493f8; }
}
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1200px; padding: 24px; color: var(--fg);
  background: var(--bg); font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; }
h1 { font-size: 22px; margin: 0 0 4px; overflow-wrap: anywhere; }
h2 { font-size: 17px; margin: 28px 0 10px; }
.sub, .muted { color: var(--muted); }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(150px, 1fr));
  gap: 10px; margin: 16px 0; }
.card { background: var(--panel); border: 1px solid var(--line); border-radius: 8px;
  padding: 10px 12px; }
.card .value { font-size: 20px; font-weight: 600; font-variant-numeric: tabular-nums; }
.card .label { color: var(--muted); font-size: 12px; }
.notes { background: var(--panel); border-left: 4px solid #d4a72c; padding: 8px 14px;
  margin: 0 0 12px; }
.notes li { overflow-wrap: anywhere; }
.charts { display: grid; grid-template-columns: repeat(auto-fit, minmax(340px, 1fr));
  gap: 16px; }
.chart { margin: 0; background: var(--panel); border: 1px solid var(--line);
  border-radius: 8px; padding: 10px 12px; }
.chart figcaption { font-weight: 600; margin-bottom: 6px; }
.bar-row { display: grid; grid-template-columns: 34% 1fr 30%; gap: 8px; align-items: center;
  margin: 3px 0; font-size: 12px; }
.bar-label { overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.bar-track { background: var(--line); border-radius: 3px; height: 10px; }
.bar { display: block; background: var(--bar); border-radius: 3px; height: 10px;
  min-width: 1px; }
.bar-value { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.tree { font-size: 13px; }
.tree details, .tree .leaf { margin-left: 18px; }
.tree > details, .tree > .leaf { margin-left: 0; }
.tree summary, .tree .leaf { padding: 2px 4px; border-radius: 4px; cursor: default; }
.tree summary { cursor: pointer; }
.tree summary:hover, .tree .leaf:hover { background: var(--panel); }
.tree .leaf { padding-left: 20px; }
.node-name { font-weight: 600; overflow-wrap: anywhere; }
.node-type { color: var(--accent); margin-left: 6px; }
.node-stats { color: var(--muted); margin-left: 10px; font-variant-numeric: tabular-nums; }
.node-pct { display: inline-block; width: 60px; height: 8px; margin-left: 8px;
  background: var(--line); border-radius: 2px; vertical-align: middle; }
.node-pct > span { display: block; height: 8px; background: var(--bar); border-radius: 2px; }
.toolbar { display: flex; gap: 8px; margin-bottom: 8px; align-items: center; }
.toolbar input { padding: 4px 8px; min-width: 260px; border: 1px solid var(--line);
  border-radius: 6px; background: var(--bg); color: var(--fg); }
button { padding: 3px 10px; border: 1px solid var(--line); border-radius: 6px;
  background: var(--panel); color: var(--fg); cursor: pointer; }
.table-wrap { overflow-x: auto; }
table.mp-table { border-collapse: collapse; width: 100%; font-size: 13px;
  font-variant-numeric: tabular-nums; }
table.mp-table th, table.mp-table td { border-bottom: 1px solid var(--line);
  padding: 3px 8px; white-space: nowrap; }
table.mp-table th { position: sticky; top: 0; background: var(--panel); text-align: left; }
table.sortable th { cursor: pointer; user-select: none; }
table.sortable th[aria-sort="ascending"]::after { content: " \\25B2"; }
table.sortable th[aria-sort="descending"]::after { content: " \\25BC"; }
footer { margin-top: 28px; color: var(--muted); font-size: 12px; }
"""

JS = """
(function () {
  "use strict";
  function sortKey(cell) {
    var span = cell.querySelector("[data-v]");
    if (span) {
      var raw = span.getAttribute("data-v");
      return raw === "" ? null : parseFloat(raw);
    }
    return cell.textContent.trim().toLowerCase();
  }
  function compare(a, b, sign) {
    if (a === null || b === null) { return a === b ? 0 : (a === null ? 1 : -1); }
    return a < b ? -sign : (a > b ? sign : 0);
  }
  function sortBy(table, column, th) {
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var numeric = rows.length > 0 && rows[0].cells[column].querySelector("[data-v]") !== null;
    var current = th.getAttribute("aria-sort");
    var dir = current ? (current === "descending" ? "ascending" : "descending")
                      : (numeric ? "descending" : "ascending");
    var heads = table.tHead.rows[0].cells;
    for (var i = 0; i < heads.length; i++) { heads[i].removeAttribute("aria-sort"); }
    th.setAttribute("aria-sort", dir);
    var sign = dir === "ascending" ? 1 : -1;
    var keyed = rows.map(function (row, index) {
      return { row: row, key: sortKey(row.cells[column]), index: index };
    });
    keyed.sort(function (a, b) { return compare(a.key, b.key, sign) || a.index - b.index; });
    keyed.forEach(function (item) { body.appendChild(item.row); });
  }
  Array.prototype.forEach.call(document.querySelectorAll("table.sortable"), function (table) {
    var heads = table.tHead.rows[0].cells;
    Array.prototype.forEach.call(heads, function (th, column) {
      th.tabIndex = 0;
      th.addEventListener("click", function () { sortBy(table, column, th); });
      th.addEventListener("keydown", function (event) {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          sortBy(table, column, th);
        }
      });
    });
  });
  var filter = document.getElementById("filter");
  if (filter) {
    filter.addEventListener("input", function () {
      var needle = filter.value.trim().toLowerCase();
      var table = document.querySelector("#modules table");
      Array.prototype.forEach.call(table.tBodies[0].rows, function (row) {
        var text = (row.cells[0].textContent + " " + row.cells[1].textContent).toLowerCase();
        row.style.display = needle === "" || text.indexOf(needle) !== -1 ? "" : "none";
      });
    });
  }
  Array.prototype.forEach.call(document.querySelectorAll("button[data-open]"), function (button) {
    button.addEventListener("click", function () {
      var open = button.getAttribute("data-open") === "1";
      Array.prototype.forEach.call(document.querySelectorAll(".tree details"), function (d) {
        d.open = open;
      });
    });
  });
  document.documentElement.setAttribute("data-ready", "1");
})();
"""

TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="moduleprofiler {{ version }}">
<title>{{ title }}</title>
<style>{{ css }}</style>
</head>
<body>
<header>
<h1 id="title">{{ title }}</h1>
<p class="sub">{{ subtitle }}</p>
</header>
<section id="summary" class="cards">
{%- for card in cards %}
<div class="card"><div class="value" title="{{ card.raw }}">{{ card.text }}</div>
{#- #}<div class="label">{{ card.label }}</div></div>
{%- endfor %}
</section>
{%- if notes %}
<ul id="notes" class="notes">
{%- for note in notes %}
<li>{{ note }}</li>
{%- endfor %}
</ul>
{%- endif %}
<h2>Where the work goes</h2>
<section id="charts" class="charts">
{%- for chart in charts %}
<figure class="chart" id="chart-{{ chart.id }}">
<figcaption>{{ chart.title }}</figcaption>
{%- for bar in chart.bars %}
<div class="bar-row"><span class="bar-label" title="{{ bar.label }}">{{ bar.label }}</span>
{#- #}<span class="bar-track"><span class="bar" style="width: {{ bar.width }}%"></span></span>
{#- #}<span class="bar-value">{{ bar.text }} · {{ bar.pct }}</span></div>
{%- endfor %}
</figure>
{%- endfor %}
</section>
<h2>Module tree</h2>
<section id="tree">
<div class="toolbar"><button type="button" data-open="1">Expand all</button>
{#- #}<button type="button" data-open="0">Collapse all</button>
{#- #}<span class="muted">{{ tree_caption }}</span></div>
<div class="tree">
{%- macro node(n) -%}
{%- set line -%}
<span class="node-name">{{ n.name }}</span><span class="node-type">{{ n.type }}</span>
{#- #}<span class="node-stats">{{ n.stats }}</span>
{%- if n.width is not none %}<span class="node-pct" title="{{ n.pct }}">
{#- #}<span style="width: {{ n.width }}%"></span></span>{% endif -%}
{%- endset -%}
{%- if n.children %}
<details{% if n.open %} open{% endif %}><summary>{{ line }}</summary>
{%- for child in n.children %}{{ node(child) }}{% endfor %}
</details>
{%- else %}
<div class="leaf">{{ line }}</div>
{%- endif %}
{%- endmacro %}
{%- for root in tree %}{{ node(root) }}{% endfor %}
</div>
</section>
<h2>All modules</h2>
<section id="modules">
<div class="toolbar"><input id="filter" type="search" placeholder="Filter by module or type"
  aria-label="Filter modules"><span class="muted">Click a column to sort.</span></div>
<div class="table-wrap">
{{ table }}
</div>
</section>
<footer>Generated by moduleprofiler {{ version }}. Counting convention: one multiply = 1 op,
one add = 1 op; FLOPs = 2 x MACs.</footer>
<script>{{ js }}</script>
</body>
</html>
"""
