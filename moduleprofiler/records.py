"""Immutable results: one :class:`CallRecord` per module call, static :class:`ModuleInfo` per
module, and the :class:`Profile` that holds them. Everything else is a view of these."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import pandas as pd

    from moduleprofiler.export.io import Buffer, PathLike
    from moduleprofiler.export.view import View
    from moduleprofiler.memory import MemoryReport
    from moduleprofiler.timing import ModuleTiming

OpsSource = Literal["formula", "operator", "mixed", "excluded", "unknown"]
"""Where a call's own ops came from:

* ``formula``: the module formula of its type (operators inside are not counted again);
* ``operator``: the aten operators its own forward ran (no module formula for its type);
* ``mixed``: operators, some of which have no operator formula (see
  ``Profile.unsupported_ops``): the count is a lower bound;
* ``excluded``: not counted on purpose (``exclude_from_ops``);
* ``unknown``: no formula and operator accounting was off."""

_COUNTED: tuple[str, ...] = ("formula", "operator", "excluded")

Aggregate = Literal["call", "module", "type"]


@dataclass(frozen=True, slots=True)
class ModuleInfo:
    """Static facts about one module of the profiled model (called or not)."""

    path: str
    """Dotted path as in ``named_modules()``; the root is ``""``."""
    type_name: str
    depth: int
    params: int
    """Parameters of the module and its descendants, each tensor counted once."""
    own_params: int
    """Parameters registered directly on the module (``recurse=False``)."""
    trainable_params: int
    """Of ``params``, those with ``requires_grad``."""
    buffers: int
    """Elements of the buffers of the module and its descendants, each tensor counted once."""
    is_leaf: bool
    param_bytes: int = 0
    """Bytes of ``params`` (``numel * element_size``, each tensor once)."""
    buffer_bytes: int = 0
    """Bytes of ``buffers``."""


@dataclass(frozen=True, slots=True)
class CallRecord:
    """One call of one module during the profiled forward pass."""

    index: int
    """Position in execution order (order in which the calls started)."""
    parent: int | None
    """``index`` of the call that was running when this one started (``None`` for the first)."""
    depth: int
    """Nesting depth in the runtime call stack (0 for the outermost call)."""
    path: str
    type_name: str
    call_number: int
    """0 for the module's first call, 1 for its second, ..."""
    input_shapes: Any
    """Shape tree of the positional arguments (a tuple), with a trailing dict of keyword
    arguments when there were any."""
    input_dtypes: tuple[str, ...]
    output_shapes: Any
    output_dtypes: tuple[str, ...]
    output_bytes: int
    """Bytes of memory the outputs occupy that were not there before the call: each distinct
    storage once, storages shared with the inputs or the module's own parameters and buffers
    (views, in-place results) excluded."""
    input_size: Any
    """0.0.4's ``input_size`` (from the io-size function of the module's type)."""
    output_size: Any
    """0.0.4's ``output_size``."""
    params: int
    own_params: int
    ops: int | float | None
    """Operations of this call's own work (children excluded); ``None`` = unknown."""
    macs: int | float | None
    """Multiply-accumulates of this call's own matmul/conv-type work; ``None`` = unknown."""
    ops_source: OpsSource
    inclusive_ops: int | float
    """``ops`` plus the inclusive ops of every child call (unknown parts count as 0;
    see ``complete``)."""
    inclusive_macs: int | float
    complete: bool
    """Whether this call and every call inside it have known ops."""
    backward_ops: int | float | None = None
    """Ops of the backward work that autograd did for this call's own forward operators
    (``profile(..., backward=True)``; ``None`` when backward was not run)."""
    backward_macs: int | float | None = None


@dataclass(frozen=True)
class Profile:
    """The result of one profiled forward pass: per-call records plus the model's modules.

    Every table, export and legacy dict is a view of these records.
    """

    records: tuple[CallRecord, ...]
    modules: tuple[ModuleInfo, ...]
    excluded: tuple[str, ...] = ()
    """Paths of modules excluded from ops counting (``exclude_from_ops``)."""
    total_params: int = 0
    """``sum(p.numel())`` over the model's distinct parameters (tied weights once)."""
    total_buffers: int = 0
    unsupported_ops: dict[str, int] = field(default_factory=dict)
    """Operators that ran but have no operator formula, with their call counts."""
    outside_ops: int | float = 0
    """Ops of operators that ran outside every module call (e.g. in a ``pred_fn``)."""
    outside_macs: int | float = 0
    backward: bool = False
    """Whether a backward pass was profiled (``profile(..., backward=True)``)."""
    backward_unsupported_ops: dict[str, int] = field(default_factory=dict)
    """Backward operators without a formula, with their call counts."""
    backward_outside_ops: int | float = 0
    """Backward ops not created by any module call (the loss, gradient accumulation)."""
    backward_outside_macs: int | float = 0
    module_metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Measured per-module columns attached by :meth:`with_timing` / :meth:`with_memory`
    (module path -> column -> value); every module view shows them."""
    _by_path: dict[str, ModuleInfo] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._by_path.update({info.path: info for info in self.modules})

    # -- lookups ---------------------------------------------------------------------------
    def __iter__(self) -> Iterator[CallRecord]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def module(self, path: str) -> ModuleInfo:
        """Static information on the module at ``path`` (``KeyError`` if there is none)."""
        return self._by_path[path]

    def calls(self, path: str) -> tuple[CallRecord, ...]:
        """Every call record of the module at ``path``, in execution order."""
        return tuple(record for record in self.records if record.path == path)

    def calls_by_module(self) -> dict[str, list[CallRecord]]:
        """Call records grouped by module path, every module present (``[]`` if uncalled)."""
        grouped: dict[str, list[CallRecord]] = {info.path: [] for info in self.modules}
        for record in self.records:
            grouped.setdefault(record.path, []).append(record)
        return grouped

    @property
    def roots(self) -> tuple[CallRecord, ...]:
        """The outermost calls (normally the single call of the root module)."""
        return tuple(record for record in self.records if record.parent is None)

    # -- totals ----------------------------------------------------------------------------
    @property
    def total_ops(self) -> int | float:
        """Sum of every call's own ops (a lower bound when ``complete`` is False)."""
        own = sum(record.ops for record in self.records if record.ops is not None)
        return own + self.outside_ops

    @property
    def total_macs(self) -> int | float:
        """Sum of every call's own multiply-accumulates."""
        own = sum(record.macs for record in self.records if record.macs is not None)
        return own + self.outside_macs

    @property
    def total_flops(self) -> int | float:
        """``2 * total_macs``: the number ``torch.utils.flop_counter.FlopCounterMode`` reports."""
        return 2 * self.total_macs

    @property
    def total_backward_ops(self) -> int | float | None:
        """Ops of the profiled backward pass (``None`` when backward was not run)."""
        if not self.backward:
            return None
        own = sum(record.backward_ops or 0 for record in self.records)
        return own + self.backward_outside_ops

    @property
    def total_backward_macs(self) -> int | float | None:
        """Multiply-accumulates of the profiled backward pass."""
        if not self.backward:
            return None
        own = sum(record.backward_macs or 0 for record in self.records)
        return own + self.backward_outside_macs

    @property
    def complete(self) -> bool:
        """True when every call's ops are known: no unsupported module was called and no
        operator without a formula ran. When False, the totals are lower bounds."""
        return not self.unsupported_ops and not self.backward_unsupported_ops and all(
            record.ops_source in _COUNTED for record in self.records
        )

    @property
    def unsupported(self) -> tuple[str, ...]:
        """Paths of called modules whose own ops are unknown or only partly known."""
        return tuple(
            dict.fromkeys(r.path for r in self.records if r.ops_source not in _COUNTED)
        )

    @property
    def unsupported_types(self) -> tuple[str, ...]:
        """Type names of the modules listed in :attr:`unsupported`."""
        return tuple(
            dict.fromkeys(r.type_name for r in self.records if r.ops_source not in _COUNTED)
        )

    @property
    def uncalled(self) -> tuple[str, ...]:
        """Paths of modules that were never called during the pass."""
        called = {record.path for record in self.records}
        return tuple(info.path for info in self.modules if info.path not in called)

    # -- views -----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Plain-Python view: totals, per-call records, modules, uncalled/unsupported lists."""
        from moduleprofiler.export.frame import profile_to_dict

        return profile_to_dict(self)

    def to_df(self, aggregate: Aggregate = "call") -> pd.DataFrame:
        """Tidy DataFrame: one row per call, per module (calls summed) or per module type."""
        from moduleprofiler.export.frame import profile_frame

        return profile_frame(self, aggregate)

    def summary(self, memory: MemoryReport | None = None, latency: Any = None) -> pd.DataFrame:
        """One row for the whole model: parameters, model size, peak activations, MACs, FLOPs,
        latency and throughput (memory and latency columns filled when given a
        :class:`~moduleprofiler.memory.MemoryReport` and a latency result)."""
        from moduleprofiler.memory import model_summary

        return model_summary(self, memory, latency)

    def with_metrics(self, metrics: dict[str, dict[str, Any]]) -> Profile:
        """A copy with extra per-module columns (``{path: {column: value}}``) merged in."""
        merged = {path: dict(columns) for path, columns in self.module_metrics.items()}
        for path, columns in metrics.items():
            merged.setdefault(path, {}).update(columns)
        return dataclasses.replace(self, module_metrics=merged, _by_path={})

    def with_timing(self, timing: ModuleTiming) -> Profile:
        """A copy whose module views also show forward time from
        :meth:`ModuleProfiler.time_modules`: ``time_median_ms`` (the module with its children)
        and ``self_time_median_ms`` (its own code), medians over the timed iterations."""
        from moduleprofiler.legacy import ROOT_NAME

        frame = timing.to_df()
        return self.with_metrics({
            "" if row.module == ROOT_NAME else str(row.module): {
                "time_median_ms": row.inclusive_median_ms,
                "self_time_median_ms": row.self_median_ms,
            }
            for row in frame.itertuples(index=False)
        })

    def with_memory(self, memory: MemoryReport) -> Profile:
        """A copy whose module views also show what :meth:`ModuleProfiler.measure_memory`
        measured, summed over each module's calls: ``saved_bytes`` (saved for backward by the
        module and its children), ``self_saved_bytes`` (by its own operators) and
        ``max_live_bytes`` (the most memory live during one of its calls)."""
        frame = memory.to_df()
        metrics: dict[str, dict[str, Any]] = {}
        for path, calls in frame.groupby("module", sort=False):
            metrics[str(path)] = {
                "saved_bytes": _sum_or_none(calls["saved_bytes"]),
                "self_saved_bytes": _sum_or_none(calls["self_saved_bytes"]),
                "max_live_bytes": _max_or_none(calls["max_live_bytes"]),
            }
        return self.with_metrics(metrics)

    # -- export views (issue 6) ------------------------------------------------------------
    # Thin delegations: the logic lives in moduleprofiler.export (docs/exports.md).
    def tree(self, columns: Sequence[str] | None = None, **options: Any) -> View:
        """The module tree annotated with ``columns`` and % of the total; options:
        ``max_depth``, ``min_pct``, ``pct_of``, ``include``, ``exclude``
        (:func:`moduleprofiler.export.select.tree_view`)."""
        from moduleprofiler.export.select import tree_view

        return tree_view(self, columns, **options)

    def table(self, columns: Sequence[str] | None = None, **options: Any) -> View:
        """A flat table; options: ``aggregate``, ``max_depth``, ``min_pct``, ``pct_of``,
        ``sort_by``, ``ascending``, ``include``, ``exclude``, ``limit``
        (:func:`moduleprofiler.export.select.table_view`)."""
        from moduleprofiler.export.select import table_view

        return table_view(self, columns, **options)

    def top(self, k: int | None = 10, *, by: str = "ops", depth: int | None = None) -> View:
        """The ``k`` module types with the most ``by``, over all modules' own work or over
        the modules at ``depth`` (:func:`moduleprofiler.export.select.top_view`)."""
        from moduleprofiler.export.select import top_view

        return top_view(self, k, by=by, depth=depth)

    def __str__(self) -> str:
        return str(self.tree())

    def to_json(self, buf: Buffer = None, *, indent: int | None = 2) -> str | None:
        """Schema-versioned JSON that :meth:`from_json` reads back into an equal profile."""
        from moduleprofiler.export.json_io import profile_to_json

        return profile_to_json(self, buf, indent=indent)

    @classmethod
    def from_json(cls, source: str | PathLike | IO[str]) -> Profile:
        """The profile saved by :meth:`to_json` (a path, a file object, or the JSON text)."""
        from moduleprofiler.export.json_io import profile_from_json

        return profile_from_json(source)

    def to_csv(self, buf: Buffer = None, *, aggregate: Aggregate = "call") -> str | None:
        """:meth:`to_df` as CSV with raw numbers (unknown = empty cell)."""
        from moduleprofiler.export.formats import profile_csv

        return profile_csv(self, buf, aggregate=aggregate)

    def to_markdown(self, buf: Buffer = None, **options: Any) -> str | None:
        """:meth:`table` (same options) as a Markdown table with human units."""
        from moduleprofiler.export.formats import export_profile

        return export_profile(self, "markdown", buf, **options)

    def to_latex(self, buf: Buffer = None, **options: Any) -> str | None:
        """:meth:`table` (same options) as a booktabs ``table`` float; also ``caption``,
        ``label``, ``position``, ``environment``, ``escape_caption``."""
        from moduleprofiler.export.formats import export_profile

        return export_profile(self, "latex", buf, **options)

    def to_html(self, buf: Buffer = None, *, title: str | None = None) -> str | None:
        """A self-contained HTML report: summary, charts, module tree, sortable table."""
        from moduleprofiler.export.report import render_report

        return render_report(self, buf, title=title)

    def to_text(self, buf: Buffer = None, **options: Any) -> str | None:
        """:meth:`tree` (same options) as text; also ``unicode`` and ``color``."""
        from moduleprofiler.export.formats import export_profile

        return export_profile(self, "text", buf, **options)

    def save(self, path: PathLike, format: str | None = None, **options: Any) -> None:
        """Write in ``format`` (default: from the suffix of ``path``: .json .csv .md .html
        .tex .txt); ``options`` go to the matching ``to_*`` method."""
        from moduleprofiler.export.formats import save_profile

        save_profile(self, path, format, **options)

    def __repr__(self) -> str:
        return (
            f"Profile(calls={len(self.records)}, modules={len(self.modules)}, "
            f"total_params={self.total_params}, total_ops={self.total_ops}, "
            f"total_macs={self.total_macs}, complete={self.complete})"
        )


def _sum_or_none(values: pd.Series) -> int | None:
    known = values.dropna()
    return None if known.empty else int(known.sum())


def _max_or_none(values: pd.Series) -> int | None:
    known = values.dropna()
    return None if known.empty else int(known.max())
