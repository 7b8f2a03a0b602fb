"""One vocabulary: every column any result shows is a registered column (it has one name,
one unit, one own/inclusive rule and a line in docs/glossary.md), and no frame holds one
quantity under two names."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import warnings
from collections.abc import Callable
from itertools import combinations
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch import nn

from moduleprofiler import Profiler, TimingOptions
from moduleprofiler.compiled import compare_compiled
from moduleprofiler.efficiency import TrafficListener, device_peaks, with_efficiency
from moduleprofiler.export.columns import registered_columns
from moduleprofiler.records import ProfileData

QUICK = TimingOptions(num_iters=4, drop_first=1, warmup_seconds=0.0, progress=False,
                      measure_overhead=False)


def _model() -> nn.Module:
    # deep enough that the training forward's live memory (activations saved for backward)
    # differs from inference's in some row: two quantities, two names
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                         nn.Sequential(nn.Linear(64, 4)))


def _training_profiler() -> ProfileData:
    """The result of a TrainingProfiler over ten steps of a plain training loop (five of
    each kind it alternates: a statistic of one sample would equal every other)."""
    from moduleprofiler import TrainingProfiler

    model = _model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with TrainingProfiler(model, start_step=1, stop_step=11) as profiler:
        for _ in range(12):
            optimizer.zero_grad()
            model(torch.randn(32, 8)).sum().backward()
            optimizer.step()
            profiler.step()
    return profiler.result()


RESULTS: dict[str, Callable[[], ProfileData]] = {
    "profile": lambda: Profiler().profile(_model(), torch.randn(32, 8)),
    "profile_backward": lambda: Profiler().profile(_model(), torch.randn(32, 8),
                                                   backward=True),
    "time_modules": lambda: Profiler().time_modules(_model(), torch.randn(32, 8), QUICK),
    "train_step_times": lambda: Profiler().train_step_times(_model(), torch.randn(32, 8),
                                                            QUICK),
    "measure_memory": lambda: Profiler().measure_memory(_model(), torch.randn(32, 8),
                                                        train=True),
    "predict": lambda: Profiler().predict(_model(), torch.randn(32, 8), "H100 SXM"),
    "compare_compiled": lambda: compare_compiled(torch.compile(_model()), torch.randn(32, 8),
                                                 QUICK),
    "training_profiler": _training_profiler,
    "with_efficiency": lambda: with_efficiency(
        Profiler().profile(_model(), torch.randn(32, 8), backward=True,
                           listeners=[TrafficListener()]), device_peaks("H100 SXM")),
}


@pytest.fixture(scope="module", params=list(RESULTS))
def result(request: pytest.FixtureRequest) -> ProfileData:
    return RESULTS[request.param]()


def _frames(result: ProfileData) -> dict[str, pd.DataFrame]:
    return {aggregate: result.to_df(aggregate)  # type: ignore[attr-defined]
            for aggregate in ("call", "module", "type")}


def test_every_column_is_registered(result: ProfileData) -> None:
    # a registered column, or the share (_pct, 0-100) of one, as every view derives it
    registered = {spec.name for spec in registered_columns()}
    for aggregate, frame in _frames(result).items():
        unknown = [name for name in frame.columns if name not in registered
                   and name.removesuffix("_pct") not in registered]
        assert unknown == [], (aggregate, unknown)


def _table_results() -> dict[str, pd.DataFrame]:
    """The tables of every public result that is no ``Profile``: a listener's, a cache's, a
    generation's, a sweep's, the ranks', a training loop's."""
    from moduleprofiler.distributed import DistributedProfile
    from moduleprofiler.language import ExpertLoad, profile_generation, text_inputs
    from tests.language.tiny import gpt2, mixtral

    tables: dict[str, pd.DataFrame] = {}
    moe = mixtral()
    load = ExpertLoad()
    Profiler().profile(moe, text_inputs(moe, 1, 8), listeners=[load])
    tables["ExpertLoad.to_df()"], tables["ExpertLoad.balance()"] = load.to_df(), load.balance()
    model = gpt2()
    run = profile_generation(model, text_inputs(model, 1, 4), max_new_tokens=2,
                             min_new_tokens=2)
    tables["GenerationProfile.to_df()"] = run.to_df()
    cache = run.steps[-1].kv_cache
    assert cache is not None
    tables["KVCacheSize.to_df()"] = cache.to_df()
    tables["PredictionSweep.to_df()"] = Profiler().sweep(_model(), torch.randn(4, 8),
                                                         batch_sizes=[1, 2]).to_df()
    counted = Profiler().profile(_model(), torch.randn(4, 8))
    ranks = DistributedProfile((counted, Profiler().profile(_model(), torch.randn(6, 8))))
    tables["DistributedProfile.to_df()"] = ranks.to_df()
    tables["DistributedProfile.module_stats()"] = ranks.module_stats()
    tables["DistributedProfile.stragglers()"] = ranks.stragglers(by="self_macs")
    tables["TrainingProfiler.result().to_df('module')"] = _training_profiler().to_df("module")
    return tables


def test_every_column_of_a_table_that_is_no_profile_is_registered() -> None:
    # ExpertLoad's tables (layer, expert, tokens, share, experts, top_k, ...) and a cache's
    # (layer, kind, tokens, capacity, key_bytes, ...) were in no registry and no glossary;
    # "layer" was a module path in one and a position in the other, "tokens" the cache's
    # context_tokens; the ranks' module_stats() (macs_median...) and stragglers() (median,
    # excess, ratio) columns were named nowhere. Row keys of such tables are registered
    # columns too.
    tables = _table_results()  # their packages imported: every column they declare
    page = (Path(__file__).resolve().parent.parent / "docs" / "glossary.md").read_text(
        encoding="utf-8")
    row_keys = {line.split("`")[1] for line in page.splitlines()
                if line.startswith("| `") and "| row key |" in line}  # a sweep's dtype
    registered = {spec.name for spec in registered_columns()} | row_keys
    # a statistic across ranks of a column: <column>_median, <column>_skew...
    suffixes = tuple(line.split("`")[1].removeprefix("<column>") for line in page.splitlines()
                     if line.startswith("| `<column>_"))
    assert "_median" in suffixes

    def named(column: str) -> bool:
        return column in registered or column.removesuffix("_pct") in registered or any(
            column.endswith(suffix) and column.removesuffix(suffix) in registered
            for suffix in suffixes)

    unknown = {name: [column for column in frame.columns if not named(column)]
               for name, frame in tables.items()}
    assert {name: columns for name, columns in unknown.items() if columns} == {}


def test_no_share_under_a_second_name_or_scale(result: ProfileData) -> None:
    # to_df("type") held a type's share of the ops as ops_fraction (0-1) while every view's
    # percentage machinery (pct_of=, top(), the HTML report) wrote it as self_ops_pct
    # (0-100): a column equal in every row to a view's share of a quantity, or to that share
    # over 100, is the share under a second name
    from moduleprofiler.export.select import add_percentages, profile_totals

    for aggregate, frame in _frames(result).items():
        numeric = [name for name in frame.columns if pd.api.types.is_numeric_dtype(frame[name])
                   and not pd.api.types.is_bool_dtype(frame[name])]
        quantities = [name for name in numeric if not name.endswith("_pct")]
        shares = add_percentages(frame, [f"{name}_pct" for name in quantities],
                                 profile_totals(result))  # type: ignore[arg-type]
        twins = []
        for base in quantities:
            share = pd.to_numeric(shares[f"{base}_pct"], errors="coerce").astype(float)
            if share.isna().all() or share.fillna(0).abs().sum() == 0:
                continue
            for other in numeric:
                if other in (base, f"{base}_pct"):
                    continue
                values = pd.to_numeric(frame[other], errors="coerce").astype(float)
                for scale in (1.0, 0.01):
                    if ((values - share * scale).abs().fillna(0) < 1e-9).all() \
                            and values.isna().equals(share.isna()):
                        twins.append((aggregate, other, f"{base}_pct", scale))
        assert twins == []


def test_no_quantity_under_two_names(result: ProfileData) -> None:
    # two measured columns (times, bytes) equal in every row of a module frame are one
    # quantity shown twice (forward_ms beside time_median_ms was)
    frame = _frames(result)["module"]
    measured = [name for name in frame.columns
                if name.endswith(("_ms", "_bytes")) and frame[name].notna().any()
                and pd.api.types.is_numeric_dtype(frame[name])]
    twins = [(a, b) for a, b in combinations(measured, 2)
             if frame[a].astype(float).equals(frame[b].astype(float))
             and frame[a].fillna(0).astype(float).abs().sum() > 0]
    assert twins == []


# -- one name, one quantity: result attributes named like a column ----------------------------
_QUANTITY_KINDS = frozenset({"count", "bytes", "time", "number", "ratio", "fraction", "percent"})
_PACKAGES = ("moduleprofiler", "moduleprofiler.timing", "moduleprofiler.memory",
             "moduleprofiler.efficiency", "moduleprofiler.prediction", "moduleprofiler.language",
             "moduleprofiler.distributed", "moduleprofiler.export", "moduleprofiler.integrations",
             "moduleprofiler.compat")
SAME_QUANTITY: dict[str, str] = {
    "CallRecord.*": "a call's record: the per-call frame's columns are its fields",
    "ModuleInfo.*": "a module's facts: the module frame's columns are its fields",
    "CallMemory.*": "the deprecated per-call view of a memory report's records",
    "MemoryReport.param_bytes": "the model's: the root's value of the column",
    "MemoryReport.buffer_bytes": "the model's: the root's value of the column",
    "PassMemory.saved_bytes": "the pass's: the root call's value of the column",
    "Utilization.recompute_flops": "the step's: the root's value of the column (the own "
                                   "shares summed over the calls)",
    "Step.max_live_bytes": "the step's: its outermost call's value of the column",
    "Step.time_ms": "the step's: the column of the step table",
    "CacheLayer.*": "a cache layer: the rows of KVCacheSize.to_df() are its fields",
    "KVCacheSize.bytes_per_token": "the cache's: its self-attention layers' kv_cache_bytes "
                                   "over their capacity, the column's value for them together",
}
"""Every public result attribute that bears the name of a registered quantity column, and why
it is that quantity (reviewed by hand: a new one fails until it is listed here)."""


_REGISTRY_SCRIPT = f"""
import importlib, json
import moduleprofiler
moduleprofiler._load_public_names()
for package in {_PACKAGES!r}:
    importlib.import_module(package)
from moduleprofiler.export.columns import registered_columns
print(json.dumps({{spec.name: [spec.kind, spec.description, spec.aggregation]
                  for spec in registered_columns()}}))
"""


@functools.cache
def _registry() -> dict[str, tuple[str, str, str]]:
    """Every column the package registers, ``name -> (kind, description, aggregation)``, read
    in a fresh interpreter: in this one, other tests register columns of their own (and a
    profile read from JSON declares its document's)."""
    done = subprocess.run([sys.executable, "-c", _REGISTRY_SCRIPT], capture_output=True,
                          text=True, check=True, cwd=Path(__file__).resolve().parents[1])
    return {name: (kind, text, aggregation)
            for name, (kind, text, aggregation) in json.loads(done.stdout).items()}


def _package_columns() -> dict[str, tuple[str, str]]:
    """Every column the package registers, ``name -> (kind, description)``."""
    return {name: (kind, text) for name, (kind, text, _) in _registry().items()}


def _named_like_columns() -> dict[str, set[str]]:
    """Public result class -> its fields and properties named like a quantity column."""
    import dataclasses
    import importlib
    import inspect

    for package in _PACKAGES:
        importlib.import_module(package)
    quantities = {name for name, (kind, _) in _package_columns().items()
                  if kind in _QUANTITY_KINDS}
    found: dict[str, set[str]] = {}
    for package in _PACKAGES:
        module = importlib.import_module(package)
        for name in getattr(module, "__all__", ()):
            cls = getattr(module, name, None)
            if not inspect.isclass(cls):
                continue
            attributes = {attribute for attribute in dir(cls) if not attribute.startswith("_")
                          and isinstance(inspect.getattr_static(cls, attribute), property)}
            if dataclasses.is_dataclass(cls):
                attributes |= {field.name for field in dataclasses.fields(cls)}
            if attributes & quantities:
                found[cls.__name__] = attributes & quantities
    return found


def test_a_result_attribute_named_like_a_column_is_that_quantity() -> None:
    # Utilization.achieved_tflops (the model FLOPs of a whole step per second) shared its name
    # with the achieved_tflops column (one call's own ops per second of its self time): one
    # name, two quantities. Such an attribute is listed in SAME_QUANTITY, or renamed.
    unreviewed = sorted(f"{cls}.{attribute}" for cls, attributes in _named_like_columns().items()
                        for attribute in attributes
                        if f"{cls}.{attribute}" not in SAME_QUANTITY
                        and f"{cls}.*" not in SAME_QUANTITY)
    assert unreviewed == []


def test_the_same_quantity_list_holds_no_stale_entry() -> None:
    found = _named_like_columns()
    stale = [entry for entry in SAME_QUANTITY
             if entry.partition(".")[0] not in found or (
                 not entry.endswith(".*")
                 and entry.partition(".")[2] not in found[entry.partition(".")[0]])]
    assert stale == []


def test_every_registered_column_is_described() -> None:
    # the glossary's meaning column: unit, own or inclusive and which pass, for each name
    assert [name for name, (_, text) in _package_columns().items() if not text.strip()] == []


# -- one own/inclusive rule: a bare name is the subtree, self_ the module's own share ---------
NO_BARE_PARTNER: dict[str, str] = {
    "self_share": "a ratio (a module's self time over its time), not the own share of a "
                  "quantity",
    "self_saved_param_bytes": "parameters saved for the backward: only a module's own "
                              "parameters are its, so no subtree sum is reported",
    "self_fused_kernels": "a per-module fact of the compiled clock (kernels fusing work of "
                          "several submodules, booked once to the deepest module holding "
                          "them), not a per-call value a subtree could be summed from",
}
"""``self_`` columns without a bare twin, and why that is right (reviewed by hand)."""


def test_no_registered_column_uses_the_old_own_or_inclusive_names() -> None:
    # inclusive_ops was the inclusive count and own_params the own one: the bare name is the
    # subtree now and self_ the own share; only the 0.0.4 face (its dicts, not the registry)
    # keeps the old names
    old = [name for name in _package_columns()
           if name.startswith(("inclusive_", "own_"))]
    assert old == []


def test_every_self_column_has_its_inclusive_twin() -> None:
    names = set(_package_columns())
    orphans = sorted(name for name in names if name.startswith("self_")
                     and name.removeprefix("self_") not in names
                     and name not in NO_BARE_PARTNER)
    assert orphans == []


def test_the_no_bare_partner_list_holds_no_stale_entry() -> None:
    names = set(_package_columns())
    assert [name for name in NO_BARE_PARTNER
            if name not in names or name.removeprefix("self_") in names] == []


OWN_WITHOUT_SELF: dict[str, str] = {
    "calls": "how often the module was called, not a share of a quantity of its subtree (a "
             "type's is summed over its modules)",
    "modules": "how many modules a type has: a per-type count with no module subtree",
    "unknown_calls": "a type's calls whose own ops are unknown: a per-type count with no "
                     "module subtree",
    "output_bytes": "the new storages among a call's outputs: a container's output is also "
                    "its last child's, so no subtree sum of it means anything",
    "operator_bytes": "a row of the per-operator table (bytes one aten operator reads and "
                      "writes), no module column",
}
"""Registered ``sum`` (own share) columns without ``self_`` in their name, and why that is
right (reviewed by hand)."""


def test_every_own_share_column_is_named_self() -> None:
    # launches, collectives, comm_ms, roofline_ms were own under bare names beside ops, the
    # subtree's: a sum (own share) column is self_X, and X, its subtree, stands beside it
    unnamed = sorted(name for name, (_, _, aggregation) in _registry().items()
                     if aggregation == "sum" and not name.startswith("self_")
                     and name not in OWN_WITHOUT_SELF)
    assert unnamed == []


def test_the_own_without_self_list_holds_no_stale_entry() -> None:
    registry = _registry()
    assert [name for name in OWN_WITHOUT_SELF
            if name not in registry or registry[name][2] != "sum"] == []


def test_every_self_column_is_an_own_share() -> None:
    # self_ names the module's own share: the views sum it over the calls and modules (the
    # self_ time statistics are per module, of the self samples)
    misnamed = sorted(name for name, (kind, _, aggregation) in _registry().items()
                      if name.startswith("self_") and aggregation not in ("sum", "none")
                      and kind != "samples")
    assert misnamed == []


def test_own_and_inclusive_columns_aggregate_by_the_rule() -> None:
    # the own count sums over rows to the model's total; the bare count is the subtree's
    import moduleprofiler.distributed
    import moduleprofiler.efficiency  # noqa: F401  (their listeners' columns)
    from moduleprofiler.export.columns import column_spec

    for name in ("ops", "macs", "flops", "backward_ops", "params", "launches",
                 "backward_launches", "recompute_ops", "recompute_flops", "collectives",
                 "comm_bus_bytes", "comm_ms", "backward_comm_ms", "roofline_ms",
                 "backward_roofline_ms"):
        assert column_spec(name).aggregation == "inclusive", name
        assert column_spec(f"self_{name}").aggregation == "sum", name


def test_own_shares_add_up_to_the_root_inclusive_count() -> None:
    # Linear(8, 64): 32 rows * 64 * (2 * 8 - 1 + 1) = 32768 ops; Tanh 7 per element,
    # 32 * 64 * 7 = 14336; Linear(64, 64): 32 * 64 * 128 = 262144; Tanh 14336;
    # Linear(64, 4): 32 * 4 * 128 = 16384
    profile = Profiler().profile(_model(), torch.randn(32, 8))
    frame = profile.to_df("module").set_index("module")
    total = 32768 + 14336 + 262144 + 14336 + 16384  # 339968
    assert int(frame["self_ops"].sum()) == int(frame.loc["__root__", "ops"]) == total
    assert int(frame.loc["4", "self_ops"]) == 0 and int(frame.loc["4", "ops"]) == 16384
    assert int(frame["self_params"].sum()) == int(frame.loc["__root__", "params"])


def test_every_result_renders_in_every_output(result: ProfileData,
                                              tmp_path: Path) -> None:
    # every result is a view of its records: each output renders, names the root's type and,
    # saved as JSON, reads back as the same kind of result with the same calls
    profile = result
    root = profile.records[0]
    assert root.type_name == "Sequential"
    texts = {
        "summary": profile.summary().to_string(),  # type: ignore[attr-defined]
        "tree": str(profile.tree()),  # type: ignore[attr-defined]
        "table": str(profile.table()),  # type: ignore[attr-defined]
        "top": str(profile.top()),  # type: ignore[attr-defined]
        "csv": profile.to_csv(),  # type: ignore[attr-defined]
        "markdown": profile.to_markdown(),  # type: ignore[attr-defined]
        "latex": profile.to_latex(),  # type: ignore[attr-defined]
        "html": profile.to_html(),  # type: ignore[attr-defined]
        "text": profile.to_text(),  # type: ignore[attr-defined]
    }
    assert "Sequential" in texts["html"] and "Sequential" in texts["tree"], texts["tree"]
    assert all(isinstance(text, str) and text for text in texts.values())
    assert json.dumps(profile.to_dict(), default=str)  # type: ignore[attr-defined]
    back = type(profile).from_json(profile.to_json())  # type: ignore[attr-defined]
    assert type(back) is type(profile)
    assert [r.path for r in back.records] == [r.path for r in profile.records]


NOT_A_COLUMN: dict[str, str] = {
    "metrics": "a record's listener columns: each is a column of the frame under its own name",
    "input_size": "0.0.4's input_size (its io-size function's first input shape), for the "
                  "0.0.4 face",
    "output_size": "0.0.4's output_size, for the 0.0.4 face",
    "is_leaf": "a module fact the frames do not show",
    "container": "a module fact the frames do not show (its status is the row's ops_source)",
    "shared_tensors": "a module's tied tensors, a list per module",
    "shared_with": "a column only of a model that ties a parameter (none here)",
}
"""Keys of a JSON record or module that are no column of the frame of its calls or modules,
and why (reviewed by hand)."""


def _frame_value(value: object) -> object:
    return None if value is pd.NA or value is None or (
        isinstance(value, float) and value != value) else value


def test_a_field_has_one_name_in_frames_and_json(result: ProfileData) -> None:
    # a record's position, module path and class name were call, module and type in the
    # frames and index, path and type_name in to_dict() and the JSON (and in a memory pass's
    # peak_call): every key of a record or module is the frame's column of the same values
    # (the root's path is "" there, __root__ in frames), or a field listed in NOT_A_COLUMN
    document = json.loads(result.to_json())  # type: ignore[attr-defined]
    for table, aggregate in (("records", "call"), ("modules", "module")):
        frame = result.to_df(aggregate, columns="all")  # type: ignore[attr-defined]
        rows = document[table]
        keys = list(dict.fromkeys(key for row in rows for key in row))
        assert [key for key in keys if key not in frame.columns
                and key not in NOT_A_COLUMN] == [], table
        if aggregate == "module":  # one row a module, named_modules() order
            frame = frame.set_index("module").loc[
                [row["module"] or "__root__" for row in rows]].reset_index()
        for key in (key for key in keys if key in frame.columns):
            stored = [row.get(key) for row in rows]
            if key == "module":
                stored = [path or "__root__" for path in stored]
            if all(value is None or isinstance(value, (bool, int, float, str))
                   for value in stored):  # shape trees are compared by the round trip
                assert stored == [_frame_value(v) for v in frame[key].tolist()], (table, key)
    passes = document.get("result_fields") or {}
    peaks = [passes[name]["peak_call"] for name in ("inference", "training")
             if isinstance(passes.get(name), dict)]
    calls = set(result.to_df("call", columns="all").columns) | set(  # type: ignore[attr-defined]
        result.to_df("module", columns="all").columns)  # type: ignore[attr-defined]
    from moduleprofiler.memory.report import PassMemory

    for peak in peaks:  # a call's fields, its module's calls, the pass's phase
        assert [key for key in peak if key not in calls and key not in PassMemory.KEYS] == []


# -- every name the command line and the summaries print is in the glossary -------------------
def _glossary_names() -> set[str]:
    page = (Path(__file__).resolve().parent.parent / "docs" / "glossary.md").read_text(
        encoding="utf-8")
    return {line.split("`")[1] for line in page.splitlines() if line.startswith("| `")}


def _named(name: str, names: set[str]) -> bool:
    """``name`` is in the glossary, or is the share (``_pct``) of a column that is."""
    return name in names or (name.endswith("_pct") and name.removesuffix("_pct") in names)


@pytest.mark.parametrize("view", [[], ["--sort", "self_ops", "--what", "params,io,bytes"],
                                  ["--top", "2"], ["--by-operator"],
                                  ["--predict", "H100 SXM", "--batch", "1,2", "--dtype", "fp32"]])
def test_every_column_the_command_line_writes_is_in_the_glossary(
        view: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # ops_pct (in the default CSV), self_ops_pct, operator and dtype were named nowhere
    from moduleprofiler.cli import main

    assert main(["tests/export/cli_models.py:tiny", "-i", "2x4", "-f", "csv", *view]) == 0
    header = capsys.readouterr().out.splitlines()[0].split(",")
    names = _glossary_names()
    assert [name for name in header if not _named(name, names)] == []


def test_every_summary_number_is_in_the_glossary() -> None:
    # latency_ms, throughput, model_size_bytes and the peaks of profile.summary(), and the
    # per-token totals of a generation, were named nowhere
    from moduleprofiler.language import GenerationProfile, profile_generation, text_inputs
    from tests.language.tiny import gpt2

    names = _glossary_names()
    profile = Profiler().profile(_model(), torch.randn(4, 8))
    memory = Profiler().measure_memory(_model(), torch.randn(4, 8), train=True)
    assert [c for c in profile.summary(memory, 1.5).columns if c not in names] == []
    model = gpt2()
    run = profile_generation(model, text_inputs(model, 1, 4), max_new_tokens=2,
                             min_new_tokens=2)
    assert [key for key in run.summary().columns if key not in names] == []
    # each summary-only name is really a total of the run, no column of its steps table
    assert set(GenerationProfile.SUMMARY_ONLY) <= set(run.summary().columns)
    assert not set(GenerationProfile.SUMMARY_ONLY) & set(run.to_df().columns)


def test_every_memory_total_is_in_the_glossary() -> None:
    # MemoryReport.totals() held ten keys named nowhere (device, grad_bytes,
    # inference_baseline_bytes, training_peak_call...)
    from moduleprofiler.memory.report import MemoryReport

    totals = Profiler().measure_memory(_model(), torch.randn(4, 8), train=True).totals()
    assert [key for key in totals if key not in _glossary_names()] == []
    # each totals-only name is a key of totals() that no summary column holds
    assert set(MemoryReport.TOTALS_ONLY) <= set(totals)
    summary = Profiler().profile(_model(), torch.randn(4, 8)).summary().columns
    assert not set(MemoryReport.TOTALS_ONLY) & set(summary)


def test_every_callback_scalar_is_in_the_glossary() -> None:
    # the Lightning and Hugging Face callbacks logged step_ms, mfu and peak_tflops, named
    # nowhere, and the training peak as peak_bytes where profile.summary() calls the same
    # number training_peak_bytes
    from moduleprofiler.integrations.window import DEPRECATED_SCALARS, MODEL_SCALARS
    from moduleprofiler.summary_row import SUMMARY_ONLY

    names = _glossary_names()
    assert [name for name in MODEL_SCALARS if name not in names] == []
    # a name the model table holds is its column: the window's peak is the summary's
    assert "training_peak_bytes" in MODEL_SCALARS and "training_peak_bytes" in SUMMARY_ONLY
    assert not set(DEPRECATED_SCALARS) & set(MODEL_SCALARS)


# -- every key of every dict and JSON document is in the glossary ----------------------------
DATA_KEYED: dict[str, str] = {
    "columns": "column names (each checked to be a glossary name)",
    "module_metrics": "module paths",
    "phases_ms": "step phases (forward, loss, backward, optimizer, step)",
    "hooked_phases_ms": "kinds of hooked step, then step phases",
    "phases_median_ms": "step phases",
    "device_bound_from": "dtypes",
    "largest_batch": "dtypes",
    "omp_mkl_env": "environment variables",
    "allocator_env": "environment variables",
    "unsupported_ops": "operator names",
    "backward_unsupported_ops": "operator names",
}
"""Keys whose value is a map keyed by data, not by names of the vocabulary."""


def _unnamed_keys(value: object, names: set[str], where: str = "") -> list[str]:
    """The keys, at any depth of ``value`` (dicts, lists and tuples), that are no glossary
    name, each as its path; a map keyed by data (:data:`DATA_KEYED`) is not entered, except
    that a ``columns`` map's keys are column names."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{where}.{key}"
            if key not in names:
                found.append(path)
            if key == "columns" and isinstance(item, dict):
                found += [f"{path}.{name}" for name in item if not _named(name, names)]
            if key not in DATA_KEYED:
                found += _unnamed_keys(item, names, path)
    elif isinstance(value, (list, tuple)):
        for item in value:
            found += _unnamed_keys(item, names, f"{where}[]")
    return sorted(set(found))


def test_every_key_of_a_results_dict_and_json_is_in_the_glossary(result: ProfileData) -> None:
    # MemoryReport.to_dict()'s passes (kind, baseline_bytes, requested_peak_bytes...), a
    # profile document's structural keys (schema_version, totals, records...) and a timing's
    # facts (clock, calibration, budget...) were named nowhere
    names = _glossary_names()
    assert _unnamed_keys(result.to_dict(), names) == []  # type: ignore[attr-defined]
    assert _unnamed_keys(json.loads(result.to_json()), names) == []  # type: ignore[attr-defined]


def test_every_key_of_a_dict_and_json_of_a_result_that_is_no_profile_is_in_the_glossary(
) -> None:
    # LatencyResult.to_dict() held median_ms, mean_ms, n... named nowhere (median_ms is the
    # number the model table calls latency_ms); a sweep's and a distributed run's documents
    from moduleprofiler.distributed import DistributedProfile
    from moduleprofiler.timing import benchmark

    names = _glossary_names()
    latency = benchmark(_model(), torch.randn(4, 8), num_iters=4, target_ci=None,
                        warmup_seconds=0, progress=False)
    counted = Profiler().profile(_model(), torch.randn(4, 8))
    sweep = Profiler().sweep(_model(), torch.randn(4, 8), batch_sizes=[1, 2])
    documents = {"LatencyResult.to_dict()": latency.to_dict(),
                 "LatencyResult.to_json()": json.loads(latency.to_json() or ""),
                 "PredictionSweep.to_dict()": sweep.to_dict(),
                 "DistributedProfile.to_json()": json.loads(
                     DistributedProfile((counted, counted)).to_json() or "")}
    unnamed = {where: _unnamed_keys(document, names) for where, document in documents.items()}
    assert {where: keys for where, keys in unnamed.items() if keys} == {}


@pytest.mark.parametrize("argv", [
    ["tests/export/cli_models.py:tiny", "-i", "2x4", "-f", "json"],
    ["tests/export/cli_models.py:tiny", "-i", "2x4", "-f", "json", "--what", "time",
     "--iters", "5"],
    ["tests/export/cli_models.py:tiny", "-i", "2x4", "-f", "json", "--what", "memory"],
    ["tests/export/cli_models.py:tiny", "-i", "2x4", "-f", "json", "--predict", "H100 SXM",
     "--batch", "1,2"],
    ["tests/language/tiny.py:gpt2", "-i", "1x4", "--generate", "2", "--device", "cpu", "-f",
     "json"],
], ids=["count", "time", "memory", "sweep", "generate"])
def test_every_key_of_a_json_file_the_command_line_writes_is_in_the_glossary(
        argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    # --generate's JSON held its totals under "summary", named nowhere
    from moduleprofiler.cli import main

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(argv) == 0
    assert _unnamed_keys(json.loads(capsys.readouterr().out), _glossary_names()) == []
