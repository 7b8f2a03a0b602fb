"""``DistributedProfile``: every rank's :class:`~moduleprofiler.Profile` of one pass, and the
views across ranks (per-rank frame, per-module spread, stragglers, totals)."""

from __future__ import annotations

import dataclasses
import html
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, Any, ClassVar, Literal

import pandas as pd

from moduleprofiler.count_dtype import count_dtype
from moduleprofiler.export.columns import ColumnSpec, column_spec, register_column
from moduleprofiler.export.frame import count_series
from moduleprofiler.export.io import Buffer, PathLike, emit
from moduleprofiler.export.json_io import profile_document, profile_from_document, read_json_text
from moduleprofiler.export.profile import Profile
from moduleprofiler.export.renamed import RenamedKeysDict, renamed_columns
from moduleprofiler.export.values import exact_sum, plain
from moduleprofiler.records import ModuleInfo, display_path

DOCUMENT = "moduleprofiler.distributed_profile"
STATISTICS = ("min", "median", "max", "sum")
"""What :meth:`DistributedProfile.module_stats` gives for every numeric column, with ``skew``
(``max / median``: 1.0 when the ranks are balanced)."""
_TIME_COLUMNS = ("time_median_ms", "device_ms", "forward_ms", "comm_ms",
                 "backward_time_median_ms", "backward_device_ms")
"""The time a straggler search ranks by when none is named: the first the profiles have (the
kernel clock's ``device_ms`` on CUDA)."""
_KEYS = ("module", "type", "depth")

ACROSS_RANKS: dict[str, str] = {
    "min": "the smallest value of the column across the ranks holding the module "
           "(module_stats())",
    "median": "the median across those ranks (module_stats(); stragglers(), of its by= "
              "column)",
    "max": "the largest across those ranks (module_stats())",
    "sum": "the sum over those ranks: the group's (module_stats())",
    "skew": "max over median across the ranks, 1.0 when balanced; None where the median is 0 "
            "(module_stats())",
    "excess": "a rank's value above the module's median across the ranks (stragglers())",
    "ratio": "a rank's value over the module's median across the ranks (stragglers())",
}
"""The suffixes of the columns :meth:`DistributedProfile.module_stats` and
:meth:`~DistributedProfile.stragglers` derive from a column (``macs_median``,
``time_median_ms_excess``), with their meaning (docs/glossary.md lists them)."""


TOTALS = ("total_params", "total_buffers", "total_ops", "total_macs", "total_flops",
          "total_backward_ops", "total_backward_macs")
"""The totals of :class:`~moduleprofiler.Profile` that :class:`DistributedProfile` has too."""

Rule = Literal["work", "model", "exact"]

_MODULE_FACTS = tuple(field.name for field in dataclasses.fields(ModuleInfo)
                      if field.name != "path")
"""The fields of a :class:`~moduleprofiler.records.ModuleInfo` a rank's may differ in."""


class _OverRanks:
    """One of :class:`~moduleprofiler.Profile`'s totals or flags, taken over the ranks:

    * ``work`` (ops, MACs, FLOPs, backward): summed, the work the whole group did; ``None``
      (unknown) where a rank has none (no backward profiled);
    * ``model`` (parameters, buffers): the model's count, which every rank of a DDP, FSDP2 or
      tensor-parallel group reports alike (a ``DTensor`` counts at its global size); ``None``
      where the ranks differ (each holds a different model, as pipeline stages do), since a
      sum would count every replica once per rank;
    * ``exact`` (``complete`` and its parts): true only where true on every rank; ``None``
      where no rank profiled a backward.
    """

    def __init__(self, name: str, rule: Rule) -> None:
        self.name, self.rule = name, rule
        self.__doc__ = {"work": f"``Profile.{name}`` summed over the ranks.",
                        "model": f"``Profile.{name}`` of the model, the same on every rank "
                                 "(``None`` where the ranks differ).",
                        "exact": f"``Profile.{name}`` on every rank."}[rule]

    def __get__(self, instance: DistributedProfile | None, owner: type) -> Any:
        if instance is None:
            return self
        values = [getattr(profile, self.name) for profile in instance.profiles]
        if any(value is None for value in values):
            return None
        if self.rule == "work":
            return sum(values)
        if self.rule == "model":
            return values[0] if len(set(values)) == 1 else None
        return all(values)


@dataclass(frozen=True)
class DistributedProfile:
    """The profiles of one pass on every rank of a process group, indexed by group rank."""

    columns: ClassVar[tuple[ColumnSpec, ...]] = (
        register_column("rank", "int", "rank", aggregation="none",
                        description="a process's rank in the default process group "
                        "(DistributedProfile.to_df(): one row per rank and module)"),
        register_column("world_size", "int", "ranks", aggregation="none",
                        description="the ranks whose profiles were gathered "
                        "(DistributedProfile.summary())"))
    """The columns of :meth:`to_df` and :meth:`summary` that are no profile's (the others
    are each rank's module frame's and summary's), declared with the result that writes
    them."""

    profiles: tuple[Profile, ...]
    __hash__ = None  # type: ignore[assignment]  # equal by value, as a profile: no hash

    def __post_init__(self) -> None:
        if not self.profiles or not all(isinstance(p, Profile) for p in self.profiles):
            raise TypeError("DistributedProfile needs one Profile per rank")

    @property
    def world_size(self) -> int:
        """The number of ranks gathered."""
        return len(self.profiles)

    # -- totals: Profile's names, over the ranks (one rule each, in _OverRanks) --------------
    total_ops = _OverRanks("total_ops", "work")
    total_macs = _OverRanks("total_macs", "work")
    total_flops = _OverRanks("total_flops", "work")
    total_backward_ops = _OverRanks("total_backward_ops", "work")
    total_backward_macs = _OverRanks("total_backward_macs", "work")
    total_params = _OverRanks("total_params", "model")
    total_buffers = _OverRanks("total_buffers", "model")
    ops_complete = _OverRanks("ops_complete", "exact")
    macs_complete = _OverRanks("macs_complete", "exact")
    backward_complete = _OverRanks("backward_complete", "exact")
    complete = _OverRanks("complete", "exact")

    @property
    def lower_bounds(self) -> tuple[str, ...]:
        """The totals that are lower bounds on some rank (``Profile.lower_bounds`` of every
        rank, each name once)."""
        return tuple(dict.fromkeys(name for profile in self.profiles
                                   for name in profile.lower_bounds))

    def totals(self) -> dict[str, int | float | None]:
        """Every total (:data:`TOTALS`: the attribute ``total_macs`` under the key ``macs``,
        as a profile's ``summary()`` and ``to_dict()["totals"]`` name it) and the
        communication columns summed over the ranks and modules. The keys ``total_macs``...
        still read their value, with a ``DeprecationWarning``, until 0.3.0."""
        totals: dict[str, int | float | None] = {
            name.removeprefix("total_"): getattr(self, name) for name in TOTALS}
        frame = self.to_df()
        # own shares summed over every call: the whole model's value (self_comm_bytes: the
        # model's comm_bytes)
        for column in ("self_comm_bytes", "self_comm_bus_bytes", "self_collectives",
                       "self_comm_ms", "self_backward_comm_bytes",
                       "self_backward_comm_bus_bytes", "self_backward_collectives",
                       "self_backward_comm_ms"):
            if column in frame:
                totals[column.removeprefix("self_")] = exact_sum(frame[column])
        return RenamedKeysDict(totals, {name: name.removeprefix("total_") for name in TOTALS},
                               "DistributedProfile.totals()")

    def summary(self) -> pd.DataFrame:
        """One row for the whole group, with the columns of every result's ``summary()``
        (:meth:`Profile.summary`) and ``world_size`` after ``model``: the model's numbers where
        every rank reports the same (``params``, ``trainable_params`` and their bytes, which
        are the bytes each rank holds: a tensor-parallel rank's shards; ``<NA>`` where the
        ranks hold different parts, as pipeline stages do: a sum would count each replica
        once per rank), the work summed over the ranks (``macs``, ``flops``; ``<NA>``
        where a rank counted none) and ``complete`` on every rank. ``latency_ms`` and
        ``throughput`` are NaN: each rank's is in its own profile's ``summary()``, and none
        of them is the group's."""
        rows = [profile.summary() for profile in self.profiles]
        frame = rows[0].copy()
        for column in ("params", "trainable_params", "param_bytes", "buffer_bytes",
                       "model_size_bytes"):
            values = [row[column].iloc[0] for row in rows]
            if any(pd.isna(value) for value in values) or len(set(values)) > 1:
                frame[column] = pd.Series([None], dtype=frame[column].dtype)
        for column in ("macs", "flops"):  # summed exactly (Int64 would wrap past 2**63)
            frame[column] = count_series([getattr(self, f"total_{column}")], column)
        frame["complete"] = all(bool(row["complete"].iloc[0]) for row in rows)
        frame["latency_ms"] = float("nan")
        frame["throughput"] = float("nan")
        frame.insert(1, "world_size", self.world_size)
        return frame

    def module(self, path: str) -> ModuleInfo:
        """Static information on the module at ``path`` (:meth:`Profile.module`: its
        ``named_modules()`` path, the root ``""`` or ``"__root__"``), the same on every rank
        that holds it: a DDP, FSDP2 or tensor-parallel group's ranks hold the same module (a
        ``DTensor`` counts at its global size), a pipeline's stages each their own.

        Raises:
            KeyError: no rank has a module at that path (the message names the nearest).
            TypeError: ``path`` is not a string.
            ValueError: the ranks holding it report different facts (each holds another
                part of it): the message names the ranks and the fields that differ; read
                one rank's with ``profiles[rank].module(path)``.
        """
        found: dict[int, ModuleInfo] = {}
        missing: KeyError | None = None
        for rank, profile in enumerate(self.profiles):
            try:
                found[rank] = profile.module(path)
            except KeyError as error:
                missing = error
        if not found:
            assert missing is not None
            raise KeyError(f"no module {path!r} on any of the {self.world_size} ranks "
                           f"({missing.args[0]})") from None
        first_rank, first = next(iter(found.items()))
        differ = {rank: [name for name in _MODULE_FACTS
                         if getattr(info, name) != getattr(first, name)]
                  for rank, info in found.items() if info != first}
        if differ:
            fields = sorted({name for names in differ.values() for name in names})
            raise ValueError(
                f"module {display_path(path)!r} differs across the ranks (rank {first_rank} and "
                f"rank{'s' if len(differ) > 1 else ''} {', '.join(map(str, differ))} report "
                f"other {', '.join(fields)}): each holds another part of it; read one rank's "
                "with profiles[rank].module(path)")
        return first

    def to_df(self) -> pd.DataFrame:
        """One row per rank and module (each rank's ``Profile.to_df("module")``), with a
        ``rank`` column first."""
        frames = []
        for rank, profile in enumerate(self.profiles):
            frame = profile.to_df("module")
            frame.insert(0, "rank", rank)
            frames.append(frame)
        return pd.concat(frames, ignore_index=True)

    def module_stats(self, columns: Sequence[str] | None = None) -> pd.DataFrame:
        """One row per module: ``<column>_min``, ``_median``, ``_max``, ``_sum`` across ranks
        and ``<column>_skew`` (``max / median``; ``None`` where the median is 0) for every
        numeric column (or those named in ``columns``). Ranks without the module count as
        missing, not as 0."""
        frame = self.to_df()
        if columns is None:
            columns = [name for name in frame.columns if name not in ("rank", *_KEYS)
                       and column_spec(name, frame[name].dtype).numeric
                       and frame[name].dtype != bool]
        else:
            unknown = [name for name in columns if name not in frame]
            if unknown:
                raise KeyError(f"module_stats: no column {unknown}; the profiles have "
                               f"{list(frame.columns)}")
        grouped = frame.groupby("module", sort=False)
        parts = [grouped[list(_KEYS[1:])].first()]
        for name in columns:
            values = pd.to_numeric(frame[name], errors="coerce").astype("float64")
            stats = values.groupby(frame["module"], sort=False).agg(list(STATISTICS))
            stats.columns = [f"{name}_{statistic}" for statistic in STATISTICS]
            median = stats[f"{name}_median"]
            stats[f"{name}_skew"] = stats[f"{name}_max"] / median.where(median != 0)
            if pd.api.types.is_integer_dtype(frame[name].dtype):
                _keep_integers(stats)
            parts.append(stats)
        return pd.concat(parts, axis=1).reset_index()

    def stragglers(self, k: int = 5, by: str | None = None) -> pd.DataFrame:
        """The ``k`` (module, rank) pairs whose ``by`` (default: the first time column the
        profiles have: ``time_median_ms``, ``forward_ms``, ``comm_ms``) is furthest above that
        module's median across ranks: ``module``, ``rank``, the value, ``<by>_median`` (as
        :meth:`module_stats` names it), ``<by>_excess`` (value minus median) and
        ``<by>_ratio`` (value / median). The names before 0.2, ``median``, ``excess`` and
        ``ratio``, still select their column with a ``DeprecationWarning`` until 0.3.0."""
        frame = self.to_df()
        if by is None:
            by = next((name for name in _TIME_COLUMNS if name in frame), None)
            if by is None:
                raise ValueError("stragglers: the profiles have no time column; attach timing "
                                 "(Profile.with_timing) or profile with "
                                 "CommunicationListener(timing=True), or name one with by=")
        elif by not in frame:
            raise KeyError(f"stragglers: no column {by!r} in the profiles")
        values = pd.to_numeric(frame[by], errors="coerce").astype("float64")
        median = values.groupby(frame["module"]).transform("median")
        excess = values - median
        table = pd.DataFrame({"module": frame["module"], "rank": frame["rank"], by: values,
                              f"{by}_median": median, f"{by}_excess": excess,
                              f"{by}_ratio": values / median.where(median != 0)})
        table = table[excess > 0].sort_values(f"{by}_excess", ascending=False)
        # named as module_stats() names the same median (median, excess and ratio until 0.2)
        return renamed_columns(table.head(k).reset_index(drop=True),
                               {name: f"{by}_{name}" for name in ("median", "excess", "ratio")},
                               "DistributedProfile.stragglers()")

    # -- files -----------------------------------------------------------------------------
    def to_csv(self, buf: Buffer = None) -> str | None:
        """:meth:`to_df` (one row per rank and module) as CSV."""
        return emit(self.to_df().to_csv(index=False), buf)

    def to_json(self, buf: Buffer = None) -> str | None:
        """Every rank's profile document (:meth:`Profile.to_json`) in one JSON document that
        :meth:`from_json` reads back."""
        document = {"document": DOCUMENT, "world_size": self.world_size,
                    "profiles": [profile_document(profile) for profile in self.profiles]}
        return emit(json.dumps(document, allow_nan=False) + "\n", buf)

    @classmethod
    def from_json(cls, source: str | PathLike | IO[str]) -> DistributedProfile:
        """The distributed profile saved by :meth:`to_json` (a path, a file object or the
        JSON text)."""
        document = json.loads(read_json_text(source))
        if document.get("document") != DOCUMENT:
            raise ValueError(f"not a moduleprofiler distributed profile (expected "
                             f"\"document\": \"{DOCUMENT}\")")
        return cls(tuple(profile_from_document(item, Profile)
                         for item in document["profiles"]))

    def to_html(self, buf: Buffer = None, *, title: str | None = None) -> str | None:
        """A self-contained HTML report: totals, the per-module spread across ranks, the
        stragglers (when the profiles have times) and the per-rank table."""
        heading = html.escape(title or f"moduleprofiler: {self.world_size} ranks")
        sections = [("totals over ranks", pd.DataFrame([self.totals()])),
                    ("per module across ranks", self.module_stats())]
        try:
            sections.append(("stragglers", self.stragglers()))
        except ValueError:
            pass
        sections.append(("per rank", self.to_df()))
        body = "".join(f"<h2>{html.escape(name)}</h2>\n{_table(frame)}\n"
                       for name, frame in sections)
        text = (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{heading}</title>"
                f"</head>\n<body>\n<h1>{heading}</h1>\n{body}</body></html>\n")
        return emit(text, buf)

    def __repr__(self) -> str:
        return (f"DistributedProfile(world_size={self.world_size}, "
                f"total_macs={self.total_macs}, total_ops={self.total_ops})")


def _keep_integers(stats: pd.DataFrame) -> None:
    """Show the statistics of an integer column as integers (nullable ``Int64``, Python
    integers past 64 bits: :func:`count_dtype`): min, max and sum always are; the median
    where every value is whole (of two ranks it is a mean)."""
    for column in stats.columns[:len(STATISTICS)]:
        values = stats[column]
        known = values.dropna()
        if (known == known.round()).all():
            whole = [None if value is None else int(value) for value in plain(values)]
            stats[column] = pd.Series(whole, index=values.index, dtype=count_dtype(whole))


def _table(frame: pd.DataFrame) -> Any:
    return frame.style.hide(axis="index").format(precision=3, na_rep="").to_html()
