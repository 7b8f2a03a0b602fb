"""tree / table / top: rows, columns, percentages, filters; and columns that later engines
add (``*_ms``, ``*_bytes``) flowing through every view without code changes."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler
from moduleprofiler.export import View, column_spec, compare, summary, summary_frame
from moduleprofiler.export import select as select_module
from moduleprofiler.export.frame import module_frame
from tests.export.profiles import tiny

_UNHOOKED_RUN = ("; one run without its hooks (module.forward(x), a class replacing __call__) "
                 "is listed too: its work is in its caller's own count")
"""The clause the note on modules not called ends with."""


def test_tree_keeps_raw_numbers_and_percentages() -> None:
    view = tiny().tree()
    assert isinstance(view, View) and view.kind == "tree"
    frame = view.df
    # the custom module has no formula: the flags say which rows are lower bounds
    assert list(frame.columns) == ["module", "type", "params", "output_shapes",
                                   "macs", "ops", "ops_pct", "complete", "ops_complete"]
    root = frame.iloc[0]
    # 10 + 7776 + 576 + 144 + 2890 + 10 = 11406 known ops: a lower bound of the total, so
    # no share of it is known
    assert root["ops"] == 11_406 and frame["ops_pct"].isna().all()
    params = tiny().tree(["params", "params_pct"]).df.set_index("module")
    # conv: 112 of the model's 1576 parameters
    assert params.loc["conv", "params_pct"] == pytest.approx(100 * 112 / 1_576)


def test_unknown_stays_unknown_not_zero() -> None:
    frame = tiny().tree().df.set_index("module")
    assert pd.isna(frame.loc["custom", "ops"])  # no formula, nothing inside
    assert pd.isna(frame.loc["unused", "ops"])  # never called
    assert "custom (Custom)" in str(tiny()) and "[not called]" in str(tiny())


def test_tree_filters_keep_the_tree_connected() -> None:
    profile = tiny()
    root = "__root__"  # the one root name of every output
    assert list(profile.tree(max_depth=1).df["module"]) == [root, "conv", "bn", "block",
                                                            "custom", "unused"]
    assert list(profile.tree(include="block.fc").df["module"]) == [root, "block", "block.fc"]
    assert list(profile.tree(exclude="block").df["module"]) == [root, "conv", "bn", "custom",
                                                                "unused"]
    assert list(profile.tree(min_pct=20).df["module"]) == [root, "conv", "block", "block.fc"]
    assert list(profile.tree(include=["Linear", "ReLU"]).df["module"]) == [
        root, "block", "block.act", "block.fc", "unused"]


def test_a_pattern_that_matches_nothing_is_said_and_an_empty_one_refused() -> None:
    profile = tiny()
    # "linear" (the type is Linear: globs are case-sensitive) matched nothing in silence
    view = profile.tree(exclude=["linear", "block"])
    assert list(view.df["module"]) == ["__root__", "conv", "bn", "custom", "unused"]
    assert view.notes[0] == ("the exclude pattern 'linear' matches no module path or type "
                             "(globs are case-sensitive: 'Conv*', 'layer1.*')")
    table = profile.table(include="nope*")
    assert table.df.empty and "the include pattern 'nope*' matches" in table.notes[0]
    assert not any("pattern" in note for note in profile.tree(include="block.*").notes)
    # an empty pattern matched no module and the view came back empty without a word; a
    # number failed inside fnmatch ("object of type 'int' has no len()")
    for view_of in (profile.tree, profile.table):
        with pytest.raises(ValueError, match="include: '' is an empty pattern"):
            view_of(include="")
        with pytest.raises(ValueError, match="exclude: ' ' is an empty pattern"):
            view_of(exclude=["block", " "])
        with pytest.raises(TypeError, match="include must be glob patterns \\(str\\), got "
                                            "int 3"):
            view_of(include=[3])  # type: ignore[list-item]
        # a bare number failed inside list(): "'int' object is not iterable", naming nothing
        with pytest.raises(TypeError, match="exclude must be a glob pattern \\(str\\) or a "
                                            "list of them, got int 3"):
            view_of(exclude=3)  # type: ignore[arg-type]


def test_table_sort_limit_and_columns() -> None:
    view = tiny().table(["self_ops", "self_ops_pct"], sort_by="self_ops", limit=2)
    assert list(view.df.columns) == ["module", "type", "self_ops", "self_ops_pct"]
    assert list(view.df["module"]) == ["conv", "block.fc"]
    assert list(tiny().table(sort_by="module", ascending=True).df["module"])[:3] == [
        "__root__", "block", "block.act"]
    calls = tiny().table(aggregate="call", include="block.act")
    assert list(calls.df["call"]) == [4, 6]
    with pytest.raises(KeyError, match="unknown column"):
        tiny().table(["nope"])
    with pytest.raises(ValueError, match="aggregate"):
        tiny().table(aggregate="type")  # type: ignore[arg-type]


def test_top_by_type_all_depths_and_at_a_depth() -> None:
    top = tiny().top(2).df
    assert list(top["type"]) == ["Conv2d", "Linear"]
    assert list(top.columns) == ["type", "modules", "calls", "self_params", "self_macs",
                                 "self_ops", "self_ops_pct"]
    assert top.loc[1, "self_params"] == 1_450 + 6  # block.fc and the uncalled Linear
    at_one = tiny().top(None, by="params", depth=1).df
    assert list(at_one["type"])[:2] == ["Sequential", "Conv2d"]
    assert at_one.loc[0, "params_pct"] == pytest.approx(100 * 1_450 / 1_576)


def test_summary_one_row_per_model() -> None:
    frame = summary_frame({"a": tiny(), "b": tiny()})
    assert list(frame["model"]) == ["a", "b"]
    assert frame["flops"].tolist() == [2 * 5_328] * 2  # FLOPs = 2 x MACs
    names = list(summary([tiny(), tiny()]).df["model"])
    assert names == ["Net", "Net #2"]


def test_compare_two_runs() -> None:
    view = compare(tiny(), tiny(), changed_only=True)
    assert view.df.empty
    full = compare(tiny(), tiny()).df.set_index("module")
    assert full.loc["conv", "ops_delta"] == 0
    assert full.loc["conv", "ops_ratio"] == 1.0


class _Opaque(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.matrix_exp(x)  # no formula: unknown work


class _HalfKnown(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.matrix_exp(x) + x  # the add is counted, the exponential is not


def test_compare_leaves_the_difference_of_a_lower_bound_unknown() -> None:
    x = torch.randn(4, 4)
    before = ModuleProfiler().profile(nn.Sequential(nn.Linear(4, 4), _Opaque(), _HalfKnown()), x)
    after = ModuleProfiler().profile(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.ReLU()), x)
    view = compare(before, after, ["ops", "self_ops"])
    frame = view.df.set_index("module")
    # Linear: 4 rows x 4 outputs x (2 x 4 - 1) + 16 bias adds = 128 ops on both sides: exact
    assert (frame.loc["0", "ops_delta"], frame.loc["0", "ops_ratio"]) == (0, 1.0)
    # the root counts 128 + the half-known module's add (16) = 144 of unknown more before,
    # 128 + 2 ReLUs x 16 = 160 after: 16 more was the old table's claim; it is unknown
    root = frame.loc["__root__"]
    assert (root["ops_before"], root["ops_after"]) == (144, 160)
    assert pd.isna(root["ops_delta"]) and pd.isna(root["ops_ratio"])
    # own counts: the half-known module's 16 is a lower bound (its own work is mixed); the
    # root's own 0 is exact on both sides
    assert frame.loc["2", "self_ops_before"] == 16 and pd.isna(frame.loc["2", "self_ops_delta"])
    assert root["self_ops_delta"] == 0
    assert view.notes == ("before: the ops, macs, flops totals are lower bounds: no formula "
                          "for modules ['1', '2']; operators {'aten.linalg_matrix_exp': 2}; "
                          "where a row holds that work, its delta and ratio are unknown",)
    assert compare(after, after).notes == ()


@pytest.mark.parametrize(("call", "error", "message"), [
    # each was a deep error or a wrong table: AttributeError '_frames', the letters of "ops"
    # as three unknown columns, "too many values to unpack", "xy" read as two names
    (lambda p: compare(p, 5), TypeError, r"after must be a profile \(the result of a pass\), "
                                         "got int"),
    (lambda p: compare(p, p, "ops"), TypeError,
     r"columns must be a list of column names, got the str 'ops' \(one column: \['ops'\]\)"),
    (lambda p: compare(p, p, names=("a", "b", "c")), ValueError, "names must be two different"),
    (lambda p: compare(p, p, names="ab"), ValueError, "names must be two different"),
    (lambda p: compare(p, p, names=("run", "run")), ValueError, "names must be two different"),
    (lambda p: compare(p, p, changed_only="yes"), TypeError,
     "changed_only must be True or False, got str 'yes'"),
    (lambda p: p.tree("ops"), TypeError, "columns must be a list of column names, got the str"),
    (lambda p: p.table("ops"), TypeError, "columns must be a list of column names, got the str"),
    # each was a bare error from inside: AttributeError "'int' object has no attribute
    # 'endswith'", KeyError "unknown column 1.5", AttributeError "'float' object has no
    # attribute 'lower'"; a bool indent and a number as the title were taken
    (lambda p: p.tree(["ops", 1]), TypeError, r"columns\[1\] must be a column name \(a str\), "
                                              "got int 1"),
    (lambda p: p.to_markdown(columns=["ops", 1]), TypeError, r"columns\[1\] must be a column"),
    (lambda p: p.to_latex(columns=["ops", 1]), TypeError, r"columns\[1\] must be a column"),
    (lambda p: p.tree(columns=5), TypeError, "columns must be a list of column names or None, "
                                             "got int 5"),
    (lambda p: p.top(by=1.5), TypeError, "by must be a str, got float 1.5"),
    (lambda p: p.table(sort_by=1), TypeError, "sort_by must be a str, got int 1"),
    (lambda p: p.plot(metric=None), TypeError, "metric must be a str, got None"),
    (lambda p: p.save("out.txt", format=1.5), TypeError, "format must be a str, got float"),
    (lambda p: p.to_json(indent=True), TypeError, "indent must be an int or None, got bool"),
    (lambda p: p.to_json(indent=-1), ValueError, "indent must be at least 0, got -1"),
    (lambda p: p.to_html(title=3), TypeError, "title must be a str, got int 3"),
    # taken without a word: any truthy value sorted ascending, painted or drew Unicode lines;
    # a bare AttributeError "'str' object has no attribute 'items'"
    (lambda p: p.table(sort_by="ops", ascending="no"), TypeError,
     "ascending must be True or False, got str 'no'"),
    (lambda p: p.table(pct_of=1.5), TypeError, "pct_of must be a str, got float 1.5"),
    (lambda p: p.tree(pct_of=None), TypeError, "pct_of must be a str, got None"),
    (lambda p: p.to_text(color="never"), TypeError, "color must be True or False, got str"),
    (lambda p: p.to_text(unicode=1), TypeError, "unicode must be True or False, got int 1"),
    (lambda p: p.with_metrics("ops"), TypeError, r"metrics must be a dict \{module path: "),
])
def test_view_arguments_of_the_wrong_kind_are_refused_by_name(call, error, message) -> None:
    with pytest.raises(error, match=message):
        call(tiny())


def test_extra_columns_flow_through(monkeypatch: pytest.MonkeyPatch) -> None:
    """A timing and a memory column that no view knows about are shown, formatted by their
    suffix, totalled, charted and summarised."""

    def with_engines(profile: object, **options: bool) -> pd.DataFrame:
        frame = module_frame(profile, **options)  # type: ignore[arg-type]
        frame["forward_median_ms"] = [2.5, 1.0, 0.25, 1.0, 0.0004, 0.5, None, None]
        frame["forward_std_ms"] = 0.01
        frame["peak_bytes"] = [4096, 2048, 1024, 1024, 0, 1024, 0, None]
        return frame

    monkeypatch.setattr(select_module, "module_frame", with_engines)
    monkeypatch.setattr("moduleprofiler.export.model_summary.module_frame", with_engines)
    tree = tiny().tree()
    assert {"forward_median_ms", "forward_std_ms", "peak_bytes"} <= set(tree.columns)
    text = tree.to_text(width=0)
    assert "2.500 ms" in text and "250.0 us" in text and "400.0 ns" in text
    assert "4.00 KiB" in text and "forward median" in text
    assert column_spec("forward_median_ms").inclusive is True
    assert column_spec("forward_std_ms").inclusive is None
    pct = tiny().tree(["forward_median_ms", "forward_median_ms_pct"]).df
    assert pct.loc[1, "forward_median_ms_pct"] == pytest.approx(40.0)  # 1.0 of the root's 2.5
    assert "ms" in (tiny().to_latex() or "") and "KiB" in (tiny().to_markdown() or "")
    page = tiny().to_html() or ""
    assert 'id="chart-forward-median-ms"' in page and 'id="chart-peak-bytes"' in page
    # tiny()'s custom module has no formula: its row's flags say its counts are lower bounds
    assert list(summary([tiny()]).df.columns) == ["model", "params", "macs", "flops", "ops",
                                                  "forward_median_ms", "peak_bytes",
                                                  "complete", "ops_complete"]


def test_a_timed_profile_shows_each_time_once_per_view() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    x = torch.randn(2, 8)
    profiler = ModuleProfiler()
    timed = profiler.profile(model, x).with_timing(
        profiler.time_modules(model, x, num_iters=4, drop_first=1, warmup_seconds=0))
    # per module: the median of each iteration's time (its calls summed), not beside it the
    # sum of the per-call medians, which is the same quantity
    tree = timed.tree()
    assert "time_median_ms" in tree.columns and "self_time_median_ms" in tree.columns
    assert "forward_ms" not in tree.columns and "self_forward_ms" not in tree.columns
    # per call: the call's own times
    calls = timed.table(aggregate="call")
    assert "forward_ms" in calls.columns and "time_median_ms" not in calls.columns
    # a column asked for by name is shown
    assert "forward_ms" in timed.tree(["params", "forward_ms"]).columns


def test_a_views_text_width_is_given_where_the_view_is_made() -> None:
    profile = ModuleProfiler().profile(nn.Sequential(nn.Linear(4, 4), nn.ReLU()),
                                       torch.randn(2, 4))
    for view in (profile.tree(width=44), profile.table(width=44), profile.top(2, width=44)):
        lines = str(view).splitlines()
        assert max(len(line) for line in lines) <= 44
        # the same as to_text(width=44), and to_text's own width still wins
        assert str(view) == view.to_text(width=44)
        assert max(len(line) for line in view.to_text(width=0).splitlines()) > 44
    with pytest.raises(ValueError, match="width"):
        profile.tree(width=-1)


def test_the_never_called_note_is_under_the_views_of_every_module_only() -> None:
    class WithSpare(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.used = nn.Linear(4, 4)
            self.spare = nn.Linear(4, 4)  # its weights unused: no work anywhere

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.used(x)

    profile = ModuleProfiler().profile(WithSpare(), torch.randn(2, 4))
    # no MultiheadAttention in the model: the note names none
    note = "not called (1): spare; the work a parent does with their weights is in the " \
           "parent's own count" + _UNHOOKED_RUN
    assert note in profile.tree().notes and note in profile.table().notes
    # a ranking of types has no row for it: the note was noise there
    assert not any(n.startswith("not called") for n in profile.top(3).notes)


def test_a_timing_tree_shows_no_column_that_no_record_has_a_value_for() -> None:
    import warnings

    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a busy machine's timing warnings
        timing = ModuleProfiler().time_modules(model, torch.randn(1, 4), num_iters=4)
    tree = timing.tree()
    # a timing pass counts nothing and records no shapes: before, MACs, ops, ops % and output
    # showed a column of "-" each, and the footer defined ops and MACs
    assert not {"macs", "ops", "ops_pct",
                "output_shapes"} & set(tree.columns)
    text = tree.to_text(width=0) or ""
    assert "time median" in text and "MACs" not in text and "multiplies" not in text
    assert "ops" in timing.tree(["ops"]).columns  # named: still shown


def test_the_not_called_note_of_a_weightless_dropout_adds_no_weights_clause() -> None:
    # GPT-2's and BERT's attention dropouts are never called under SDPA: no weights, so the
    # clause about a parent doing their work, and MultiheadAttention, has nothing to say
    class SkipsDropout(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = nn.Linear(4, 4)
            self.dropout = nn.Dropout(0.1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(x)

    notes = ModuleProfiler().profile(SkipsDropout(), torch.randn(2, 4)).tree().notes
    assert [n for n in notes if n.startswith("not called")] == [
        "not called (1): dropout" + _UNHOOKED_RUN]


def test_the_not_called_note_names_multihead_attention_only_inside_one() -> None:
    class Attends(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.attn = nn.MultiheadAttention(8, 2, batch_first=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.attn(x, x, x, need_weights=False)[0]

    notes = ModuleProfiler().profile(Attends(), torch.randn(1, 3, 8)).tree().notes
    # MultiheadAttention computes with out_proj's weights and never calls it
    assert [n for n in notes if n.startswith("not called")] == [
        "not called (1): attn.out_proj; the work a parent does with their weights "
        "(MultiheadAttention's out_proj) is in the parent's own count" + _UNHOOKED_RUN]


def test_compare_shows_a_module_that_changed_class_as_changed() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 8)
    before = ModuleProfiler().profile(nn.Sequential(nn.Linear(8, 8), nn.ReLU()), x)
    after = ModuleProfiler().profile(nn.Sequential(nn.Linear(8, 8), nn.GELU()), x)
    changed = compare(before, after, changed_only=True).df.set_index("module")
    # the ReLU became a GELU (other ops, and so the root's, which holds them); the Linear
    # (2 * 8 * 8 = 128 MACs in both) is unchanged and left out
    assert list(changed.index) == ["__root__", "1"]
    assert changed.loc["1", "type"] == "ReLU -> GELU"


@pytest.mark.parametrize("by", ["buffers", "buffer_bytes", "param_bytes", "trainable_params"])
def test_top_by_a_quantity_without_an_own_share_is_titled_as_including_children(by: str) -> None:
    model = nn.Sequential(nn.Sequential(nn.BatchNorm1d(4), nn.Linear(4, 4)), nn.BatchNorm1d(4))
    view = ModuleProfiler().profile(model, torch.randn(3, 4)).top(by=by)
    # the Sequential row holds the whole model (both BatchNorm1d and the Linear): 100 %, and
    # the BatchNorm1d row (buffers 2 x (4 + 4 + 1) = 18 elements, all of them) 100 % again:
    # the rows overlap, which "own work" said they did not
    assert view.title == f"Top 10 module types by {by} (all depths, including children)"
    shares = view.df.set_index("type")[f"{by}_pct"]
    assert shares["Sequential"] == 100.0 and shares.sum() > 100.0
    assert any(note.startswith(f"{by} has no own share") for note in view.notes)


def test_top_by_an_own_quantity_is_still_titled_own_work() -> None:
    model = nn.Sequential(nn.Sequential(nn.BatchNorm1d(4), nn.Linear(4, 4)), nn.BatchNorm1d(4))
    view = ModuleProfiler().profile(model, torch.randn(3, 4)).top(by="params")
    # self_params: Linear 4 * 4 + 4 = 20, BatchNorm1d 2 x (4 + 4) = 16, Sequential 0: 36
    assert view.title == "Top 10 module types by params (all depths, own work)"
    assert view.df["self_params"].sum() == 36 and view.df["self_params_pct"].sum() == 100.0
    assert not any("no own share" in note for note in view.notes)


class _ChildNamedRoot(nn.Module):
    """A child registered under the attribute name ``__root__``, the root's name in outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(3, 3)
        self.add_module("__root__", nn.Sequential(nn.Linear(3, 2)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.get_submodule("__root__")(self.a(x))


def test_a_child_registered_as_root_has_a_name_of_its_own_in_every_view() -> None:
    profile = ModuleProfiler().profile(_ChildNamedRoot(), torch.randn(2, 3))
    names = ["__root__", "a", ".__root__", ".__root__.0"]
    assert module_frame(profile)["module"].tolist() == names
    assert profile.to_df("call")["module"].tolist() == names
    # drawn under the root, its child under it (it was a second root, its row unindented)
    lines = str(profile.tree()).splitlines()
    assert [line.split(" (")[0] for line in lines[2:5]] == [
        "__root__", "|-- a", "`-- .__root__"]
    assert "| .\\_\\_root\\_\\_ | Sequential |" in profile.to_markdown()
    assert list(ModuleProfiler().estimate_ops(_ChildNamedRoot(), torch.randn(2, 3))) == names
    # its name reads it back, as its path does (a path wins over the root's output name)
    assert profile.module(".__root__") is profile.module("__root__")
    assert profile.module(".__root__").type_name == "Sequential"
    assert [record.path for record in profile.calls(".__root__.0")] == ["__root__.0"]
