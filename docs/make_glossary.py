"""Write docs/glossary.md from the column registry: every column any pass can produce, with
its unit, whether it is own or inclusive, its description and what produces it.

    python docs/make_glossary.py          # rewrite docs/glossary.md
    python docs/make_glossary.py --check  # exit 1 when the page is out of date

``tests/test_docs_site.py`` runs the check, so the page cannot drift from the registry."""

from __future__ import annotations

import sys
from pathlib import Path

# every package that declares columns, so that the registry is whole
import moduleprofiler
import moduleprofiler.compiled
import moduleprofiler.distributed
import moduleprofiler.efficiency
import moduleprofiler.export.by_operator
import moduleprofiler.language
import moduleprofiler.memory
import moduleprofiler.prediction
import moduleprofiler.timing  # noqa: F401
from moduleprofiler.distributed.gathered import ACROSS_RANKS
from moduleprofiler.export.columns import BUILTIN, ColumnSpec, registered_columns
from moduleprofiler.export.keys import DOCUMENT_KEYS
from moduleprofiler.facts import TimingFacts
from moduleprofiler.integrations.window import MODEL_SCALARS
from moduleprofiler.language.generation import GenerationProfile
from moduleprofiler.memory.report import MemoryReport, PassMemory
from moduleprofiler.prediction.predict import PredictedProfile
from moduleprofiler.prediction.sweep import PredictionSweep
from moduleprofiler.summary_row import SUMMARY_ONLY
from moduleprofiler.timing.latency import LatencyResult
from moduleprofiler.timing.results import TimedModules

PAGE = Path(__file__).resolve().parent / "glossary.md"

_SCOPE = {
    "sum": "own",
    "inclusive": "inclusive",
    "max": "largest call",
    "first": "first call",
    "all": "every call",
    "none": "per call",
}
"""How a column combines a module's calls, in one word: ``own`` values add up across the
tree, ``inclusive`` ones hold the calls inside them."""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _row(spec: ColumnSpec) -> str:
    scope = "statistic of the samples" if spec.statistic is not None else _SCOPE[spec.aggregation]
    notes = spec.description
    if spec.per_module:
        notes += f" (per module: `{spec.per_module}`)"
    if spec.needs:
        notes += f". Needs {spec.needs}"
    return (f"| `{spec.name}` | {_cell(spec.label)} | {_cell(spec.unit or '-')} | {scope} | "
            f"{_cell(notes.strip('. ')) or '-'} |")


ROW_KEYS = {
    "operator": "the aten operator a row of the per-operator table counts "
                "(profile.by_operator(), --by-operator)",
    "dtype": "the dtype a row of a prediction sweep is predicted in (sweep(), --batch)",
}
"""The row keys of the two tables that are not per module (the other columns of those tables
are registered ones)."""


_WINDOW_ONLY = {name: meaning for name, meaning in MODEL_SCALARS.items()
                if name not in SUMMARY_ONLY and name not in BUILTIN
                and name not in {spec.name for spec in registered_columns()}}
"""The callbacks' model scalars that no summary holds (``training_peak_bytes`` is
``profile.summary()``'s) and no column names (``complete`` and ``backward_complete`` are the
model's flags, 1 or 0)."""


KEYS: tuple[tuple[str, dict[str, str]], ...] = (
    ("Profile.to_dict(), JSON", DOCUMENT_KEYS),
    ("a timing's facts", TimingFacts.KEYS),
    ("a timing's to_dict()", TimedModules.KEYS),
    ("LatencyResult.to_dict()", LatencyResult.KEYS),
    ("MemoryReport.to_dict()", PassMemory.KEYS),
    ("PredictedProfile result_fields", PredictedProfile.KEYS),
    ("PredictionSweep.to_dict()", PredictionSweep.KEYS),
    ("--generate -f json", GenerationProfile.KEYS),
)
"""Where each table of structural keys is found, and the table (name -> meaning)."""


def _key_rows(taken: set[str]) -> tuple[list[str], list[str]]:
    """The rows of the keys table, one a name (a name several tables hold: its places and
    meanings joined), and the sentences for the keys whose name the page gives a column or
    number already (``taken``): there the key means something else, said once beside it."""
    merged: dict[str, tuple[list[str], list[str]]] = {}
    for where, keys in KEYS:
        for name, meaning in keys.items():
            places, meanings = merged.setdefault(name, ([], []))
            places.append(where)
            meanings.append(meaning)
    rows = [_plain_row(name, ", ".join(places), "; ".join(meanings))
            for name, (places, meanings) in merged.items() if name not in taken]
    also = [f"* `{name}` ({', '.join(places)}): {'; '.join(meanings)}"
            for name, (places, meanings) in merged.items() if name in taken]
    return rows, also


def _plain_row(name: str, where: str, meaning: str) -> str:
    return f"| `{name}` | {_cell(where)} | {_cell(meaning)} |"


def glossary() -> str:
    """The page: one table of every shown column, one of the sample columns kept for the
    statistics."""
    specs = sorted(registered_columns(), key=lambda spec: spec.name)
    shown = [spec for spec in specs if spec.kind != "samples"]
    samples = [spec for spec in specs if spec.kind == "samples"]
    key_rows, also = _key_rows({spec.name for spec in specs} | set(SUMMARY_ONLY)
                               | set(GenerationProfile.SUMMARY_ONLY)
                               | set(MemoryReport.TOTALS_ONLY) | set(_WINDOW_ONLY)
                               | set(ROW_KEYS))
    header = ["| column | label | unit | own or inclusive | meaning |",
              "|---|---|---|---|---|"]
    lines = [
        "# Glossary of columns",
        "",
        "<!-- generated by docs/make_glossary.py from the column registry: do not edit -->",
        "",
        "Every number this package reports has one name, the same in DataFrames, CSV, JSON,",
        "Markdown, LaTeX, HTML, the terminal, TensorBoard tags, callback scalars and the",
        "command line. One rule for own and inclusive, torch.profiler's: a bare name",
        "(`ops`, `params`, `forward_ms`) holds the module's whole subtree, its call and",
        "every call inside it, and the model's value is the root's; `self_*` holds the",
        "module's own share (`self_ops`, `self_params`, `self_forward_ms`), and those add up",
        "over the tree to the model's total (`self_launches`/`launches`,",
        "`self_comm_ms`/`comm_ms`, `self_roofline_ms`/`roofline_ms` too). The few counts",
        "that are own without `self_` have no subtree meaning (`calls`, `output_bytes`);",
        "the table says own or inclusive for each column.",
        "",
        f"## Columns ({len(shown)})",
        "",
        *header,
        *(_row(spec) for spec in shown),
        "",
        "## Shares",
        "",
        "A column name with `_pct` appended is that column's share of its total, in percent",
        "(0-100): `ops_pct` is a module's ops over the model's, `self_ops_pct` its own ops",
        "over the model's (a type's, in `to_df(\"type\")`; it was `ops_fraction`, 0-1, there),",
        "`params_pct`, `operator_bytes_pct` and any other likewise; `<NA>`",
        "(`-` in text) when the value or the total is unknown or 0. `--what` and the views take",
        "these names for any column; `--min-pct` filters on `ops_pct`, or on the share of",
        "`--sort`'s column.",
        "",
        f"## Across ranks ({len(ACROSS_RANKS)})",
        "",
        "`DistributedProfile.module_stats()` gives, per module, these statistics of a column",
        "across the ranks under its name with the suffix appended (`macs_median`,",
        "`self_macs_skew`), and `stragglers(by=)` the last three of its `by` column",
        "(`time_median_ms_excess`); the column's unit holds, except for `_skew` and `_ratio`.",
        "",
        "| name | where | meaning |",
        "|---|---|---|",
        *(_plain_row(f"<column>_{suffix}", "DistributedProfile", meaning)
          for suffix, meaning in ACROSS_RANKS.items()),
        "",
        f"## Whole-model and whole-run numbers ({len(SUMMARY_ONLY)} + "
        f"{len(GenerationProfile.SUMMARY_ONLY)} + {len(MemoryReport.TOTALS_ONLY)} + "
        f"{len(_WINDOW_ONLY)} + {len(ROW_KEYS)})",
        "",
        "The one-row model table (`profile.summary()`) and a generation's totals",
        "(`GenerationProfile.summary()`, the totals under `--generate`'s table) hold the model's",
        "or the run's value of the columns above under the same names (`params`, `macs`,",
        "`flops`, `saved_bytes`, `time_ms`, `kv_cache_bytes`...), and these numbers, which no",
        "per-module column holds (a memory report's `totals()` adds its passes' other",
        "figures); the Lightning and Hugging Face callbacks log the model's",
        "scalars `moduleprofiler/<name>` under these names too (`training_peak_bytes` and the",
        "three below); the per-operator table and a prediction sweep are keyed by the last two.",
        "",
        "| name | where | meaning |",
        "|---|---|---|",
        *(_plain_row(name, "profile.summary()", meaning)
          for name, meaning in SUMMARY_ONLY.items()),
        *(_plain_row(name, "GenerationProfile.summary()", meaning)
          for name, meaning in GenerationProfile.SUMMARY_ONLY.items()),
        *(_plain_row(name, "MemoryReport.totals()", meaning)
          for name, meaning in MemoryReport.TOTALS_ONLY.items()),
        *(_plain_row(name, "callback scalar", meaning) for name, meaning in _WINDOW_ONLY.items()),
        *(_plain_row(name, "row key", meaning) for name, meaning in ROW_KEYS.items()),
        "",
        f"## Keys of dicts and JSON documents ({len(key_rows)})",
        "",
        "The plain-Python views (`to_dict()`) and JSON documents of every result hold the",
        "columns above under the same names (a record's `ops`, a module's `params`, a",
        "memory pass's `saved_bytes`) inside these keys, which name the document's parts and",
        "the facts of a run rather than a per-module number. Maps keyed by data (a column",
        "name, a module path, a phase, a dtype, an environment variable) are not listed.",
        "",
        "| name | where | meaning |",
        "|---|---|---|",
        *key_rows,
        "",
        "These keys bear the name of a column or number above, and mean something else",
        "where they are keys:",
        "",
        *also,
        "",
        f"## Per-iteration samples ({len(samples)})",
        "",
        "Kept on each call record for the statistics above; never shown in tables.",
        "",
        *header,
        *(_row(spec) for spec in samples),
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    text = glossary()
    if "--check" in argv:
        if PAGE.read_text(encoding="utf-8") != text:
            print(f"{PAGE} is out of date: run python docs/make_glossary.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
