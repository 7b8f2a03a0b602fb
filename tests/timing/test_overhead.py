"""The measurement loop's rounds: fixed counts, adaptive sizing by time, the stopping rule, and
the rotation of the blocks inside a round."""

from __future__ import annotations

import contextlib

import pytest

from moduleprofiler.timing.overhead import interleave, run_rounds, split_rounds
from moduleprofiler.timing.stats import StoppingRule


class FakeClock:
    """``perf_counter`` of the loop and the rule; each iteration of a round takes 1/64 s
    (a binary fraction: the sums stay exact)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 0.0
        for where in ("moduleprofiler.timing.overhead.time.perf_counter",
                      "moduleprofiler.timing.stats.time.perf_counter"):
            monkeypatch.setattr(where, lambda: self.now)


def test_adaptive_rounds_are_sized_by_time_and_end_with_the_budget(monkeypatch):
    clock = FakeClock(monkeypatch)
    rule = StoppingRule(target_ci=None, max_seconds=1.0)
    sizes: list[int] = []

    def run_round(number: int, count: int) -> None:
        assert number == len(sizes)
        sizes.append(count)
        clock.now += count / 64

    assert run_rounds(run_round, rule, lambda: ([],)) == "max_seconds"
    # rounds grow to 5 % of the 1 s budget: 0.05 / (1/64) = 3.2 -> 3 iterations, at most
    # doubling (1, 2, 3); at 63/64 s one iteration is left in the budget, and the run ends
    # at 64/64 s exactly: 1 + 2 + 3 + 19 x 3 + 1 = 64 iterations
    assert sizes == [1, 2, 3] + [3] * 19 + [1]
    assert rule.elapsed == 1.0


def test_adaptive_rounds_stop_on_the_ci(monkeypatch):
    clock = FakeClock(monkeypatch)
    rule = StoppingRule(target_ci=0.01, max_seconds=1.0, min_samples=10)
    samples: list[float] = []

    def run_round(number: int, count: int) -> None:
        samples.extend([2.0] * count)  # a steady module: the CI is 0 wide
        clock.now += count / 64

    assert run_rounds(run_round, rule, lambda: (samples,)) == "target_ci"
    # 1, 2, 3, 3, 3 iterations: 12 samples, the first count >= min_iters (10)
    assert len(samples) == 12 and rule.width == 0.0


def test_fixed_rounds_run_exactly(monkeypatch):
    FakeClock(monkeypatch)
    sizes, _ = split_rounds(8, None, 3, 1.0)  # 8 kept over 3 rounds: 3, 3, 2
    seen: list[int] = []
    rule = StoppingRule(count=8)
    assert run_rounds(lambda number, count: seen.append(count), rule, lambda: ([],),
                      sizes) == "num_iters"
    assert seen == [3, 3, 2] and rule.reason == "num_iters"


def test_a_round_is_hooked_plain_traced_rotated_by_its_number():
    order: list[str] = []

    def round_of(number: int) -> list[str]:
        order.clear()
        interleave([1], [1], contextlib.nullcontext, lambda: order.append("hooked"),
                   lambda: order.append("plain"),
                   ([1], lambda count: order.append("traced")), offset=number)
        return list(order)

    assert round_of(0) == ["hooked", "plain", "traced"]
    assert round_of(1) == ["plain", "traced", "hooked"]
    assert round_of(2) == ["traced", "hooked", "plain"]
    assert round_of(3) == ["hooked", "plain", "traced"]
