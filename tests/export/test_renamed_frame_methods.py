"""Every DataFrame method of a renamed table that takes column names answers the old ones as
``frame["old"]`` does: the same result as the new name, with one ``DeprecationWarning`` naming
the new column and the removal; a name neither old nor new gets pandas' own answer."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from moduleprofiler import ModuleProfiler
from moduleprofiler.deprecation import REMOVAL_VERSION
from moduleprofiler.export.renamed import COLUMN_ARGUMENTS, RenamedColumnsFrame, renamed_columns

OLD = {"median": "median", "excess": "excess", "ratio": "ratio"}
NEW = {name: f"self_macs_{name}" for name in OLD}
NEITHER = {name: f"no_{name}" for name in OLD}
"""The names a case is called with: the old ones (``stragglers()`` until 0.2), the new ones,
and names that are no column under either."""


def _stragglers() -> pd.DataFrame:
    """``stragglers(4, by="self_macs")`` of three ranks of an MLP fed 2, 3 and 7 rows.

    Self MACs per rank: Linear(4, 8) 32 * 2, 3, 7 rows = 64, 96, 224 (median 96); Linear(8, 6)
    48 * rows = 96, 144, 336 (median 144). The stragglers are rank 2's two Linears, "2" first
    (excess 336 - 144 = 192, then 224 - 96 = 128; both ratios 7/3). Row 1's excess is set to
    NaN so that fillna and dropna have something to do."""
    from moduleprofiler.distributed import DistributedProfile

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 6))
    table = DistributedProfile(tuple(ModuleProfiler().profile(model, torch.randn(rows, 4))
                                     for rows in (2, 3, 7))).stragglers(4, by="self_macs")
    assert list(table["module"]) == ["2", "0"]
    assert list(table["self_macs_median"]) == [144.0, 96.0]
    assert list(table["self_macs_excess"]) == [192.0, 128.0]
    table.loc[1, "self_macs_excess"] = float("nan")
    return table


def _levels(frame: pd.DataFrame) -> pd.DataFrame:
    """The table indexed by module and median (the new name: an index level of that name)."""
    return frame.set_index(["module", NEW["median"]])


def _lines(axes: Any) -> list[list[list[float]]]:
    """What a line plot drew: each line's (x, y) points."""
    return [line.get_xydata().tolist() for line in axes.get_lines()]


def _drawn(axes: Any) -> list[tuple[str, list[float]]]:
    """What a histogram or box plot drew: each subplot's title and its bars' heights or its
    lines' y values."""
    flat = np.asarray(axes).ravel() if not isinstance(axes, dict) else list(axes.values())
    return [(ax.get_title(), [patch.get_height() for patch in ax.patches]
             + [y for line in ax.get_lines() for y in line.get_ydata()]) for ax in flat]


CASES: dict[str, Callable[[pd.DataFrame, dict[str, str]], Any]] = {
    "groupby": lambda f, n: f.groupby(n["median"])["self_macs"].sum(),
    "groupby(level)": lambda f, n: _levels(f).groupby(level=n["median"])["self_macs"].sum(),
    "groupby()[old]": lambda f, n: f.groupby("module")[n["median"]].max(),
    "groupby()[[old]]": lambda f, n: f.groupby("module")[[n["median"], n["ratio"]]].max(),
    "groupby().old": lambda f, n: getattr(f.groupby("module"), n["excess"]).max(),
    "DataFrameGroupBy.agg": lambda f, n: f.groupby("module").agg({n["median"]: "sum"}),
    "DataFrameGroupBy.aggregate": lambda f, n: f.groupby("module").aggregate(
        top=(n["median"], "max"), least=pd.NamedAgg(n["ratio"], "min")),
    "DataFrameGroupBy.value_counts": lambda f, n: f.groupby("module").value_counts(
        subset=[n["ratio"]]),
    "sort_index": lambda f, n: _levels(f).sort_index(level=n["median"]),
    "reset_index": lambda f, n: _levels(f).reset_index(level=n["median"]),
    "droplevel": lambda f, n: _levels(f).droplevel(n["median"]),
    "swaplevel": lambda f, n: _levels(f).swaplevel(n["median"], "module"),
    "reorder_levels": lambda f, n: _levels(f).reorder_levels([n["median"], "module"]),
    "unstack": lambda f, n: _levels(f)[["self_macs"]].unstack(n["median"]),
    "drop(level)": lambda f, n: _levels(f).drop(144.0, level=n["median"]),
    "xs(level)": lambda f, n: _levels(f).xs(96.0, level=n["median"]),
    "sort_values": lambda f, n: f.sort_values(by=[n["median"]]),
    "set_index": lambda f, n: f.set_index(n["median"]),
    "drop": lambda f, n: f.drop(columns=n["median"]),
    "drop(axis=1)": lambda f, n: f.drop([n["median"], n["ratio"]], axis=1),
    "rename": lambda f, n: f.rename(columns={n["median"]: "m"}),
    "rename(axis=1)": lambda f, n: f.rename({n["median"]: "m"}, axis="columns"),
    "reindex": lambda f, n: f.reindex(columns=["module", n["median"]]),
    "reindex(axis=1)": lambda f, n: f.reindex(["module", n["median"]], axis=1),
    "filter": lambda f, n: f.filter(items=["module", n["median"]]),
    "filter(arg)": lambda f, n: f.filter([n["ratio"]]),
    "query": lambda f, n: f.query(f"{n['median']} > 100 and {n['ratio']} > 2"),
    "query(backticks)": lambda f, n: f.query(f"`{n['median']}` < 100"),
    "eval": lambda f, n: f.eval(f"{n['median']} * 2"),
    "eval(assignment)": lambda f, n: f.eval(f"{n['median']} = {n['ratio']} * 3"),
    "assign": lambda f, n: f.assign(**{n["median"]: [1.0, 2.0]}),
    "merge": lambda f, n: f.merge(f[["module", NEW["median"]]], on=n["median"]),
    "merge(left_on)": lambda f, n: f.merge(pd.DataFrame({"label": ["a", "b"]},
                                                        index=[96.0, 144.0]),
                                           left_on=n["median"], right_index=True),
    "join": lambda f, n: f.join(pd.DataFrame({"label": ["a", "b"]}, index=[96.0, 144.0]),
                                on=n["median"]),
    "pivot": lambda f, n: f.pivot(columns="module", values=n["median"]),
    "pivot_table": lambda f, n: f.pivot_table(values=n["median"], index="module",
                                              aggfunc={n["median"]: "max"}),
    "melt": lambda f, n: f.melt(id_vars=["module"], value_vars=[n["median"], n["ratio"]]),
    "explode": lambda f, n: f.explode(n["median"]),
    "nlargest": lambda f, n: f.nlargest(1, n["median"]),
    "nsmallest": lambda f, n: f.nsmallest(1, [n["median"]]),
    "drop_duplicates": lambda f, n: f.drop_duplicates(subset=[n["ratio"]]),
    "duplicated": lambda f, n: f.duplicated([n["ratio"]]),
    "value_counts": lambda f, n: f.value_counts(subset=[n["ratio"]]),
    "dropna": lambda f, n: f.dropna(subset=[n["excess"]]),
    "fillna": lambda f, n: f.fillna({n["excess"]: 0.0}),
    "agg": lambda f, n: f.agg({n["median"]: "sum"}),
    "agg(named)": lambda f, n: f.agg(top=(n["median"], "max"), least=(n["ratio"], "min")),
    "aggregate": lambda f, n: f.aggregate({n["median"]: ["min", "max"]}),
    "transform": lambda f, n: f.transform({n["median"]: np.negative}),
    "astype": lambda f, n: f.astype({n["median"]: "int64"}),
    "round": lambda f, n: f.round({n["ratio"]: 1}),
    "pop": lambda f, n: (f.pop(n["median"]), list(f.columns)),
    "xs": lambda f, n: f.xs(n["median"], axis=1),
    "hist": lambda f, n: _drawn(f.hist(column=n["median"], bins=2)),
    "boxplot": lambda f, n: _drawn(f.boxplot(column=[n["median"]], by="module",
                                             return_type="axes")),
    "to_csv": lambda f, n: f.to_csv(columns=["module", n["median"]]),
    "to_string": lambda f, n: f.to_string(columns=[n["median"]],
                                          formatters={n["median"]: "{:.1f}".format}),
    "to_html": lambda f, n: f.to_html(columns=[n["median"]]),
    "to_latex": lambda f, n: f.to_latex(columns=[n["median"]]),
    "plot": lambda f, n: _lines(f.plot(x=n["median"], y=[n["ratio"]])),
    "plot(positional)": lambda f, n: _lines(f.plot(n["median"], n["ratio"])),
    "plot.scatter": lambda f, n: f.plot.scatter(x=n["median"], y="self_macs",
                                                c=n["ratio"]).collections[0].get_offsets()
                                                                     .tolist(),
    "frame[old] = ...": lambda f, n: f.__setitem__(n["median"], [1.0, 2.0]) or f,
    "frame.old = ...": lambda f, n: setattr(f, n["excess"], [1.0, 2.0]) or f,
    "del frame[old]": lambda f, n: f.__delitem__(n["median"]) or f,
    "frame.at": lambda f, n: f.at[1, n["median"]],
    "frame.at = ...": lambda f, n: f.at.__setitem__((1, n["median"]), 5.0) or f,
    "copy": lambda f, n: f.copy()[n["median"]],
    "slice": lambda f, n: f[f["rank"] == 2][n["median"]],
    "groupby result": lambda f, n: f.groupby("module").max()[n["median"]],
}
"""Each method (or accessor) called with the names of a dict above. Every method of
COLUMN_ARGUMENTS has at least one case."""


def _same(old: Any, new: Any, same_type: bool = True) -> None:
    """``old`` is ``new``: frames and series (of the same class, unless ``same_type`` is
    False) by pandas' own comparison, tuples item by item, anything else by ``==``."""
    if isinstance(new, pd.DataFrame):
        pd.testing.assert_frame_equal(old, new, check_frame_type=same_type)
    elif isinstance(new, pd.Series):
        pd.testing.assert_series_equal(old, new, check_series_type=same_type)
    elif isinstance(new, tuple):
        for one, other in zip(old, new, strict=True):
            _same(one, other, same_type)
    else:
        assert old == new


def _call(case: str, names: dict[str, str]) -> tuple[Any, list[str]]:
    """The case on a fresh table, and the messages of the DeprecationWarnings it gave."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    frame = _stragglers()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            return CASES[case](frame, names), [str(w.message) for w in caught
                                               if issubclass(w.category, DeprecationWarning)]
        finally:
            pyplot.close("all")


@pytest.mark.parametrize("case", list(CASES))
def test_an_old_name_answers_as_the_new_one_with_one_warning(case: str) -> None:
    # each raised KeyError or did something else on the old name (rename, reindex, filter and
    # assign left the column alone or added an empty one); the new name is pandas' own answer
    new, warned = _call(case, NEW)
    assert warned == []
    old, warned = _call(case, OLD)
    _same(old, new)
    used = {name for name in OLD if f"'{name}'" in " ".join(warned)}
    assert len(warned) == len(used) >= 1, warned  # one warning per old name used
    for message in warned:
        assert "'self_macs_" in message and REMOVAL_VERSION in message
        assert "DistributedProfile.stragglers()" in message


@pytest.mark.parametrize("case", list(CASES))
def test_a_name_neither_old_nor_new_gets_pandas_own_answer(case: str) -> None:
    # the same call on a plain DataFrame of the same table: the same KeyError (or the same
    # result, where pandas ignores a missing name), and no warning
    def call(plain: bool) -> tuple[Any, list[str]]:
        frame = _stragglers()
        table = pd.DataFrame(frame) if plain else frame
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                out: Any = CASES[case](table, NEITHER)
            except Exception as error:  # compared with pandas' own below
                # the groupby object of a renamed table is pandas' own class under its own
                # name, which an AttributeError names
                out = (type(error), str(error).replace("'_RenamedGroupBy'",
                                                       "'DataFrameGroupBy'"))
        return out, [str(w.message) for w in caught if w.category is DeprecationWarning]

    renamed, warned = call(plain=False)
    plain, _ = call(plain=True)
    assert warned == []
    _same(renamed, plain, same_type=False)  # an error is compared by its type and message


def test_every_method_that_answers_old_names_is_tested() -> None:
    tested = {case.split("(")[0] for case in CASES}
    assert set(COLUMN_ARGUMENTS) - tested - {"to_excel"} == set()


def test_to_excel_takes_the_new_names() -> None:
    # no Excel writer is installed here: the arguments to_excel hands pandas
    frame = _stragglers()
    assert isinstance(frame, RenamedColumnsFrame)
    with pytest.warns(DeprecationWarning, match="'self_macs_median'"):
        args, kwargs = frame._with_new_names("to_excel", ("out.xlsx",),
                                             {"columns": ["module", "median"]})
    assert (args, kwargs) == (("out.xlsx",), {"columns": ["module", "self_macs_median"]})


def test_the_values_under_the_old_names() -> None:
    # a few of the cases above, by hand: medians 144 ("2") and 96 ("0"), excess 192 and NaN
    frame = _stragglers()
    with pytest.warns(DeprecationWarning):
        assert list(frame.query("median > 100")["module"]) == ["2"]
    with pytest.warns(DeprecationWarning):
        assert list(frame.drop(columns="median").columns) == [
            "module", "rank", "self_macs", "self_macs_excess", "self_macs_ratio"]
    with pytest.warns(DeprecationWarning):
        assert list(frame.rename(columns={"median": "m"})["m"]) == [144.0, 96.0]
    with pytest.warns(DeprecationWarning):
        assert frame.fillna({"excess": 0.0})["self_macs_excess"].tolist() == [192.0, 0.0]
    with pytest.warns(DeprecationWarning):
        assert frame.agg({"median": "sum"}).to_dict() == {"self_macs_median": 240.0}
    with pytest.warns(DeprecationWarning):
        assert frame.nlargest(1, "median")["module"].tolist() == ["2"]
    with pytest.warns(DeprecationWarning):
        assert frame.eval("median * 2").tolist() == [288.0, 192.0]


def test_query_translates_names_not_strings_attributes_or_locals() -> None:
    frame = _stragglers()
    median = 100.0  # noqa: F841 - read by the query as @median
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # 'median' is a string here and @median the local variable: neither is a column
        assert frame.query("module == 'median'").empty
        assert list(frame.query("self_macs_median > @median")["module"]) == ["2"]
    with pytest.warns(DeprecationWarning) as caught:  # one warning for a name used twice
        assert list(frame.query("median > 100 or median < 0")["module"]) == ["2"]
    assert len(caught) == 1


def test_a_column_under_the_old_name_wins_everywhere() -> None:
    # a table that holds a column under an old name (the user's own) answers it, silently,
    # in every method: the old name stands for the new column only where it is no column
    frame = renamed_columns(pd.DataFrame({"layer": ["a", "b"], "module": ["m", "n"],
                                          "tokens": [3, 1]}), {"layer": "module"}, "test")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(frame["layer"]) == ["a", "b"]
        assert list(frame.sort_values("tokens")["layer"]) == ["b", "a"]
        assert list(frame.drop(columns="layer").columns) == ["module", "tokens"]
        assert list(frame.query("layer == 'a'")["module"]) == ["m"]
        assert list(frame.set_index("layer").index) == ["a", "b"]
        frame["layer"] = ["c", "d"]
        assert list(frame["module"]) == ["m", "n"]


def test_an_old_name_whose_new_column_is_gone_is_no_name() -> None:
    # a derived table without the new column: the old name is a name like any other, no
    # warning, pandas' own KeyError; writing it makes a column of that name
    frame = _stragglers()[["module", "rank"]]
    assert isinstance(frame, RenamedColumnsFrame)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(KeyError, match="'median'"):
            frame["median"]
        frame["median"] = [1.0, 2.0]
        assert list(frame.columns) == ["module", "rank", "median"]


def test_what_pandas_builds_from_the_table_answers_old_names() -> None:
    # a copy, a slice and a groupby result were plain DataFrames: frame.copy()["median"]
    # raised KeyError
    frame = _stragglers()
    for derived in (frame.copy(), frame[frame["rank"] == 2], frame.head(1),
                    frame.groupby("module").max(), frame.reset_index(drop=True)):
        assert isinstance(derived, RenamedColumnsFrame)
        with pytest.warns(DeprecationWarning, match="'self_macs_median'"):
            assert derived["median"].iloc[0] in (144.0, 96.0)
    assert type(pd.DataFrame(frame)) is pd.DataFrame  # the way to a plain table


def test_a_profiles_frame_answers_an_old_name_in_its_methods() -> None:
    # profile.to_df(): inclusive_ops is ops. Linear(4, 3) on 2 rows: 2 * 3 * (2 * 4 - 1 + 1)
    # = 48 ops; the ReLU 6; Linear(3, 2): 2 * 2 * 6 = 24; the root 78
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    frame = ModuleProfiler().profile(model, torch.randn(2, 4)).to_df("module")
    with pytest.warns(DeprecationWarning, match="'inclusive_ops'.*use 'ops'"):
        assert sorted(frame.query("inclusive_ops > 20")["ops"]) == [24, 48, 78]
    with pytest.warns(DeprecationWarning, match="use 'self_params'"):
        assert frame.nlargest(1, "own_params")["module"].tolist() == ["0"]  # 4 * 3 + 3


def test_query_reads_the_callers_variables_at_its_level() -> None:
    # the method answering old names is one call more between the user and pandas, which
    # reads @names from the frame `level` calls above query
    frame = _stragglers()
    limit = 100.0  # noqa: F841 - read as @limit one level up

    def above(table: pd.DataFrame) -> list[str]:
        return list(table.query("self_macs_median > @limit", level=1)["module"])

    assert above(frame) == above(pd.DataFrame(frame)) == ["2"]
    assert list(frame.eval("self_macs_median - @limit")) == [44.0, -4.0]


def test_the_migration_guide_lists_every_method_that_answers_old_names() -> None:
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[2] / "docs" / "migration.md").read_text()
    assert [method for method in COLUMN_ARGUMENTS if f"`{method}`" not in guide] == []


def test_labels_on_the_other_axis_are_no_column_names() -> None:
    # a row labelled with an old name: drop, sort_values(axis=1) and rename(index=) name rows,
    # so the label is not taken for the new column (sort_values(axis=1) read "old" as "new")
    frame = renamed_columns(pd.DataFrame({"new": [2, 1], "other": [1, 2]}, index=["old", "x"]),
                            {"old": "new"}, "test")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        # sorted by the row "old": other 1, new 2
        assert list(frame.sort_values("old", axis=1).columns) == ["other", "new"]
        assert list(frame.drop("old").index) == ["x"]
        assert list(frame.rename({"old": "first"}).index) == ["first", "x"]
        assert list(frame.filter(["old"], axis=0).index) == ["old"]
        assert frame.agg({"old": "sum"}, axis=1).to_dict() == {"old": 3}  # 2 + 1


def test_merge_right_on_is_answered_by_the_right_table() -> None:
    # right_on names the right table's columns: a renamed right table answers its old names
    # by its own rule (one warning per table), a plain one keeps its own (right_on was passed
    # to pandas as given: KeyError 'median' for a renamed right table)
    frame = _stragglers()
    right = frame[["module", NEW["median"]]].rename(columns={"module": "right_module"})
    assert isinstance(right, RenamedColumnsFrame)
    expected = frame.merge(right, left_on=NEW["median"], right_on=NEW["median"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        merged = frame.merge(right, "inner", None, "median", "median")  # positional, too
    assert len(caught) == 2 and all("use 'self_macs_median'" in str(w.message) for w in caught)
    pd.testing.assert_frame_equal(merged, expected)
    # medians 144 ("2") and 96 ("0") each meet their own row
    assert merged[["module", "right_module"]].values.tolist() == [["2", "2"], ["0", "0"]]

    plain = pd.DataFrame({"median": [96.0], "label": ["low"]})  # a column of that name
    with pytest.warns(DeprecationWarning, match="use 'self_macs_median'") as caught:
        merged = frame.merge(plain, left_on="median", right_on="median")
    assert len(caught) == 1  # the left table's name only
    pd.testing.assert_frame_equal(
        merged, frame.merge(plain, left_on=NEW["median"], right_on="median"))
    assert merged[["module", "median", "label"]].values.tolist() == [["0", 96.0, "low"]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(KeyError, match="'no_median'"):  # pandas' own answer
            frame.merge(plain, left_on=NEW["median"], right_on="no_median")


def test_a_named_aggregation_keeps_its_function_arguments() -> None:
    # pandas 3's pd.NamedAgg carries arguments for its function: the renamed column keeps
    # them. Medians 144 and 96; their quantile 0.5 is 120
    if not hasattr(pd.NamedAgg("median", "min"), "args"):
        pytest.skip("this pandas' NamedAgg takes no arguments for its function")
    frame = _stragglers()
    with pytest.warns(DeprecationWarning, match="use 'self_macs_median'"):
        out = frame.groupby("rank").agg(mid=pd.NamedAgg("median", pd.Series.quantile, 0.5))
    assert out["mid"].tolist() == [120.0]
