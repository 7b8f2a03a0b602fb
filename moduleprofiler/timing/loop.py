"""The one measurement loop of every repeated-run pass: ``time_modules``, ``train_step_times``,
``benchmark``, the hooks' calibration and generation timing.

A pass is configuration (:class:`TimingOptions`) plus its own step: it hands :func:`measure`
one :class:`Block` per kind of iteration (hooked, hook-free, traced...; each runs ``count``
iterations of the pass's step) and the series its stopping rule watches. The loop does the
rest, the same way for all:

1. pins the intra-op threads and pauses the garbage collector (both restored), enters the
   pass's own state contexts and captures the environment;
2. ``prime`` once (a profiler session's start: seconds, never kept);
3. warm-up: one iteration of every warm block in turn, until ``warmup_iters`` rounds and
   ``warmup_seconds`` have passed;
4. ``drop_first`` iterations of each dropped block, discarded;
5. rounds until the stopping rule says enough, the blocks' order rotated from round to round
   so that their times are compared under the same conditions (load, allocator, clocks),
   with minor page faults counted over them; a run its rule ended on the target then runs
   each block with an own minimum (:attr:`Block.least`) up to it; ``finish`` once, still
   inside the state;
6. the notes the conditions call for: load and noisy samples (one note), page faults, a
   budget that ended the run before its target.

The time budget (``max_seconds``) is the wall time of the whole call: it starts when the pass
makes its plan (:meth:`TimingOptions.plan`, first thing in the call), so the hooks'
calibration, the clock's set-up and the profiler's start count against it; the warm-up and
the dropped iterations together take at most :data:`WARMUP_SHARE` of what is left when the
loop starts, and the rounds the rest. At least one iteration of each kind warms up and one
round is kept whatever the budget; apart from those, the call ends within its budget plus
one iteration of a round (when iteration times are steady: a round planned at one rate and
run at a slower one overruns by the difference), plus the iterations that bring a kind up to
its own minimum when the target is met first (:attr:`Block.least`: a few traced ones), plus
building the result.
:class:`BudgetUse` says where the time went.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import math
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any, cast

import numpy as np
import torch
from numpy.typing import ArrayLike

from moduleprofiler.progress import Progress
from moduleprofiler.runner import pass_scope
from moduleprofiler.timing.environment import (
    capture_environment,
    environment_warnings,
    minor_faults,
    timing_context,
)
from moduleprofiler.timing.ranks import RankAgreement
from moduleprofiler.timing.stats import StoppingRule, StopReason, ci_halfwidth, summarize
from moduleprofiler.validate import check_bounded, check_int

ROUND_SHARE = 0.05
"""An adaptive run's rounds grow to about this share of its time budget (20 rounds in it):
the block order rotates often, and the budget is overrun by at most one round."""
UNBUDGETED_ROUND_S = 0.5
"""Length an adaptive round grows to when the run has no time budget."""
ADAPTIVE_DROP_FIRST = 2
"""Hooked iterations an adaptive run (``num_iters=None``) drops after its time-based warm-up
(a fixed count keeps 0.0.4's default of 20)."""
WARMUP_SHARE = 0.25
"""Most of the budget left when the loop starts that its warm-up and dropped iterations may
take together (each runs at least once when asked for): a slow model's ``warmup_iters`` or a
``warmup_seconds`` near the budget would otherwise leave the rounds nothing."""
SPREAD_LIMIT = 0.10
"""IQR / median above which samples are called noisy (``torch.utils.benchmark``'s limit)."""


def validate_iterations(num_iters: int | None, drop_first: int) -> None:
    """``num_iters >= 1`` (or ``None``: adaptive) and ``0 <= drop_first < num_iters``: a
    ``TypeError`` naming the argument for what is no int (``3.0``, ``True``), else a
    ``ValueError``."""
    check_int(num_iters, "num_iters", 1)
    check_int(drop_first, "drop_first", 0, optional=False)
    if num_iters is not None and drop_first >= num_iters:
        raise ValueError(
            f"drop_first must be an int with 0 <= drop_first < num_iters ({num_iters}), "
            f"got {drop_first!r}: at least one timed iteration must be kept"
        )


@dataclass(frozen=True)
class Plan:
    """How many iterations a run keeps and what stops it."""

    drop_first: int
    kept: int | None
    """Kept iterations of a fixed count (``None``: adaptive)."""
    rule: StoppingRule
    sizes: list[int] | None
    """Iterations per round of a fixed count (``None``: rounds sized by time)."""
    max_round: int | None = None
    """Most iterations in one round (1: the rule is asked after every sample)."""


@dataclass(frozen=True, kw_only=True)
class TimingOptions:
    """The timing keywords of every repeated-run pass, as one object (``time_modules``,
    ``train_step_times``, ``benchmark``): pass ``options=`` to share them between calls; a
    keyword given to the call as well (not at its default) wins.

    The defaults are :func:`~moduleprofiler.timing.time_modules`'s; each pass's own
    documentation says what a keyword means there."""

    num_iters: int | None = None
    """``None``: adaptive (rounds until ``target_ci`` or ``max_seconds``); an int: a fixed
    count, ``drop_first`` of it discarded (0.0.4's meaning)."""
    drop_first: int | None = None
    """First iterations to discard (``None``: the pass's default, or half of a fixed
    ``num_iters`` that is not above that default)."""
    warmup_seconds: float = 0.5
    warmup_iters: int = 0
    target_ci: float | None = 0.01
    max_seconds: float | None = 5.0
    min_iters: int = 10
    rounds: int | None = None
    measure_overhead: bool = True
    overhead_fraction: float = 1.0
    num_threads: int | None = None
    confidence: float = 0.95
    progress: bool | None = None

    def __post_init__(self) -> None:
        # each keyword's type, checked where the options are made (their ranges are checked
        # by :meth:`plan`, which knows the pass): a string count would otherwise fail deep
        # in the plan as an unnamed comparison error
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            allowed = _FIELD_TYPES[field.name]
            if value is None and "None" in str(field.type):
                continue
            if (isinstance(value, bool) and bool not in allowed) or not isinstance(value, allowed):
                names = " or ".join(_KIND_NAMES.get(kind, kind.__name__) for kind in allowed)
                optional = " or None" if "None" in str(field.type) else ""
                raise TypeError(f"TimingOptions.{field.name} must be {names}{optional}, got "
                                f"{type(value).__name__} {value!r}")
            if allowed == (Integral,) and type(value) is not int:  # a numpy int: plain
                object.__setattr__(self, field.name, int(cast(Any, value)))
            elif allowed == (Real,) and type(value) not in (int, float):
                object.__setattr__(self, field.name, float(cast(Any, value)))
        self._check_ranges()

    def _check_ranges(self) -> None:
        """Each keyword's range that holds for every pass (``drop_first`` against
        ``num_iters`` is checked by :meth:`plan`): a negative warm-up or a confidence of 1.5
        would otherwise run the model before failing, or be taken without a word."""
        counts = {"num_iters": 1, "drop_first": 0, "warmup_iters": 0, "min_iters": 1,
                  "rounds": 1, "num_threads": 1}
        for name, minimum in counts.items():
            check_int(getattr(self, name), f"TimingOptions.{name}", minimum)
        check_bounded(self.warmup_seconds, "TimingOptions.warmup_seconds", minimum=0)
        check_bounded(self.overhead_fraction, "TimingOptions.overhead_fraction", minimum=0)
        check_bounded(self.confidence, "TimingOptions.confidence", above=0, below=1)
        for name in ("target_ci", "max_seconds"):  # infinite: no target, no budget
            if getattr(self, name) is not None:
                check_bounded(getattr(self, name), f"TimingOptions.{name}", above=0,
                              finite=False)

    @classmethod
    def of_call(cls, function: Callable[..., Any], arguments: Mapping[str, Any],
                options: TimingOptions | None) -> TimingOptions:
        """The options of a call of ``function`` (its ``arguments``, e.g. ``locals()``):
        ``options`` where given, overridden by every keyword not at ``function``'s default."""
        names = [field.name for field in dataclasses.fields(cls)]
        given = {name: arguments[name] for name in names if name in arguments}
        if options is None:
            return cls(**given)
        if not isinstance(options, TimingOptions):
            raise TypeError(f"options must be a TimingOptions (or None), got "
                            f"{type(options).__name__} {options!r}: pass "
                            "TimingOptions(num_iters=..., max_seconds=...)")
        defaults = inspect.signature(function).parameters
        return dataclasses.replace(options, **{
            name: value for name, value in given.items()
            if value is not defaults[name].default and value != defaults[name].default})

    @property
    def plain_fraction(self) -> float:
        """Hook-free iterations per round as a share of the hooked ones (0: none)."""
        return self.overhead_fraction if self.measure_overhead else 0.0

    def plan(self, fixed_drop_first: int, fixed_rounds: int = 1, *,
             adaptive_drop_first: int = ADAPTIVE_DROP_FIRST, capped: bool = False) -> Plan:
        """The :class:`Plan` of these options, validated (``ValueError`` naming the keyword).

        A fixed ``num_iters`` runs exactly that many iterations in ``rounds`` rounds
        (default ``fixed_rounds``), ``target_ci`` and ``max_seconds`` unused; with
        ``capped`` (``benchmark``) it is a cap beside them, and the rule is asked after
        every sample.

        The time budget starts here (the rule's clock): a pass makes its plan first thing,
        so that the budget is the wall time of the whole call."""
        drop_first = self.drop_first
        if drop_first is None:
            drop_first = adaptive_drop_first if self.num_iters is None else (
                # a count below the default drop keeps its second half rather than refusing a
                # drop the caller never asked for
                fixed_drop_first if fixed_drop_first < self.num_iters else self.num_iters // 2)
        validate_iterations(self.num_iters, drop_first)
        kept = None if self.num_iters is None else self.num_iters - drop_first
        if capped:
            return Plan(drop_first, kept, StoppingRule(
                count=kept, target_ci=self.target_ci, max_seconds=self.max_seconds,
                min_samples=self.min_iters, confidence=self.confidence), None, max_round=1)
        if self.rounds is not None and kept is None:
            raise ValueError("rounds splits a fixed num_iters; an adaptive run (num_iters=None) "
                             f"sizes its rounds by time, got rounds={self.rounds!r}")
        if kept is None:
            return Plan(drop_first, None, StoppingRule(
                target_ci=self.target_ci, max_seconds=self.max_seconds,
                min_samples=self.min_iters, confidence=self.confidence), None)
        return Plan(drop_first, kept, StoppingRule(count=kept),
                    split_rounds(kept, self.rounds, fixed_rounds))


_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "num_iters": (Integral,), "drop_first": (Integral,), "warmup_seconds": (Real,),
    "warmup_iters": (Integral,), "target_ci": (Real,), "max_seconds": (Real,),
    "min_iters": (Integral,), "rounds": (Integral,), "measure_overhead": (bool,),
    "overhead_fraction": (Real,), "num_threads": (Integral,), "confidence": (Real,),
    "progress": (bool,),
}
"""The types each :class:`TimingOptions` keyword takes (``bool`` is not taken for a number)."""

_KIND_NAMES = {Integral: "an int", Real: "a number", bool: "True or False"}


@dataclass(frozen=True)
class Block:
    """One kind of iteration: ``run(count, keep)`` runs ``count`` iterations of the pass's
    step (keeping their samples when ``keep``)."""

    run: Callable[[int, bool], None]
    share: Callable[[int], int] = lambda count: count
    """Iterations of this kind in a round of ``n`` (0: none)."""
    warm: bool = True
    """Runs in the warm-up."""
    dropped: bool = False
    """Runs the ``drop_first`` discarded iterations."""
    calls: int = 1
    """Model calls per iteration (page faults are counted per call)."""
    least: Callable[[int], int] | None = None
    """Its own minimum: the fewest kept iterations of this kind that a run whose stopping
    rule trusts ``min_iters`` samples needs (``None``: none). A run the rule ends on its
    target runs the kind up to it; a budget may end it short (:attr:`BudgetUse.min_traced`)."""


@dataclass(frozen=True)
class BudgetUse:
    """How a run's wall time went, phase by phase, from the start of the call (when its plan
    was made) to the end of the loop; a result keeps it as ``budget``."""

    max_seconds: float | None
    """The budget (``None``: none)."""
    setup_s: float
    """Before the loop: the hooks' calibration, the clock's choice, the environment, the
    profiler's start."""
    warmup_s: float
    """Warm-up and dropped iterations (nothing kept)."""
    rounds_s: float
    """The interleaved rounds: every kind's kept iterations (hook-free and traced too)."""
    finish_s: float
    """After the rounds, inside the loop (a hook-free trace under the kernel clock)."""
    kept: int
    """Kept samples (of the shortest watched series)."""
    min_kept: int
    """Fewest kept samples the stopping rule trusts (``min_iters``)."""
    warmup_cut: bool
    """The budget ended the warm-up or the dropped iterations before their own targets."""
    cut_short: bool
    """The budget ended the rounds with fewer than ``min_kept`` samples."""
    min_traced: int = 0
    """Fewest kept iterations of a block with an own minimum (:attr:`Block.least` of
    ``min_kept``: a device clock's traced ones); 0: no block has one."""

    @property
    def total_s(self) -> float:
        """Wall time of the call up to the end of the loop (the result is built after)."""
        return self.setup_s + self.warmup_s + self.rounds_s + self.finish_s

    @property
    def low_confidence(self) -> bool:
        """Too few samples to trust: the budget cut the run short (:attr:`cut_short`)."""
        return self.cut_short

    def to_dict(self) -> dict[str, Any]:
        """The fields, :attr:`total_s` and :attr:`low_confidence`, as plain Python."""
        return {**dataclasses.asdict(self), "total_s": self.total_s,
                "low_confidence": self.low_confidence}

    def note(self) -> str | None:
        """The warning when the budget cut the rounds short, else ``None``."""
        if not self.cut_short:
            return None
        return (f"the time budget ({self.max_seconds:g} s) ended the run after {self.kept} "
                f"kept sample{'s' if self.kept != 1 else ''}, fewer than min_iters "
                f"({self.min_kept}): low confidence (set-up took {self.setup_s:.2f} s, "
                f"warm-up {self.warmup_s:.2f} s); raise max_seconds")


@dataclass(frozen=True)
class LoopRun:
    """What the loop saw besides the pass's own samples."""

    environment: dict[str, Any]
    """:func:`~moduleprofiler.timing.environment.capture_environment`, with
    ``minor_faults_per_iter`` over the rounds."""
    stop_reason: StopReason
    elapsed_s: float
    """Wall time of the timed phase (dropped iterations and every round's blocks)."""
    warmup_iterations: int
    """Warm-up iterations run: ``warmup_iters`` at least, more until ``warmup_seconds``
    passed, fewer where the budget cut the warm-up."""
    warmup_elapsed_s: float
    """Wall time of the warm-up (the dropped iterations not included: they are in
    :attr:`elapsed_s`, and in :attr:`BudgetUse.warmup_s` with it)."""
    notes: list[str]
    dropped: int
    """Iterations of each dropped block discarded: ``drop_first``, or fewer where the budget
    ended them."""
    budget: BudgetUse


def plain_count(hooked: int, plain_fraction: float) -> int:
    """Hook-free iterations beside ``hooked`` instrumented ones: ``plain_fraction`` of them,
    at least one; none for a fraction of 0."""
    return max(1, math.ceil(plain_fraction * hooked)) if plain_fraction > 0 else 0


def split_rounds(kept: int, rounds: int | None, default: int) -> list[int]:
    """Iterations per round: ``kept`` spread over ``min(rounds or default, kept)`` rounds."""
    n_rounds = max(1, min(rounds if rounds is not None else default, kept))
    return [kept // n_rounds + (1 if r < kept % n_rounds else 0) for r in range(n_rounds)]


def run_round(blocks: Sequence[Block], number: int, count: int,
              kept: list[int] | None = None) -> int:
    """Round ``number``: every block's share of ``count`` iterations, the blocks' order
    rotated by ``number``; returns the model calls made (each block's kept iterations added
    to ``kept``, in the blocks' order)."""
    shift = number % len(blocks)
    calls = 0
    for position in [*range(shift, len(blocks)), *range(shift)]:
        block = blocks[position]
        size = block.share(count)
        if size:
            block.run(size, True)
            calls += size * block.calls
            if kept is not None:
                kept[position] += size
    return calls


def top_up(blocks: Sequence[Block], kept: list[int], min_iters: int) -> int:
    """Run each block with an own minimum (:attr:`Block.least` of ``min_iters``) up to it
    from its ``kept`` count; returns the model calls made."""
    calls = 0
    for position, block in enumerate(blocks):
        short = (block.least(min_iters) if block.least is not None else 0) - kept[position]
        if short > 0:
            block.run(short, True)
            kept[position] += short
            calls += short * block.calls
    return calls


def run_rounds(round_of: Callable[[int, int], None], rule: StoppingRule,
               samples: Callable[[], Sequence[Sequence[float]]],
               sizes: Sequence[int] | None = None, max_round: int | None = None,
               ranks: RankAgreement | None = None) -> StopReason:
    """Run rounds until done; round ``r`` is ``round_of(r, n)`` with ``n`` iterations.

    With ``sizes`` (a fixed count, from :func:`split_rounds`) exactly those rounds run:
    ``"num_iters"``. Otherwise the run is adaptive: the first round has one iteration; each
    later one is sized from the last round's rate to last about :data:`ROUND_SHARE` of the
    budget (at most twice the previous round, ``max_round`` and what the budget has left, one
    iteration at least); after each round ``rule.check(*samples())`` decides, so the run
    ends within the budget plus one round. With ``ranks`` every rank of the group runs the
    same rounds: they stop when all of them would, each round the smallest size wished."""
    round_s = (ROUND_SHARE * rule.max_seconds if rule.max_seconds is not None
               else UNBUDGETED_ROUND_S)
    size = 1
    number = 0
    while True:
        count = sizes[number] if sizes is not None else size
        began = time.perf_counter()
        round_of(number, count)
        per_iteration = (time.perf_counter() - began) / count
        number += 1
        if sizes is not None:
            if number == len(sizes):
                rule.reason = "num_iters"
                return "num_iters"
            continue
        reason = rule.check(*samples())
        if ranks is not None and ranks.go_on(reason is None):
            reason = rule.reason = None  # another rank goes on: so does this one
        if reason is not None:
            return reason
        wanted = round_s / per_iteration if per_iteration > 0 else math.inf
        left = rule.remaining / per_iteration if per_iteration > 0 else math.inf
        size = int(max(1.0, min(2.0 * count, wanted, left, max_round or math.inf)))
        if ranks is not None:
            size = ranks.fewest(size)


def noisiest(series: Mapping[str, ArrayLike]) -> tuple[str, float] | None:
    """The series whose IQR / median is largest, with that ratio, when it is above
    :data:`SPREAD_LIMIT` (judged from 4 samples on), else ``None``: all noisy series have one
    cause, and the note names the worst."""
    spreads = {name: summary.iqr_rel for name, values in series.items()
               if (summary := summarize(values)) is not None and summary.n >= 4}
    name = max(spreads, key=spreads.__getitem__, default=None)
    return (name, spreads[name]) if name is not None and spreads[name] > SPREAD_LIMIT else None


def measure(plan: Plan, blocks: Sequence[Block],
            watched: Callable[[], Mapping[str, Sequence[float]]], device: torch.device,
            bar: Progress, options: TimingOptions, *,
            state: Sequence[AbstractContextManager[Any]] = (),
            prime: Callable[[], None] | None = None,
            finish: Callable[[], None] | None = None,
            judged: Callable[[], Mapping[str, Sequence[float]]] | None = None,
            ranks: RankAgreement | None = None) -> LoopRun:
    """Run a pass's blocks through warm-up, dropped iterations and rounds (module docstring).

    ``watched`` names the series (nanoseconds per iteration) the stopping rule checks and
    the notes judge, ``judged`` more series the notes judge (hook-free times); ``state``: the
    pass's own contexts (model state, grad mode), entered inside the thread and GC pinning.
    ``ranks``: for a model that communicates in every call, every rank of its group runs the
    same warm-up, dropped iterations and rounds (:mod:`moduleprofiler.timing.ranks`).
    ``bar`` is closed at the end, also on an error. The time budget runs from ``plan``'s
    making (its rule's start), not from this call."""
    rule = plan.rule

    def series() -> tuple[Sequence[float], ...]:
        return tuple(watched().values())

    def round_of(number: int, count: int) -> None:
        calls[0] += run_round(blocks, number, count, kept_by_block)
        bar.update(min(map(len, series()), default=0), plan.kept,
                   rule.progress_text() if plan.sizes is None else "")

    calls = [0]
    kept_by_block = [0] * len(blocks)
    try:
        # a pass of its own: the hooks a watching runner keeps on the model (a
        # TrainingProfiler's window) take no part in its iterations, hook-free ones included
        with pass_scope(), timing_context(options.num_threads), \
                contextlib.ExitStack() as stack:
            for context in state:
                stack.enter_context(context)
            environment = capture_environment(device)
            if prime is not None:
                prime()
            warm_start = time.perf_counter()
            # the warm-up and the dropped iterations share WARMUP_SHARE of what is left; the
            # first of each runs anyway (a kept first call would be a cold one)
            cap = WARMUP_SHARE * max(0.0, rule.remaining)
            warm = 0
            cut = False
            while True:
                elapsed = time.perf_counter() - warm_start
                wanted = warm < options.warmup_iters or elapsed < options.warmup_seconds
                if wanted and warm and elapsed >= cap:
                    cut, wanted = True, False
                if not (wanted if ranks is None else ranks.go_on(wanted)):
                    break
                for block in blocks:
                    if block.warm:
                        block.run(1, False)
                warm += 1
                bar.update(0, plan.kept, "warming up")
            timed_start = time.perf_counter()
            dropped = 0
            while True:
                wanted = dropped < plan.drop_first
                if wanted and (warm or dropped) and time.perf_counter() - warm_start >= cap:
                    cut, wanted = True, False
                if not (wanted if ranks is None else ranks.go_on(wanted)):
                    break
                for block in blocks:  # one of each at a time, so that the cap can cut them
                    if block.dropped:
                        block.run(1, False)
                dropped += 1
            rounds_start = time.perf_counter()
            before = minor_faults()
            reason = run_rounds(round_of, rule, series, plan.sizes, plan.max_round, ranks)
            # enough hooked samples: each kind up to its own minimum
            topped = reason == "target_ci"
            if topped if ranks is None else ranks.go_on(topped):
                calls[0] += top_up(blocks, kept_by_block, options.min_iters)
            after = minor_faults()
            rounds_end = time.perf_counter()
            if finish is not None:
                finish()
            finish_end = time.perf_counter()
    finally:
        bar.close()
    faults = (after - before) / calls[0] if before is not None and after is not None \
        and calls[0] else None
    environment["minor_faults_per_iter"] = faults
    named = {name: np.asarray(values, dtype=np.float64) for name, values in watched().items()}
    kept = min((values.size for values in named.values()), default=0)
    budget = BudgetUse(
        max_seconds=rule.max_seconds, setup_s=warm_start - rule.start,
        warmup_s=rounds_start - warm_start, rounds_s=rounds_end - rounds_start,
        finish_s=finish_end - rounds_end, kept=kept, min_kept=options.min_iters,
        warmup_cut=cut, cut_short=reason == "max_seconds" and kept < options.min_iters,
        min_traced=max((block.least(options.min_iters) for block in blocks
                       if block.least is not None), default=0))
    every = np.concatenate(list(named.values())) if named else np.zeros(0)
    notes = environment_warnings(
        environment, faults, device, float(np.median(every)) / 1e6 if every.size else None,
        noisiest({**named, **(judged() if judged is not None else {})}))
    # one note for the budget: too few samples, else a CI short of its target
    shortfall = budget.note() or rule.shortfall(max(
        (ci_halfwidth(values, options.confidence) for values in named.values()),
        default=math.inf))
    if shortfall is not None:
        notes.append(shortfall)
    return LoopRun(environment, reason, rounds_end - timed_start, warm,
                   timed_start - warm_start, notes, dropped, budget)
