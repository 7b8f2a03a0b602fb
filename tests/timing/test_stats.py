"""Statistics on synthetic samples, against hand-computed values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from moduleprofiler.timing.stats import (
    StoppingRule,
    ci_halfwidth,
    median_ci,
    median_ci_ranks,
    percentile,
    relative_ci_halfwidth,
    summarize,
    throughput,
)


def test_percentiles_interpolate_linearly():
    samples = list(range(1, 11))  # 1..10, position (n - 1) * q / 100 = 9q/100
    assert percentile(samples, 25) == pytest.approx(3.25)  # 1 + 2.25
    assert percentile(samples, 5) == pytest.approx(1.45)  # 1 + 0.45
    assert percentile(samples, 95) == pytest.approx(9.55)  # 1 + 8.55
    assert percentile(samples, 99) == pytest.approx(9.91)  # 1 + 8.91
    assert math.isnan(percentile([], 50))


def test_summary_values():
    s = summarize([4.0, 1.0, 3.0, 2.0])
    assert s is not None
    assert (s.n, s.mean, s.median, s.min, s.max) == (4, 2.5, 2.5, 1.0, 4.0)
    # sample std: sqrt(((1.5^2 + 0.5^2) * 2) / 3) = sqrt(5 / 3)
    assert s.std == pytest.approx(math.sqrt(5 / 3))
    assert s.p25 == pytest.approx(1.75)  # 1 + 0.75
    assert s.p75 == pytest.approx(3.25)
    assert s.iqr == pytest.approx(1.5)
    assert math.isnan(s.ci_low)  # n = 4 < 6: no 95 % interval exists
    assert summarize([]) is None
    assert math.isnan(summarize([1.0]).std)  # ddof=1 with one sample, as pandas


def test_median_ci_ranks_match_binomial_tables():
    # n = 10: P(B <= 1) = 11/1024 <= 0.025 < P(B <= 2) = 56/1024 -> [x(2), x(9)]
    assert median_ci_ranks(10) == (1, 8)
    # n = 6: P(B = 0) = 1/64 = 0.0156 <= 0.025 -> [min, max]; n = 5: 1/32 > 0.025
    assert median_ci_ranks(6) == (0, 5)
    assert median_ci_ranks(5) is None
    # n = 100: the textbook interval is [x(40), x(61)]
    assert median_ci_ranks(100) == (39, 60)
    # exact and normal-approximation branches meet smoothly
    lo_exact, hi_exact = median_ci_ranks(1000)
    lo_norm, hi_norm = median_ci_ranks(1001)
    assert abs(lo_exact - lo_norm) <= 1 and abs(hi_norm - hi_exact) <= 2
    # 99 %: n = 10 -> P(B <= 0) = 1/1024 <= 0.005 < P(B <= 1) -> [min, max]
    assert median_ci_ranks(10, 0.99) == (0, 9)


def test_median_ci_ranks_normal_branch_uses_an_exact_normal_quantile():
    # z = inv_cdf(1 - 0.0001 / 2) = 3.8905918864; n = 209319: n / 2 - 0.5 - z * sqrt(n) / 2
    # = 104659 - 3.8905918864 * 457.5139342 / 2 = 103768.9999998, so l = 103768 + 1 and the
    # ranks are (103768, 209319 - 103769 = 105550); an approximate quantile (Acklam's, off by
    # 4e-9) crossed the integer and gave (103769, 105549)
    assert median_ci_ranks(209319, 0.9999) == (103768, 105550)


def test_median_ci_values_and_relative_width():
    low, high = median_ci(np.arange(1.0, 11.0))
    assert (low, high) == (2.0, 9.0)
    assert relative_ci_halfwidth(5.5, 2.0, 9.0) == pytest.approx(3.5 / 5.5)
    assert relative_ci_halfwidth(1.0, 0.98, 1.005) == pytest.approx(0.02)  # larger side
    assert relative_ci_halfwidth(1.0, math.nan, math.nan) == math.inf


def test_median_ci_coverage_on_skewed_data():
    # lognormal latencies with a heavy tail: the interval must cover the true median
    # at least 95 % of the time (exact coverage for n = 31 is 1 - 2 P(B <= 9) = 0.971)
    rng = np.random.default_rng(0)
    true_median = 1.0  # median of lognormal(0, s) is exp(0)
    trials = 2000
    covered = 0
    for _ in range(trials):
        low, high = median_ci(rng.lognormal(0.0, 0.8, size=31))
        covered += low <= true_median <= high
    assert 0.95 <= covered / trials <= 0.99


def test_outliers_move_mean_not_median():
    samples = [1.0] * 95 + [50.0] * 5
    s = summarize(samples)
    assert s.median == 1.0 and s.p95 == pytest.approx(1.0 + 0.05 * 49)  # p95 at 94.05
    assert s.mean == pytest.approx(3.45)  # (95 + 250) / 100
    assert s.max == 50.0  # the tail is kept, never trimmed


def test_throughput_is_total_items_over_total_time():
    # 3 iterations of batch 8 in 0.1 + 0.2 + 0.3 s: 24 items / 0.6 s = 40 items/s
    assert throughput(8, [0.1, 0.2, 0.3]) == pytest.approx(40.0)
    # not mean(8 / t) = (80 + 40 + 26.67) / 3 = 48.9
    assert throughput(8, [0.1, 0.2, 0.3]) != pytest.approx(np.mean([80, 40, 80 / 3]))
    assert math.isnan(throughput(8, []))


def test_ci_halfwidth_is_the_larger_side_over_the_median():
    # n = 10, ranks (1, 8) of 1..10: CI [2, 9], median 5.5 -> max(3.5, 3.5) / 5.5
    assert ci_halfwidth(np.arange(1.0, 11.0)) == pytest.approx(3.5 / 5.5)
    assert ci_halfwidth([1.0, 2.0, 3.0]) == math.inf  # no 95 % interval below 6 samples


def test_stopping_rule_count_ci_and_budget(monkeypatch: pytest.MonkeyPatch):
    now = [100.0]
    monkeypatch.setattr("moduleprofiler.timing.stats.time.perf_counter", lambda: now[0])
    assert StoppingRule(count=3).check([1.0, 1.0]) is None
    assert StoppingRule(count=3).check([1.0, 1.0, 1.0]) == "num_iters"
    # 10 samples 100..109: ranks (1, 8) -> CI [101, 108] around the median 104.5:
    # max(3.5, 3.5) / 104.5 = 3.35 % -> a 5 % target is reached, a 3 % one is not
    steady = [100.0 + i for i in range(10)]
    assert StoppingRule(target_ci=0.05, max_seconds=None).check(steady) == "target_ci"
    rule = StoppingRule(target_ci=0.03, max_seconds=2.0)
    assert rule.check(steady) is None and rule.width == pytest.approx(3.5 / 104.5)
    assert rule.progress_text() == "CI ±3.35% (target ±3%), 2.0 s left"
    # every series must reach the target: the second one is spread out (CI [1, 8] of 4.5)
    assert StoppingRule(target_ci=0.05, max_seconds=None).check(
        steady, [float(i) for i in range(10)]) is None
    # min_iters: no CI before 12 samples even when it would be tight
    assert StoppingRule(target_ci=0.05, min_samples=12).check(steady) is None
    now[0] += 2.0  # the budget is spent
    assert rule.check(steady) == "max_seconds" and rule.reason == "max_seconds"
    assert rule.shortfall(0.0335) == ("the time budget (2 s) ended the run before the "
                                      "median's CI reached ±3% (it is ±3.35%)")
    assert StoppingRule(count=1).shortfall(0.5) is None


def test_stopping_rule_validation_names_the_argument():
    for kwargs, name in (({"count": 0}, "num_iters"), ({"target_ci": 0}, "target_ci"),
                         ({"max_seconds": -1.0}, "max_seconds"),
                         ({"min_samples": 0}, "min_iters")):
        with pytest.raises(ValueError, match=name):
            StoppingRule(**kwargs)
    with pytest.raises(ValueError, match="nothing would stop"):
        StoppingRule(target_ci=None, max_seconds=None)
