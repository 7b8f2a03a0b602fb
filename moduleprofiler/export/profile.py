"""``Profile``: the data of one profiled pass (:class:`~moduleprofiler.records.ProfileData`)
with every view of it as a method. The views live in :mod:`moduleprofiler.export`; this module
only joins the two, so the records never import the views."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any

import pandas as pd

import moduleprofiler
from moduleprofiler.deprecation import warn_deprecated
from moduleprofiler.errors import InputMismatchError
from moduleprofiler.export.by_operator import by_operator_view
from moduleprofiler.export.cells import formatter
from moduleprofiler.export.columns import column_spec
from moduleprofiler.export.figures import PlotKind, plot_profile
from moduleprofiler.export.formats import export_profile, save_profile
from moduleprofiler.export.frame import FrameColumns, profile_frame, profile_to_dict
from moduleprofiler.export.json_io import profile_from_json, register_result, result_values
from moduleprofiler.export.renamed import RENAMED, RESCALED, renamed_columns
from moduleprofiler.export.select import listing, table_view, top_view, tree_view
from moduleprofiler.export.tensorboard import write_tensorboard
from moduleprofiler.records import Aggregate, ProfileData, display_path
from moduleprofiler.summary_row import model_summary
from moduleprofiler.validate import check_int, check_str
from moduleprofiler.warn import warn

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from torch.utils.tensorboard import SummaryWriter

    from moduleprofiler.export.io import Buffer, PathLike
    from moduleprofiler.export.view import View


@dataclass(frozen=True, repr=False)
class Profile(ProfileData):
    """The result of one profiled pass: per-call records plus the model's modules.

    Every table, export and legacy dict is a view of these records.
    """

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # a result kind (a prediction, a memory report, a timing): its JSON names it, so
        # that Profile.from_json reads it back as one, with its own fields
        super().__init_subclass__(**kwargs)
        register_result(cls)

    # -- views -----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain-Python view: totals, per-call records, modules, uncalled/unsupported lists;
        a result (a prediction, a memory report) adds its own figures under
        ``result_fields``, as its JSON does."""
        document = profile_to_dict(self)
        values = result_values(self)
        if values:
            document["result_fields"] = values
        return document

    def to_df(self, aggregate: Aggregate = "call", *,
              columns: FrameColumns = "data") -> pd.DataFrame:
        """Tidy DataFrame: one row per call, per module or per module type, with the
        registered columns and the columns the listeners wrote; modules and types combine
        their calls by each column's aggregation (:mod:`moduleprofiler.export.columns`).

        ``columns="data"`` (default) leaves out the columns that hold nothing: the backward
        ones of a forward-only profile, a time or memory column no row has a value in
        (unknown forward counts stay, as ``<NA>``); ``columns="all"`` gives every column.

        The names 0.2 retired (``inclusive_ops`` is ``ops``, ``own_params`` ``self_params``:
        :data:`~moduleprofiler.export.renamed.RENAMED`) still select their column, with a
        ``DeprecationWarning``, until 0.3.0 (:class:`~moduleprofiler.export.renamed.
        RenamedColumnsFrame`)."""
        return renamed_columns(profile_frame(self, aggregate, columns), RENAMED,
                               "Profile.to_df()", RESCALED)

    def summary(self, memory: Any = None, latency: Any = None) -> pd.DataFrame:
        """One row for the whole model: parameters, model size, peak activations, MACs, FLOPs,
        latency and throughput (memory and latency columns filled when given the result of
        :meth:`ModuleProfiler.measure_memory` and a latency result).

        Raises:
            InputMismatchError: ``memory`` or ``latency`` was measured on another input than
                this profile's (both know its shapes, and they differ), as :meth:`merge`.
        """
        for given, what in ((memory, "memory: its pass"), (latency, "latency: its pass")):
            _check_same_input(self.model_input, _given_input(given), what)
        return model_summary(self, memory, latency)

    def with_metrics(self, metrics: dict[str, dict[str, Any]]) -> Profile:
        """A copy with extra per-module columns (``{path: {column: value}}``) merged in; the
        root is ``""`` or ``"__root__"``, as in :meth:`module`.

        Raises:
            TypeError: ``metrics`` is not such a dict, or a path is not a string.
            KeyError: a path is no module of this profile (its values would show nowhere).
        """
        if not isinstance(metrics, Mapping) or not all(
                isinstance(columns, Mapping) for columns in metrics.values()):
            raise TypeError(f"metrics must be a dict {{module path: {{column: value}}}}, got "
                            f"{type(metrics).__name__} {metrics!r:.60}")
        for path in metrics:
            self.module(path)  # a path of no module is a typo: its values would show nowhere
        return self._with_module_metrics({self._path(path): columns
                                          for path, columns in metrics.items()})

    def _with_module_metrics(self, metrics: Mapping[str, Mapping[str, Any]]) -> Profile:
        """A copy with ``metrics`` (paths as the records hold them) merged in."""
        merged = {path: dict(columns) for path, columns in self.module_metrics.items()}
        for path, columns in metrics.items():
            merged.setdefault(path, {}).update(columns)
        return dataclasses.replace(self, module_metrics=merged, _by_path={})

    def merge(self, other: ProfileData) -> Profile:
        """A copy that also shows the columns of ``other``, a profile of another pass over the
        same model and input (:meth:`ModuleProfiler.time_modules`, ``train_step_times``,
        ``TrainingProfiler.result()``, ``measure_memory``...): each call's columns are matched
        by module path and call number (the k-th call of a module takes the other pass's
        k-th call), the per-module columns by path, and its pass's facts (``facts``) where this
        profile has none. The counts stay this profile's.

        A call of ``other`` that this pass did not make (data-dependent control flow: a branch
        that another pass's iterations took) has no row here; a ``UserWarning`` names it, as
        it names a module that is of another type there (a profile of another model).

        Raises:
            TypeError: ``other`` is not a profile.
            InputMismatchError: both passes know the shapes of the model's input
                (:attr:`~moduleprofiler.records.ProfileData.model_input`) and they differ
                (another batch size): the message names both. A pass that does not know them
                (a ``pred_fn`` gave the model its arguments, a file written before passes
                kept them) is joined as it is.
        """
        if not isinstance(other, ProfileData):
            raise TypeError(f"merge takes a profile (the result of another pass over the same "
                            f"model), got {type(other).__name__}")
        theirs = {info.path: info.type_name for info in other.modules}
        differ = [(info.path, info.type_name, theirs[info.path]) for info in self.modules
                  if theirs.get(info.path, info.type_name) != info.type_name]
        if differ:
            named = listing([f"{display_path(path)!r} is a {mine} here and a {their} there"
                             for path, mine, their in differ])
            warn(f"merge: the other profile is of another model: {named}; its columns "
                 "are joined by module path all the same", UserWarning)
        _check_same_input(self.model_input, other.model_input, "merge: the other pass")
        calls = {(r.path, r.call_number): r.metrics for r in other.records}
        records = tuple(
            dataclasses.replace(r, metrics={**r.metrics, **calls[(r.path, r.call_number)]})
            if (r.path, r.call_number) in calls else r for r in self.records)
        missing = calls.keys() - {(r.path, r.call_number) for r in self.records}
        if missing:
            named = listing([f"{display_path(path)!r} call {number + 1}"
                             for path, number in sorted(missing)])
            warn(f"merge: {len(missing)} call{'s' if len(missing) > 1 else ''} of the other "
                 f"pass {'were' if len(missing) > 1 else 'was'} not made in this one, so "
                 f"{'their' if len(missing) > 1 else 'its'} columns are left out: "
                 f"{named} (the model takes a different path on different passes)",
                 UserWarning)
        return dataclasses.replace(self._with_module_metrics(other.module_metrics),
                                   records=records,
                                   facts=self.facts if self.facts is not None else other.facts)

    def with_timing(self, timing: ProfileData) -> Profile:
        """Deprecated: :meth:`merge` (a timing result is a profile)."""
        warn_deprecated("Profile.with_timing(timing)", "use profile.merge(timing)")
        return self.merge(timing)

    def with_memory(self, memory: ProfileData) -> Profile:
        """Deprecated: :meth:`merge` (a memory report is a profile)."""
        warn_deprecated("Profile.with_memory(memory)", "use profile.merge(memory)")
        return self.merge(memory)

    # -- export views ----------------------------------------------------------------------
    # Thin delegations: the logic lives in moduleprofiler.export (docs/exports.md).
    def tree(self, columns: Sequence[str] | None = None, *, width: int | None = None,
             **options: Any) -> View:
        """The module tree annotated with ``columns`` and % of the total; options:
        ``max_depth``, ``min_pct``, ``pct_of``, ``include``, ``exclude``
        (:func:`moduleprofiler.export.select.tree_view`); ``width``: its text width, as in
        :meth:`View.to_text <moduleprofiler.export.view.View.to_text>`."""
        return _with_width(tree_view(self, columns, **options), width)

    def table(self, columns: Sequence[str] | None = None, *, width: int | None = None,
              **options: Any) -> View:
        """A flat table; options: ``aggregate``, ``max_depth``, ``min_pct``, ``pct_of``,
        ``sort_by``, ``ascending``, ``include``, ``exclude``, ``limit``
        (:func:`moduleprofiler.export.select.table_view`); ``width`` as in :meth:`tree`."""
        return _with_width(table_view(self, columns, **options), width)

    def top(self, k: int | None = 10, *, by: str = "ops", depth: int | None = None,
            width: int | None = None) -> View:
        """The ``k`` module types with the most ``by``, over all modules' own work or over
        the modules at ``depth`` (:func:`moduleprofiler.export.select.top_view`); ``width``
        as in :meth:`tree`."""
        return _with_width(top_view(self, k, by=by, depth=depth), width)

    def by_operator(self, module: str | None = None) -> View:
        """One row per aten operator (fvcore's ``by_operator``): calls, ops, MACs, FLOPs and
        bytes read and written, with each operator's share; ``module="layer1"`` counts only
        that module's calls and the calls inside them. Needs a profile made with
        ``listeners=[OperatorListener()]``
        (:func:`moduleprofiler.export.by_operator.by_operator_view`)."""
        return by_operator_view(self, module)

    def __str__(self) -> str:
        return str(self.tree())

    def _repr_html_(self) -> str:
        """The notebook form of :meth:`tree`."""
        return self.tree()._repr_html_()

    def plot(self, kind: PlotKind = "type", metric: str = "ops", **options: Any) -> Figure:
        """A matplotlib figure (the ``plot`` extra): ``kind`` ``"type"``, ``"module"``,
        ``"layer"`` or ``"time_vs_flops"``; ``metric`` ``ops``, ``macs``, ``flops``,
        ``params``, ``time``, ``memory`` or a column; options ``top``, ``depth``, ``ax``,
        ``title``, ``path`` (.png .svg .pdf), ``figsize``
        (:func:`moduleprofiler.export.figures.plot_profile`)."""
        return plot_profile(self, kind, metric, **options)

    def to_json(self, buf: Buffer = None, *, indent: int | None = 2) -> str | None:
        """Schema-versioned JSON that :meth:`from_json` reads back into an equal profile."""
        check_int(indent, "indent", 0)
        return export_profile(self, "json", buf, indent=indent)

    @classmethod
    def from_json(cls, source: str | PathLike | IO[str]) -> Profile:
        """The profile saved by :meth:`to_json` (a path, a file object, or the JSON text)."""
        # its derived columns (time statistics, memory, prediction) are registered by their
        # producers, which `import moduleprofiler` no longer imports up front (it is lazy, so
        # that the command line starts without torch): load them as it used to
        moduleprofiler._load_public_names()
        return profile_from_json(source, cls)

    def to_csv(self, buf: Buffer = None, *, aggregate: Aggregate = "call") -> str | None:
        """:meth:`to_df` of ``aggregate`` with every column (``columns="all"``: a column no
        row has a value in is written empty) as CSV with raw numbers (unknown = empty cell);
        the command line's ``--per`` writes the same file."""
        return export_profile(self, "csv", buf, aggregate=aggregate)

    def to_markdown(self, buf: Buffer = None, **options: Any) -> str | None:
        """:meth:`table` (same options) as a Markdown table with human units."""
        return export_profile(self, "markdown", buf, **options)

    def to_latex(self, buf: Buffer = None, **options: Any) -> str | None:
        """:meth:`table` (same options) as a booktabs ``table`` float that fits a one-column
        ``article``; also ``caption``, ``label``, ``position``, ``environment``,
        ``escape_caption``, ``wide`` (a ``table*``), ``width`` (in points), ``fit``
        (:meth:`View.to_latex`)."""
        return export_profile(self, "latex", buf, **options)

    def to_html(self, buf: Buffer = None, *, title: str | None = None) -> str | None:
        """A self-contained HTML report: summary, charts, module tree, sortable table."""
        if title is not None:
            check_str(title, "title")
        return export_profile(self, "html", buf, title=title)

    def to_text(self, buf: Buffer = None, **options: Any) -> str | None:
        """:meth:`tree` (same options) as text; also ``unicode`` and ``color``."""
        return export_profile(self, "text", buf, **options)

    def to_tensorboard(self, writer: SummaryWriter, step: int = 0, *,
                       prefix: str = "moduleprofiler", depth: int = 1,
                       columns: Sequence[str] | None = None) -> None:
        """Write to a ``torch.utils.tensorboard.SummaryWriter`` (the ``tensorboard`` extra)
        at ``step``: scalars ``<prefix>/<module>/<column>`` of the modules at ``depth``,
        ``<prefix>/total/<column>`` (``<prefix>/.total/<column>`` where a module written is
        named ``total``), the tree and the report summary as text; unknown values are
        skipped (:func:`moduleprofiler.export.tensorboard.write_tensorboard`)."""
        write_tensorboard(self, writer, step, prefix=prefix, depth=depth, columns=columns)

    def save(self, path: PathLike, format: str | None = None, **options: Any) -> None:
        """Write in ``format`` (default: from the suffix of ``path``, see
        :data:`moduleprofiler.export.FORMATS`: .json .csv .md .html .tex .txt); ``options``
        go to the matching ``to_*`` method."""
        save_profile(self, path, format, **options)


def _check_same_input(here: tuple[Any, tuple[str, ...]] | None,
                      there: tuple[Any, tuple[str, ...]] | None, what: str) -> None:
    """Refuse ``there`` (the other result's model input, ``what`` names it) when both are
    known and their shapes differ; the dtypes are named, not compared (a prediction in bf16
    scales a float32 timing)."""
    if here is None or there is None or _tuples(here[0]) == _tuples(there[0]):
        return
    shown = formatter(column_spec("input_shapes"))
    dtypes = formatter(column_spec("input_dtypes"))
    raise InputMismatchError(
        f"{what} ran on another input: the model took {shown(here[0])} ({dtypes(here[1])}) "
        f"here and {shown(there[0])} ({dtypes(there[1])}) there (another batch size?); its "
        "numbers, measured on that input, would stand beside this pass's: run both passes on "
        "the same input", here[0], there[0])


def _given_input(result: Any) -> tuple[Any, tuple[str, ...]] | None:
    """The model input of a result passed to :meth:`Profile.summary`: a memory report's, a
    latency result's (``None`` for a number, a ``torch.utils.benchmark.Measurement``, a
    result that does not know it)."""
    if isinstance(result, ProfileData):
        return result.model_input
    shapes = getattr(result, "input_shapes", None)
    return None if shapes is None else (shapes, tuple(getattr(result, "input_dtypes", ())))


def _tuples(tree: Any) -> Any:
    """``tree`` with its lists as tuples: a JSON file keeps some lists as arrays, read back
    as tuples, and a list of tensors is the same input as a tuple of them."""
    if isinstance(tree, (list, tuple)):
        return tuple(_tuples(item) for item in tree)
    if isinstance(tree, dict):
        return {key: _tuples(item) for key, item in tree.items()}
    return tree


def _with_width(view: View, width: int | None) -> View:
    """``view`` with its text width (unchanged for ``None``); a typed error for a bad one."""
    check_int(width, "width", 0)
    return view if width is None else dataclasses.replace(view, width=width)
