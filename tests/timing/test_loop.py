"""The one measurement loop: its rounds (fixed counts, adaptive sizing by time, the stopping
rule, the rotation of the blocks inside a round), its phases and its options object."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from itertools import pairwise
from types import SimpleNamespace

import pytest
import torch
from torch import nn

from moduleprofiler.progress import Progress
from moduleprofiler.timing import (
    TimingOptions,
    benchmark,
    time_modules,
    train_step_times,
)
from moduleprofiler.timing.clocks import protocol
from moduleprofiler.timing.loop import (
    ADAPTIVE_DROP_FIRST,
    ROUND_SHARE,
    WARMUP_SHARE,
    Block,
    measure,
    run_round,
    run_rounds,
    split_rounds,
)
from moduleprofiler.timing.stats import StoppingRule


class FakeClock:
    """The clock of the loop and the rule (their ``time`` module replaced, not the
    interpreter's): it stands still until a test's rounds advance it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 0.0
        clock = SimpleNamespace(perf_counter=lambda: self.now)
        for where in ("moduleprofiler.timing.loop.time", "moduleprofiler.timing.stats.time"):
            monkeypatch.setattr(where, clock)


class Rounds:
    """Adaptive rounds on a :class:`FakeClock`: iteration ``i`` of round ``r`` takes
    ``seconds(r)``; each round is kept as ``(iterations, start, end)``."""

    def __init__(self, clock: FakeClock, seconds: Callable[[int], float]) -> None:
        self.clock = clock
        self.seconds = seconds
        self.log: list[tuple[int, float, float]] = []

    def __call__(self, number: int, count: int) -> None:
        assert number == len(self.log)
        start = self.clock.now
        self.clock.now += count * self.seconds(number)
        self.log.append((count, start, self.clock.now))

    @property
    def sizes(self) -> list[int]:
        return [count for count, _, _ in self.log]

    def assert_the_loop_promise(self, budget: float) -> None:
        """The sizing rules and the end of :func:`run_rounds`, round by round: the first
        round is one iteration; a later one is at most twice the one before, at most
        ``ROUND_SHARE`` of the budget and at most what the budget has left, both at the
        previous round's rate (one iteration at least); every round but the last ends
        inside the budget and the last one past it: the budget plus one round."""
        assert self.log[0][0] == 1
        for (count, start, end), (later, began, _) in pairwise(self.log):
            rate = (end - start) / count
            assert began == end  # the next round is decided at once
            assert later <= 2 * count
            assert later <= max(1.0, ROUND_SHARE * budget / rate)
            assert later <= max(1.0, (budget - began) / rate)
        assert all(end < budget for _, _, end in self.log[:-1])
        assert self.log[-1][1] < budget <= self.log[-1][2]


def run_out_the_budget(monkeypatch: pytest.MonkeyPatch, seconds: Callable[[int], float]
                       ) -> tuple[Rounds, StoppingRule]:
    """Adaptive rounds on a 1 s budget with no CI target, iteration times ``seconds(round)``:
    the budget ends the run, and the loop's promise holds round by round."""
    rounds = Rounds(FakeClock(monkeypatch), seconds)  # first: the rule starts on its clock
    rule = StoppingRule(target_ci=None, max_seconds=1.0)
    assert run_rounds(rounds, rule, lambda: ([],)) == "max_seconds"
    rounds.assert_the_loop_promise(1.0)
    return rounds, rule


def test_adaptive_rounds_are_sized_by_time_and_end_with_the_budget(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a binary fraction of a second per iteration: the sums stay exact
    rounds, rule = run_out_the_budget(monkeypatch, lambda number: 1 / 64)
    # rounds grow to 5 % of the 1 s budget: 0.05 / (1/64) = 3.2 -> 3 iterations, at most
    # doubling (1, 2, 3); at 63/64 s one iteration is left in the budget, and the run ends
    # at 64/64 s exactly: 1 + 2 + 3 + 19 x 3 + 1 = 64 iterations
    assert rounds.sizes == [1, 2, 3] + [3] * 19 + [1]
    assert rule.elapsed == 1.0


def test_a_slow_round_shrinks_the_next_and_they_double_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # an iteration takes 1/1024 s, but round 7 is 16 times slower (the machine is loaded)
    rounds, rule = run_out_the_budget(monkeypatch,
                                      lambda number: 1 / 64 if number == 7 else 1 / 1024)
    # 5 % of the budget is 0.05 * 1024 = 51.2 -> 51 iterations, reached by doubling:
    # 1, 2, 4, 8, 16, 32 (ends at 63/1024 s), 51 (64 > 51.2; ends at 114/1024 s);
    # round 7 plans 51 more but takes 51 * 16 = 816/1024 s, ending at 930/1024 s;
    # round 8 is sized at that rate: 0.05 * 64 = 3.2 -> 3 (94/1024 s left: 5.9 slow ones);
    # the machine is quick again, so the rounds double back: 6, 12, 24, 48 (ends at
    # 933 + 6 + 12 + 24 + 48 = 1023/1024 s; 48 <= 51.2 and the 49 left);
    # round 13: 1/1024 s left -> 1 iteration (not 96 or 51), ending at 1024/1024 = 1 s
    assert rounds.sizes == [1, 2, 4, 8, 16, 32, 51, 51, 3, 6, 12, 24, 48, 1]
    assert rule.elapsed == 1.0


def test_a_slow_last_round_overruns_the_budget_by_at_most_itself(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # as above, but the slow round is the one the budget runs out in
    rounds, rule = run_out_the_budget(monkeypatch,
                                      lambda number: 1 / 64 if number == 20 else 1 / 1024)
    # 1, 2, 4, 8, 16, 32, then 51s: round 20 starts at (63 + 14 * 51)/1024 = 777/1024 s
    # with 247 iterations of budget left, plans 51 and takes 51 * 16 = 816/1024 s: the run
    # ends at 1593/1024 s = 1.556 s, 0.556 s past the 1 s budget (a fixed overshoot bound
    # cannot hold) but within its last round (0.797 s), and no round runs after it
    assert rounds.sizes == [1, 2, 4, 8, 16, 32] + [51] * 15
    assert rule.elapsed == 1593 / 1024
    assert rule.elapsed - 1.0 <= rounds.log[-1][2] - rounds.log[-1][1]


def test_adaptive_rounds_stop_on_the_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock(monkeypatch)
    rule = StoppingRule(target_ci=0.01, max_seconds=1.0, min_samples=10)
    samples: list[float] = []

    def run_round(number: int, count: int) -> None:
        samples.extend([2.0] * count)  # a steady module: the CI is 0 wide
        clock.now += count / 64

    assert run_rounds(run_round, rule, lambda: (samples,)) == "target_ci"
    # 1, 2, 3, 3, 3 iterations: 12 samples, the first count >= min_iters (10)
    assert len(samples) == 12 and rule.width == 0.0


def test_fixed_rounds_run_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    FakeClock(monkeypatch)
    sizes = split_rounds(8, None, 3)  # 8 kept over 3 rounds: 3, 3, 2
    seen: list[int] = []
    rule = StoppingRule(count=8)
    assert run_rounds(lambda number, count: seen.append(count), rule, lambda: ([],),
                      sizes) == "num_iters"
    assert seen == [3, 3, 2] and rule.reason == "num_iters"


def test_a_round_is_hooked_plain_traced_rotated_by_its_number() -> None:
    order: list[str] = []

    def block(name: str) -> Block:
        return Block(lambda count, keep: order.append(name))

    def round_of(number: int) -> list[str]:
        order.clear()
        run_round([block("hooked"), block("plain"), block("traced")], number, 1)
        return list(order)

    assert round_of(0) == ["hooked", "plain", "traced"]
    assert round_of(1) == ["plain", "traced", "hooked"]
    assert round_of(2) == ["traced", "hooked", "plain"]
    assert round_of(3) == ["hooked", "plain", "traced"]


def test_one_options_object_carries_the_timing_keywords() -> None:
    options = TimingOptions(num_iters=4, drop_first=1, warmup_seconds=0.0, progress=False)
    # 4 iterations, 1 dropped: 3 kept, in every pass that takes the options
    timing = time_modules(nn.Identity(), torch.zeros(1), options=options)
    assert (timing.iterations, timing.dropped, timing.stop_reason) == (3, 1, "num_iters")
    steps = train_step_times(nn.Linear(2, 1), torch.zeros(3, 2), options=options)
    assert (steps.iterations, steps.dropped) == (3, 1)
    latency = benchmark(nn.Identity(), torch.zeros(1), options=options, warmup_iters=0)
    assert (latency.iterations, latency.dropped) == (3, 1)
    # a keyword given as well wins: 6 - 1 = 5 kept
    assert time_modules(nn.Identity(), torch.zeros(1), num_iters=6, options=options
                        ).iterations == 5


def test_options_that_are_not_timing_options_are_refused_by_name() -> None:
    for verb in (time_modules, train_step_times, benchmark):
        with pytest.raises(TypeError, match=r"options must be a TimingOptions \(or None\), "
                                            r"got dict"):
            verb(nn.Linear(2, 1), torch.zeros(3, 2), options={"num_iters": 3})


def test_options_are_validated_where_the_run_is_planned() -> None:
    with pytest.raises(ValueError, match="drop_first"):
        TimingOptions(num_iters=2, drop_first=2).plan(fixed_drop_first=20)
    with pytest.raises(ValueError, match="rounds"):
        TimingOptions(rounds=3).plan(fixed_drop_first=20)
    # a fixed count: its rounds split it (10 kept over 4 rounds: 3, 3, 2, 2), nothing else
    # stops it; adaptive: ADAPTIVE_DROP_FIRST dropped and the rule has the budget
    plan = TimingOptions(num_iters=12, drop_first=2, rounds=4).plan(fixed_drop_first=20)
    assert (plan.kept, plan.sizes, plan.rule.count) == (10, [3, 3, 2, 2], 10)
    plan = TimingOptions().plan(fixed_drop_first=20)
    assert (plan.drop_first, plan.kept, plan.rule.max_seconds) == (ADAPTIVE_DROP_FIRST, None, 5.0)
    # no drop_first given and a count not above the default drop of 20: its first half is
    # dropped (5 // 2 = 2 dropped, 3 kept; 20 // 2 = 10 and 10) instead of an error; 21 keeps 1
    assert (TimingOptions(num_iters=5).plan(fixed_drop_first=20).drop_first,
            TimingOptions(num_iters=5).plan(fixed_drop_first=20).kept) == (2, 3)
    assert TimingOptions(num_iters=20).plan(fixed_drop_first=20).kept == 10
    assert TimingOptions(num_iters=21).plan(fixed_drop_first=20).kept == 1
    # benchmark's capped count: the rule asked after every sample, the budget kept
    plan = TimingOptions(num_iters=5, drop_first=0).plan(0, capped=True)
    assert (plan.max_round, plan.rule.count, plan.rule.max_seconds) == (1, 5, 5.0)


def test_the_loop_warms_drops_and_rotates_its_blocks() -> None:
    runs: list[tuple[str, int, bool]] = []
    kept: list[float] = []

    def block(name: str, **kwargs: object) -> Block:
        def run(count: int, keep: bool) -> None:
            runs.append((name, count, keep))
            if keep and name == "a":
                kept.extend([1.0] * count)
        return Block(run, **kwargs)  # type: ignore[arg-type]

    options = TimingOptions(num_iters=5, drop_first=1, rounds=2, warmup_iters=2,
                            warmup_seconds=0.0, progress=False)
    run = measure(options.plan(0), [block("a", dropped=True), block("b", share=lambda n: 1)],
                  lambda: {"a": kept}, torch.device("cpu"), Progress("test", False), options)
    # warm-up: 2 rounds of one iteration each; 1 dropped of "a"; 4 kept over 2 rounds (2, 2),
    # the second round's order rotated (b first)
    assert runs == [("a", 1, False), ("b", 1, False), ("a", 1, False), ("b", 1, False),
                    ("a", 1, False),
                    ("a", 2, True), ("b", 1, True), ("b", 1, True), ("a", 2, True)]
    assert (run.stop_reason, run.warmup_iterations, len(kept)) == ("num_iters", 2, 4)
    assert "minor_faults_per_iter" in run.environment


def ticking_block(clock: FakeClock, seconds: float, kept: list[float] | None = None) -> Block:
    """A block whose iterations each take ``seconds`` on the fake clock (kept ones append a
    sample to ``kept``)."""
    def run(count: int, keep: bool) -> None:
        clock.now += count * seconds
        if keep and kept is not None:
            kept.extend([1.0] * count)
    return Block(run, dropped=True)


def test_the_budget_is_the_whole_call(monkeypatch: pytest.MonkeyPatch) -> None:
    # warm-up and calibration were outside the budget (benchmark(max_seconds=3)
    # took 9.9 s). The call starts at 0 (the plan is made first), its setup (the hooks'
    # calibration) takes 0.3 s, and it asks for a 2 s warm-up of a 1 s budget
    clock = FakeClock(monkeypatch)
    options = TimingOptions(max_seconds=1.0, target_ci=None, warmup_seconds=2.0,
                            progress=False)
    plan = options.plan(fixed_drop_first=20)
    clock.now += 0.3
    kept: list[float] = []
    run = measure(plan, [ticking_block(clock, 1 / 64, kept)], lambda: {"a": kept},
                  torch.device("cpu"), Progress("test", False), options)
    # the rounds end the call within the budget plus one iteration
    assert run.stop_reason == "max_seconds"
    assert 1.0 <= clock.now <= 1.0 + 1 / 64
    # the warm-up and the dropped iterations got WARMUP_SHARE of the 0.7 s left (plus the
    # iteration that crosses it), not 2 s; the rounds the rest
    spent = run.budget
    assert spent.warmup_cut and spent.setup_s == 0.3
    assert WARMUP_SHARE * 0.7 <= spent.warmup_s <= WARMUP_SHARE * 0.7 + 1 / 64
    # every second of the call is booked to one phase
    assert spent.total_s == pytest.approx(clock.now)
    assert spent.setup_s + spent.warmup_s + spent.rounds_s + spent.finish_s == \
        pytest.approx(spent.total_s)
    assert spent.kept == len(kept) >= options.min_iters and not spent.low_confidence


def test_a_budget_too_short_for_min_iters_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    # 0.1 s an iteration, 0.5 s of a 1 s budget gone before the loop: a handful of samples
    clock = FakeClock(monkeypatch)
    options = TimingOptions(max_seconds=1.0, warmup_seconds=0.0, min_iters=10,
                            progress=False)
    plan = options.plan(fixed_drop_first=20)
    clock.now += 0.5
    kept: list[float] = []
    run = measure(plan, [ticking_block(clock, 0.1, kept)], lambda: {"a": kept},
                  torch.device("cpu"), Progress("test", False), options)
    assert run.stop_reason == "max_seconds"
    assert 1 <= run.budget.kept == len(kept) < 10 and run.budget.low_confidence
    budget_notes = [note for note in run.notes if "budget" in note]
    assert len(budget_notes) == 1  # one note for the one cause
    assert f"{len(kept)} kept" in budget_notes[0] and "min_iters" in budget_notes[0]


class Tick(nn.Module):
    """Each forward takes ``seconds`` on the fake clock."""

    def __init__(self, clock: FakeClock, seconds: float) -> None:
        super().__init__()
        self.clock = clock
        self.seconds = seconds
        self.weight = nn.Parameter(torch.ones(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.clock.now += self.seconds
        return x * self.weight


@pytest.mark.parametrize("kind", ["benchmark", "time_modules", "train_step_times"])
def test_every_pass_ends_within_its_budget(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # the passes with their default warm-ups; the hooks' calibration takes 0.4 s of the 1 s
    clock = FakeClock(monkeypatch)
    calibrate = protocol.calibrate_hooks

    def slow_calibration(*args: object, **kwargs: object) -> object:
        clock.now += 0.4
        return calibrate(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(protocol, "calibrate_hooks", slow_calibration)
    tick = 1 / 64
    model = Tick(clock, tick)
    pass_ = {"benchmark": benchmark, "time_modules": time_modules,
             "train_step_times": train_step_times}[kind]
    result = pass_(model, torch.zeros(1), max_seconds=1.0, progress=False)  # type: ignore[operator]
    # one iteration of a round: the hooked kinds and the hook-free one
    iteration = tick * {"benchmark": 1, "time_modules": 2, "train_step_times": 3}[kind]
    assert result.stop_reason in ("max_seconds", "target_ci")
    assert clock.now <= 1.0 + iteration
    spent = result.budget
    assert spent.total_s == pytest.approx(clock.now)
    if kind != "benchmark":
        assert spent.setup_s >= 0.4


@pytest.mark.filterwarnings("ignore::moduleprofiler.timing.TimingWarning")  # the fake clock
def test_a_latency_names_the_warm_up_it_ran_apart_from_the_one_asked_for(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # the result's warmup_iters and warmup_seconds were the warm-up the run did, under the
    # names of the options that ask for it: benchmark(warmup_iters=2) came back with
    # warmup_iters=5. Iterations of 1/64 s; at least 2 asked for and 4.5/64 s: the warm-up
    # ends after the 5th (5/64 >= 4.5/64), then 2 dropped and 4 kept
    clock = FakeClock(monkeypatch)
    result = benchmark(Tick(clock, 1 / 64), torch.zeros(1), warmup_iters=2,
                       warmup_seconds=4.5 / 64, num_iters=6, drop_first=2, target_ci=None,
                       max_seconds=None, progress=False)
    assert result.warmup_iterations == 5 and result.warmup_elapsed_s == 5 / 64
    # the timed phase: 2 dropped + 4 kept = 6 iterations; the budget's warmup_s is the
    # warm-up and the dropped ones, 5 + 2 = 7 iterations: another number, another name
    assert result.elapsed_s == 6 / 64 and result.iterations == 4
    assert result.budget is not None and result.budget.warmup_s == 7 / 64
    data = result.to_dict()
    assert (data["warmup_iterations"], data["warmup_elapsed_s"]) == (5, 5 / 64)


def test_a_run_that_meets_its_target_tops_a_block_up_to_its_own_minimum(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # hooked iterations of 0.7 s and rounds of about 5 s (ROUND_SHARE of 100 s): rounds of
    # 1, 2, 4, then 7 (not 8: 5 / 0.7 = 7.1); the rule's first check at 40 comes after
    # 1 + 2 + 4 + 5 * 7 = 42. A quarter of each round traced, one at least: 8 rounds, 8
    # traced, short of the block's own minimum, a quarter of 40 = 10: 2 more are run
    clock = FakeClock(monkeypatch)
    kept: list[float] = []
    traced: list[tuple[int, bool]] = []
    options = TimingOptions(max_seconds=100.0, target_ci=1.0, min_iters=40, drop_first=0,
                            warmup_seconds=0.0, progress=False)
    plan = options.plan(fixed_drop_first=20)

    def quarter(count: int) -> int:
        return max(1, count // 4)

    blocks = [ticking_block(clock, 0.7, kept),
              Block(lambda count, keep: traced.append((count, keep)), share=quarter,
                    least=quarter)]
    run = measure(plan, blocks, lambda: {"a": kept}, torch.device("cpu"),
                  Progress("test", False), options)
    assert run.stop_reason == "target_ci" and len(kept) == 42
    assert traced == [(1, True)] * 8 + [(2, True)]
    assert run.budget.min_traced == 10


@pytest.mark.parametrize(("keyword", "value", "message"), [
    ("num_iters", "5", r"TimingOptions\.num_iters must be an int or None, got str '5'"),
    ("max_seconds", True, r"TimingOptions\.max_seconds must be a number or None, got bool"),
    ("progress", 1, r"TimingOptions\.progress must be True or False or None, got int 1"),
    ("min_iters", None, r"TimingOptions\.min_iters must be an int, got NoneType"),
])
def test_a_keyword_of_the_wrong_type_is_named_where_the_options_are_made(
        keyword: str, value: object, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        TimingOptions(**{keyword: value})  # type: ignore[arg-type]


def test_numbers_of_any_numeric_type_are_taken() -> None:
    numpy = pytest.importorskip("numpy")
    options = TimingOptions(num_iters=numpy.int64(8), drop_first=2, max_seconds=2)
    assert options.plan(fixed_drop_first=2).kept == 6  # 8 iterations, 2 dropped


@pytest.mark.parametrize(("keyword", "value", "message"), [
    ("warmup_seconds", -1.0, r"TimingOptions\.warmup_seconds must be at least 0, got -1"),
    ("warmup_seconds", float("nan"), r"warmup_seconds must be a finite number, got nan"),
    ("warmup_iters", -1, r"TimingOptions\.warmup_iters must be at least 0, got -1"),
    ("overhead_fraction", float("inf"), r"overhead_fraction must be a finite number"),
    ("overhead_fraction", -0.5, r"overhead_fraction must be at least 0, got -0.5"),
    ("confidence", 1.5, r"TimingOptions\.confidence must be less than 1, got 1.5"),
    ("confidence", 0, r"TimingOptions\.confidence must be greater than 0, got 0"),
    ("rounds", 0, r"TimingOptions\.rounds must be at least 1, got 0"),
    ("target_ci", float("nan"), r"TimingOptions\.target_ci must be greater than 0, got nan"),
])
def test_a_keyword_out_of_range_is_named_before_the_model_runs(
        keyword: str, value: object, message: str) -> None:
    # each of these ran the model before (a confidence of 1.5: 10 iterations of benchmark, 32
    # model calls of time_modules, then the error; an infinite overhead_fraction: an
    # OverflowError after 3 calls) or was taken without a word (a negative warm-up, rounds=0)
    calls = []
    model = nn.Linear(2, 2)
    model.register_forward_pre_hook(lambda module, args: calls.append(1))
    with pytest.raises(ValueError, match=message):
        TimingOptions(**{keyword: value})  # type: ignore[arg-type]
    if keyword not in inspect.signature(time_modules).parameters:  # benchmark's own
        return
    with pytest.raises(ValueError, match=message):
        time_modules(model, torch.randn(1, 2), **{"max_seconds": 0.5, "warmup_seconds": 0.0,
                                                  keyword: value})
    assert calls == []
