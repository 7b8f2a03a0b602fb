"""``ModuleProfiler``: the core :class:`~moduleprofiler.core.Profiler` plus moduleprofiler
0.0.4's constructor and its 25 passes (5 analyses x dict/DataFrame/CSV/HTML/LaTeX), same names,
keywords, defaults, keys and columns, as thin views over :class:`Profile` and the timer.
What changed, bug by bug, is listed in ``CHANGELOG.md``."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from typing import Any, ClassVar

import pandas as pd
import torch
from torch import nn

from moduleprofiler.compat.io_size import live_io_size_map
from moduleprofiler.compat.timing import TIME_STATS, inference_time_dict, total_inference_time_dict
from moduleprofiler.core import Profiler
from moduleprofiler.export.aggregate import call_tree, sum_known
from moduleprofiler.export.frame import count_series
from moduleprofiler.export.io import check_path
from moduleprofiler.export.names import module_name
from moduleprofiler.export.tables import PathLike, frame_text, write_frame, write_text
from moduleprofiler.failure import located_errors
from moduleprofiler.inputs import forward_binds, unpacks, unwrap_compiled
from moduleprofiler.modules import ModuleFacts, module_facts
from moduleprofiler.operators.registry import OperatorMap
from moduleprofiler.records import COUNTED_SOURCES, ProfileData, subtree_totals, without_formula
from moduleprofiler.registry import FormulaMap, LiveFormulaMap
from moduleprofiler.storage import own_nbytes
from moduleprofiler.tensors import numel
from moduleprofiler.timing import (
    LatencyResult,
    ModuleTiming,
    TimingOptions,
    TrainingTiming,
    benchmark,
    time_modules,
    train_step_times,
)
from moduleprofiler.validate import (
    check_bool,
    check_callable,
    check_formula_map,
    check_pass,
    check_str,
)
from moduleprofiler.warn import LowerBoundWarning, warn

_COUNT_COLUMNS = ("ops", "macs", "inclusive_ops", "inclusive_macs")


def dict_to_frame(result: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """0.0.4's table layout: a ``module`` column, then the dict's keys in order, RangeIndex.

    Count columns become nullable integers so that unknown stays ``<NA>`` and known counts stay
    ints (0.0.4 turned them into floats or ``None`` objects).
    """
    rows = [{"module": name, **values} for name, values in result.items()]
    frame = pd.DataFrame(rows)
    for column in _COUNT_COLUMNS:
        if column in frame.columns:
            frame[column] = count_series([row[column] for row in rows], column)
    return frame


def _dtype_summary(
    params: list[torch.Tensor],
) -> torch.dtype | tuple[torch.dtype, ...] | None:
    dtypes = tuple(dict.fromkeys(p.dtype for p in params))
    if not dtypes:
        return None
    return dtypes[0] if len(dtypes) == 1 else dtypes


def _bits(tensors: Iterable[torch.Tensor]) -> int:
    """Bits the tensors hold, as ``param_bytes`` counts them (:func:`own_nbytes`)."""
    return 8 * sum(map(own_nbytes, tensors))


def _same_or_list(values: list[Any]) -> Any:
    """One value when every call agrees, else the list of per-call values."""
    if not values:
        return None
    first = values[0]
    return first if all(value == first for value in values[1:]) else values


def legacy_pred_fn(input: Any, pred_fn: Callable[..., Any] | None,
                   module: nn.Module | None = None) -> Callable[..., Any] | None:
    """``pred_fn`` adapted to 0.0.4's convention: 0.0.4 called ``pred_fn(**input)`` for a dict
    and ``pred_fn(input)`` (or ``module(input)``) for anything else, a tuple or list included
    (its users wrote ``pred_fn=lambda t: model(*t)``), where ``Profiler.profile`` calls
    ``pred_fn(*input)`` (or ``module(*input)``). For a tuple or list input the returned
    callable ignores the spread arguments and calls ``pred_fn(input)``; without ``pred_fn``,
    where ``module``'s forward takes one positional argument and not ``len(input)`` of them
    (spreading would raise), it calls ``module(input)``, as 0.0.4 did for a model that takes a
    list or pair; otherwise ``pred_fn`` is returned as it is.

    Raises:
        TypeError: ``pred_fn`` is neither ``None`` nor callable.
    """
    check_callable(pred_fn, "pred_fn", "a function that calls the module")
    if not unpacks(input):
        return pred_fn
    whole: Callable[..., Any]
    if pred_fn is not None:
        whole = pred_fn
    elif isinstance(module, nn.Module) and _takes_it_whole(unwrap_compiled(module), len(input)):
        whole = unwrap_compiled(module)  # the eager module, as the passes call it
    else:
        return None

    def call_with_whole_input(*spread: Any) -> Any:
        return whole(input)

    # a pred_fn keeps its name (messages name it); a module's attributes stay its own
    return call_with_whole_input if pred_fn is None else functools.wraps(whole)(
        call_with_whole_input)


def _takes_it_whole(module: nn.Module, count: int) -> bool:
    """Whether ``module``'s forward takes one positional argument but not ``count``: a tuple or
    list of ``count`` items is then its one argument."""
    return count != 1 and forward_binds(module, count) is False \
        and forward_binds(module, 1) is True


Writer = Callable[..., None]


def _writers(analysis: str, latex_note: str = "") -> tuple[Writer, Writer, Callable[..., str]]:
    """The ``<analysis>_csv``, ``_html`` and ``_latex`` methods: ``<analysis>_df`` written
    through the format table (the frame as it is, columns by name; ``.csv``/``.html`` added to
    a file name without it; the LaTeX a bare booktabs ``tabular`` that compiles)."""

    def frame(self: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> pd.DataFrame:
        return getattr(self, f"{analysis}_df")(*args, **kwargs)

    def checked(file: Any, args: tuple[Any, ...]) -> PathLike:
        if isinstance(file, nn.Module):  # the model first: 0.0.4's order is file, model
            hint = (f" (swap them: {analysis}_csv(file, module, ...))"
                    if args and isinstance(args[0], (str, os.PathLike)) else "")
            raise TypeError(f"file must be a path, got the model {type(file).__name__}{hint}")
        return check_path(file, "file")

    def to_csv(self: Any, file: PathLike, *args: Any, **kwargs: Any) -> None:
        path = checked(file, args)  # before the frame: its own error would name the module
        self._log(f"Results saved to {write_frame(frame(self, args, kwargs), path, 'csv')}")

    def to_html(self: Any, file: PathLike, *args: Any, **kwargs: Any) -> None:
        path = checked(file, args)
        self._log(f"Results saved to {write_frame(frame(self, args, kwargs), path, 'html')}")

    def to_latex(self: Any, *args: Any, index: bool = False, file: PathLike | None = None,
                 **kwargs: Any) -> str:
        check_bool(index, "index")
        path = None if file is None else checked(file, args)
        text = frame_text(frame(self, args, kwargs), "latex", index=index)
        if path is not None:  # as the csv and html writers do (0.0.4 had no file here)
            self._log(f"Results saved to {write_text(text, path, 'latex')}")
        return text

    docs = {
        to_csv: f"Write :meth:`{analysis}_df` to ``file`` (``.csv`` added if missing).",
        to_html: f"Write :meth:`{analysis}_df` to ``file`` as HTML (``.html`` added if "
                 "missing); names escaped.",
        to_latex: f":meth:`{analysis}_df` as a booktabs LaTeX tabular that compiles and fits "
                  f"the line{' ' + latex_note if latex_note else ''}; also written to ``file`` "
                  "(``.tex`` added if missing) when given.",
    }
    for method, doc in docs.items():
        suffix = method.__name__.removeprefix("to_")
        method.__name__ = f"{analysis}_{suffix}"
        method.__qualname__ = f"ModuleProfiler.{analysis}_{suffix}"
        method.__doc__ = doc
    return to_csv, to_html, to_latex


def _views(analysis: str, note: str = "") -> tuple[Callable[..., pd.DataFrame], Writer, Writer,
                                                   Callable[..., str]]:
    """The ``<analysis>_df`` method (the dict as :func:`dict_to_frame` lays it out) and the
    :func:`_writers` of it."""

    def to_df(self: Any, *args: Any, **kwargs: Any) -> pd.DataFrame:
        return dict_to_frame(getattr(self, analysis)(*args, **kwargs))

    to_df.__name__ = f"{analysis}_df"
    to_df.__qualname__ = f"ModuleProfiler.{analysis}_df"
    to_df.__doc__ = f":meth:`{analysis}` as a DataFrame{note}."
    return (to_df, *_writers(analysis))


class ModuleProfiler(Profiler):
    """Profiles any ``nn.Module``: the core :class:`~moduleprofiler.core.Profiler` (``profile``,
    ``benchmark``, ``time_modules``, ``train_step_times``, ``measure_memory``,
    ``parameter_memory_df``), with moduleprofiler 0.0.4's constructor and 25 methods.

    Args:
        input_size_attr: accepted for compatibility with moduleprofiler 0.0.4 and unused, as
            are ``output_size_attr``, ``ops_attr``, ``inference_start_attr`` and
            ``inference_end_attr``: this version never writes attributes onto your modules.
        output_size_attr: see ``input_size_attr``.
        ops_attr: see ``input_size_attr``.
        inference_start_attr: see ``input_size_attr``.
        inference_end_attr: see ``input_size_attr``.
        io_size_fn_map: module type -> ``(module, inputs, output) -> (input_size, output_size)``:
            own entries over the live :func:`~moduleprofiler.register_io_size` registry, as
            ``ops_fn_map``.
        ts_fmt: timestamp format of verbose log lines.

    ``ops_fn_map``, ``exclude_from_ops``, ``verbose``, ``macs_fn_map`` and ``operator_fn_map``
    are :class:`~moduleprofiler.core.Profiler`'s.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> ops = ModuleProfiler().estimate_ops(nn.Linear(5, 7), torch.randn(2, 3, 5))
        >>> root = ops["__root__"]  # 0.0.4's dict, keyed by module name
        >>> root["ops"], root["calls"]  # 2 * 3 rows * 7 outputs * (2 * 5 - 1 + 1 bias add)
        (420, 1)
    """

    _MAP_CHECKS: ClassVar[dict[str, Callable[[Any, str], None]]] = {
        **Profiler._MAP_CHECKS, "io_size_fn_map": check_formula_map,
    }
    _LIVE: ClassVar[dict[str, Callable[[Any], LiveFormulaMap]]] = {
        **Profiler._LIVE, "io_size_fn_map": live_io_size_map,
    }

    def __init__(
        self,
        input_size_attr: str = "__input_size__",
        output_size_attr: str = "__output_size__",
        ops_attr: str = "__ops__",
        inference_start_attr: str = "__inference_start__",
        inference_end_attr: str = "__inference_end__",
        io_size_fn_map: FormulaMap | None = None,
        ops_fn_map: FormulaMap | None = None,
        exclude_from_ops: Iterable[type[nn.Module] | nn.Module] | None = None,
        ts_fmt: str = "%Y-%m-%d %H:%M:%S",
        verbose: bool = False,
        *,
        macs_fn_map: FormulaMap | None = None,
        operator_fn_map: OperatorMap | None = None,
    ) -> None:
        for name, value in (("input_size_attr", input_size_attr),
                            ("output_size_attr", output_size_attr), ("ops_attr", ops_attr),
                            ("inference_start_attr", inference_start_attr),
                            ("inference_end_attr", inference_end_attr), ("ts_fmt", ts_fmt)):
            check_str(value, name)
        if io_size_fn_map is not None:
            check_formula_map(io_size_fn_map, "io_size_fn_map")
        self.io_size_fn_map: MutableMapping[Any, Any] = live_io_size_map(io_size_fn_map)
        self.ts_fmt = ts_fmt
        super().__init__(ops_fn_map=ops_fn_map, exclude_from_ops=exclude_from_ops,
                         verbose=verbose, macs_fn_map=macs_fn_map,
                         operator_fn_map=operator_fn_map)

    def _io_size_fns(self) -> Mapping[Any, Callable[..., Any]]:
        return self._live("io_size_fn_map")

    # -- count_params ----------------------------------------------------------------------
    def count_params(self, module: nn.Module, param_size: bool = True, param_dtype: bool = True,
                     percent: bool = True) -> dict[str, dict[str, Any]]:
        """Parameters of every module (each including its descendants), trainable or not.

        Shared/tied parameters are counted once per module; ``*_dtype`` is the dtype, or a tuple
        of dtypes when they are mixed; ``*_size_bits`` sums the bits each tensor holds, as
        ``param_bytes`` counts them (a ``DTensor``: the shard this rank holds; a sparse tensor:
        its indices and stored values); ``*_params`` counts elements (a ``DTensor`` at its
        global size, a sparse tensor at its dense shape); ``*_percent``
        is a fraction of the root's parameters (0.0 for a parameter-less model). Buffers are
        reported separately in ``buffers`` and ``buffers_size_bits``.

        A lazy module's parameters and buffers that have not been materialised yet (no
        forward has run: ``nn.LazyLinear`` before its first call) count 0 elements and 0 bits;
        their dtype is reported. Run one forward first to count them.

        The weights of quantized modules, packed in objects ``parameters()`` does not yield,
        count as non-trainable parameters (:mod:`moduleprofiler.packed`); where a packing
        cannot be read, ``nontrainable_params`` of its module and of those above it is the
        known part, ``None`` where that part is 0 (unknown, never 0), and a
        :class:`~moduleprofiler.warn.LowerBoundWarning` names those modules.
        """
        check_pass(module, param_size=param_size, param_dtype=param_dtype, percent=percent)
        module = unwrap_compiled(module)
        self._log(f"Counting parameters of {type(module).__name__}")
        facts = module_facts(module)
        root_total = sum(numel(p) for p in facts[0].params)
        unknown = _holding_unreadable(facts)
        result: dict[str, dict[str, Any]] = {}
        for fact in facts:
            trainable = [p for p in fact.params if p.requires_grad]
            frozen = [p for p in fact.params if not p.requires_grad]
            row: dict[str, Any] = {"type": type(fact.module).__name__}
            for prefix, group in (("trainable", trainable), ("nontrainable", frozen)):
                row[f"{prefix}_params"] = sum(numel(p) for p in group)
                row[f"{prefix}_params_dtype"] = _dtype_summary(group) if param_dtype else None
                row[f"{prefix}_params_size_bits"] = _bits(group) if param_size else 0
            if percent:
                for prefix in ("trainable", "nontrainable"):
                    count = row[f"{prefix}_params"]
                    row[f"{prefix}_params_percent"] = count / root_total if root_total else 0.0
            if fact.path in unknown and not row["nontrainable_params"]:
                row["nontrainable_params"] = None  # packed weights that cannot be read
                if percent:
                    row["nontrainable_params_percent"] = None
            row["buffers"] = sum(numel(b) for b in fact.buffers)
            row["buffers_size_bits"] = _bits(fact.buffers) if param_size else 0
            result[module_name(fact.path)] = row
        if unknown:
            warn(f"count_params: the nontrainable_params of {sorted(map(module_name, unknown))}"
                 " count only the packed weights that can be read (lower bounds); modules "
                 f"{[module_name(f.path) for f in facts if f.unreadable]} hold a packing "
                 "that cannot be read", LowerBoundWarning)
        return result

    (count_params_df, count_params_csv, count_params_html,
     count_params_latex) = _views("count_params", " (``module`` column first)")

    # -- trace_io_sizes --------------------------------------------------------------------
    def trace_io_sizes(self, module: nn.Module, input: Any,
                       pred_fn: Callable[..., Any] | None = None,
                       eval: bool = False) -> dict[str, dict[str, Any]]:
        """``input_size``/``output_size`` of every module (``None`` when never called).

        A module called several times with different sizes gets the list of per-call sizes.
        """
        self._log(f"Tracing I/O shapes of {type(module).__name__}")  # 0.0.4's log line
        profile = self.profile(module, input, pred_fn=legacy_pred_fn(input, pred_fn, module),
                               eval=eval)
        calls = profile.calls_by_module()
        result: dict[str, dict[str, Any]] = {}
        for info in profile.modules:
            records = calls[info.path]
            result[module_name(info.path)] = {
                "type": info.type_name,
                "input_size": _same_or_list([r.input_size for r in records]),
                "output_size": _same_or_list([r.output_size for r in records]),
            }
        return result

    (trace_io_sizes_df, trace_io_sizes_csv, trace_io_sizes_html,
     trace_io_sizes_latex) = _views("trace_io_sizes")

    # -- estimate_ops ----------------------------------------------------------------------
    def estimate_ops(self, module: nn.Module, input: Any,
                     pred_fn: Callable[..., Any] | None = None,
                     eval: bool = True) -> dict[str, dict[str, Any]]:
        """Own ops of every module, summed over its calls; ``None`` when unknown, excluded or
        never called. Extra keys: ``macs``, ``inclusive_ops`` (the module and everything it
        called) and ``calls``."""
        self._log(f"Estimating ops of {type(module).__name__}")  # 0.0.4's log line
        profile = self.profile(module, input, pred_fn=legacy_pred_fn(input, pred_fn, module),
                               eval=eval)
        calls = profile.calls_by_module()
        tree = call_tree(profile)  # a call inside another call of its module is inside it
        result: dict[str, dict[str, Any]] = {}
        for info in profile.modules:
            records = calls[info.path]
            outer = [profile.records[row].ops for row in tree.rows.get(info.path, [])
                     if tree.outermost[row]]
            result[module_name(info.path)] = {
                "type": info.type_name,
                "ops": sum_known(r.self_ops for r in records),
                "macs": sum_known(r.self_macs for r in records),
                "inclusive_ops": sum_known(outer),
                "calls": len(records),
            }
        _warn_lower_bounds(profile, result)
        return result

    (estimate_ops_df, estimate_ops_csv, estimate_ops_html,
     estimate_ops_latex) = _views("estimate_ops", " (counts as nullable integers)")

    # -- the timing passes with every keyword of their functions ---------------------------
    def benchmark(self, module: nn.Module, input: Any = None,
                  options: TimingOptions | None = None, **kwargs: Any) -> LatencyResult:
        """:meth:`Profiler.benchmark <moduleprofiler.core.Profiler.benchmark>`, also taking
        every keyword of :func:`moduleprofiler.timing.benchmark` (``max_seconds=``...) beside
        ``options``."""
        self._log(f"Benchmarking {type(module).__name__}")
        with located_errors(module):
            return benchmark(module, input, options=options, **kwargs)

    def time_modules(self, module: nn.Module, input: Any = None,
                     options: TimingOptions | None = None, **kwargs: Any) -> ModuleTiming:
        """:meth:`Profiler.time_modules <moduleprofiler.core.Profiler.time_modules>`, also
        taking every keyword of :func:`moduleprofiler.timing.time_modules` beside
        ``options``."""
        self._log(f"Timing the modules of {type(module).__name__}")
        return time_modules(module, input, options=options, **kwargs)

    def train_step_times(self, module: nn.Module, input: Any = None,
                         options: TimingOptions | None = None,
                         **kwargs: Any) -> TrainingTiming:
        """:meth:`Profiler.train_step_times <moduleprofiler.core.Profiler.train_step_times>`,
        also taking every keyword of :func:`moduleprofiler.timing.train_step_times` beside
        ``options``."""
        self._log(f"Timing training steps of {type(module).__name__}")
        return train_step_times(module, input, options=options, **kwargs)

    # -- estimate_inference_time -----------------------------------------------------------
    def estimate_inference_time(self, module: nn.Module, input: Any, eval: bool = True,
                                num_iters: int = 1000, drop_first: int = 100, *,
                                pred_fn: Callable[..., Any] | None = None
                                ) -> dict[str, dict[str, Any]]:
        """Per-module forward time in ms over ``num_iters`` hooked forwards, the first
        ``drop_first`` dropped. A module called several times per forward gets the sum of its
        calls per iteration."""
        return self._timed(inference_time_dict, "estimate_inference_time", module, input, eval,
                           num_iters, drop_first, pred_fn)

    def estimate_inference_time_df(self, *args: Any, aggr: bool = True,
                                   **kwargs: Any) -> pd.DataFrame:
        """:meth:`estimate_inference_time` as a DataFrame: statistics per module
        (``aggr=True``) or one row per module and iteration (``aggr=False``)."""
        check_bool(aggr, "aggr")  # before the run, not after it
        return _timing_frame(self.estimate_inference_time(*args, **kwargs), aggr)

    (estimate_inference_time_csv, estimate_inference_time_html,
     estimate_inference_time_latex) = _writers("estimate_inference_time")

    # -- estimate_total_inference_time -----------------------------------------------------
    def estimate_total_inference_time(self, module: nn.Module, input: Any, eval: bool = True,
                                      num_iters: int = 1000, drop_first: int = 100, *,
                                      pred_fn: Callable[..., Any] | None = None
                                      ) -> dict[str, dict[str, Any]]:
        """Whole-model forward time in ms (no hooks installed), the first ``drop_first`` of
        ``num_iters`` iterations dropped; only the ``"__root__"`` entry."""
        return self._timed(total_inference_time_dict, "estimate_total_inference_time", module,
                           input, eval, num_iters, drop_first, pred_fn)

    def _timed(self, timer: Callable[..., dict[str, dict[str, Any]]], name: str,
               module: nn.Module, input: Any, eval: bool, num_iters: int, drop_first: int,
               pred_fn: Callable[..., Any] | None) -> dict[str, dict[str, Any]]:
        """One of the two timing passes (``name``, for the log): ``timer`` run with errors
        naming the module whose forward failed."""
        pred_fn = legacy_pred_fn(input, pred_fn, module)
        self._log(f"Estimating {name.removeprefix('estimate_').replace('_', ' ')} of "
                  f"{type(module).__name__}")
        check_pass(module, pred_fn=pred_fn, eval=eval)
        with located_errors(module):
            return timer(module, input, eval=eval, num_iters=num_iters, drop_first=drop_first,
                         pred_fn=pred_fn)

    def estimate_total_inference_time_df(self, *args: Any, aggr: bool = False,
                                         **kwargs: Any) -> pd.DataFrame:
        """:meth:`estimate_total_inference_time` as a DataFrame (note: ``aggr`` defaults to
        False here, as in 0.0.4)."""
        check_bool(aggr, "aggr")
        return _timing_frame(self.estimate_total_inference_time(*args, **kwargs), aggr)

    (estimate_total_inference_time_csv, estimate_total_inference_time_html,
     estimate_total_inference_time_latex) = _writers(
        "estimate_total_inference_time",
        latex_note="(0.0.4 returned the per-layer table here by mistake)")


def _holding_unreadable(facts: Sequence[ModuleFacts]) -> set[str]:
    """Paths of the modules holding, themselves or below, weights packed in an object that
    cannot be read (:attr:`ModuleFacts.unreadable`)."""
    holding = subtree_totals([True if fact.unreadable else None for fact in facts],
                             [None if fact.parent < 0 else fact.parent for fact in facts], max)
    return {fact.path for fact, held in zip(facts, holding) if held}


def _warn_lower_bounds(profile: ProfileData, result: Mapping[str, Mapping[str, Any]]) -> None:
    """Warn (:class:`~moduleprofiler.warn.LowerBoundWarning`) naming the modules whose
    ``ops`` or ``inclusive_ops`` in :meth:`ModuleProfiler.estimate_ops`'s dict are lower
    bounds (work without a formula in them): 0.0.4's dict and columns have no place to say
    so, and a new key would change them. Unknown values are ``None`` there already."""
    records = profile.records
    uncounted = [None if r.ops_source in COUNTED_SOURCES else True for r in records]
    # such a call, and every call it ran inside
    holding = subtree_totals(uncounted, [r.parent for r in records], max)
    own = set(profile.unsupported)
    inside = {record.path for record, held in zip(records, holding) if held}
    names = {module_name(info.path): info.path for info in profile.modules}
    parts = [f"{key} of {bounded}" for key, paths in (("ops", own), ("inclusive_ops", inside))
             if (bounded := [name for name, path in names.items()
                             if path in paths and result[name][key] is not None])]
    if parts:
        warn(f"estimate_ops: {' and '.join(parts)} are lower bounds: "
             f"{without_formula(profile)}", LowerBoundWarning)


def _timing_frame(result: dict[str, dict[str, Any]], aggr: bool) -> pd.DataFrame:
    frame = dict_to_frame(result)
    if aggr:
        return frame.drop(columns=["inference_time_ms"])
    frame = frame.drop(columns=[c for c in TIME_STATS if c in frame.columns])
    return frame.explode("inference_time_ms").reset_index(drop=True)
