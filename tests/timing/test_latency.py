"""Whole-model latency: stopping rules, dropped warm-up, statistics, restored state."""

from __future__ import annotations

import copy
import dataclasses
import gc
import math
import pickle
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from moduleprofiler import Profiler, TimingOptions
from moduleprofiler.timing import TimingWarning, benchmark
from moduleprofiler.timing import latency as latency_module
from moduleprofiler.timing.latency import LatencyResult
from tests.timing.helpers import Spin, isolated_ms, rel_err, training_flags, within_attempts


class _FakeTimer:
    """Replaces the clock: returns a scripted sequence of nanoseconds per iteration."""

    script: Iterator[float]

    def __init__(self, device: torch.device, invoke: Any, calls: int) -> None:
        self.invoke = invoke

    def __call__(self) -> float:
        self.invoke()
        return next(_FakeTimer.script)


@pytest.fixture
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> type[_FakeTimer]:
    monkeypatch.setattr(latency_module, "_IterationTimer", _FakeTimer)
    return _FakeTimer


def _lognormal_ns(seed: int = 0) -> Iterator[float]:
    rng = np.random.default_rng(seed)
    while True:
        yield float(1e6 * rng.lognormal(0.0, 0.2))


def test_adaptive_stops_on_target_ci(fake_clock):
    fake_clock.script = _lognormal_ns()
    result = benchmark(nn.Identity(), torch.zeros(4, 3), warmup_iters=0, warmup_seconds=0,
                       target_ci=0.02, max_seconds=30)
    assert result.stop_reason == "target_ci"
    assert result.ci_halfwidth_rel <= 0.02
    assert result.latency_ci_low_ms <= result.latency_ms <= result.latency_ci_high_ms
    # lognormal(0, 0.2) around 1 ms: the 95 % CI of the median at n ~ 200-400 is about +-2 %
    assert 50 <= result.iterations <= 2000
    assert result.latency_ms == pytest.approx(1.0, rel=0.05)


def test_slow_first_iterations_are_dropped(fake_clock):
    fake_clock.script = iter([50e6, 20e6] + [1e6 + 1e3 * i for i in range(30)])
    result = benchmark(nn.Identity(), torch.zeros(2), warmup_iters=0, warmup_seconds=0,
                       num_iters=22, drop_first=2, target_ci=None, max_seconds=None)
    assert result.stop_reason == "num_iters"
    assert result.iterations == 20 and result.dropped == 2
    # 1 ms + 19 us: neither 50 nor 20 ms kept
    assert result.latency_max_ms == pytest.approx(1.019)
    # throughput: batch 2 * 20 / sum(t); sum = 20 ms + (0..19 us) = 20.19 ms
    assert result.throughput == pytest.approx(2 * 20 / 0.02019)
    assert result.iterations_per_second == pytest.approx(20 / 0.02019)


def test_time_budget_stops_and_says_so(fake_clock):
    fake_clock.script = _lognormal_ns(1)
    with pytest.warns(TimingWarning, match="time budget") as caught:
        result = benchmark(nn.Identity(), torch.zeros(1), warmup_iters=0, warmup_seconds=0,
                           target_ci=1e-6, max_seconds=0.05)
    assert result.stop_reason == "max_seconds"
    assert any("time budget" in w for w in result.warnings)
    assert len([w for w in caught if "time budget" in str(w.message)]) == 1
    with warnings.catch_warnings(record=True) as quiet:
        warnings.simplefilter("always")
        warnings.simplefilter("ignore", TimingWarning)
        benchmark(nn.Identity(), torch.zeros(1), warmup_iters=0, warmup_seconds=0,
                  target_ci=1e-6, max_seconds=0.05)
    assert not [w for w in quiet if issubclass(w.category, TimingWarning)]


def test_real_spin_latency_and_restored_state():
    model = nn.Sequential(Spin(300), nn.BatchNorm1d(3))
    model[1].eval()  # a frozen BN inside a training model must stay frozen
    before = training_flags(model)
    threads = torch.get_num_threads()
    result = benchmark(model, torch.zeros(4, 3), warmup_iters=3, warmup_seconds=0,
                       num_iters=25, drop_first=5, target_ci=None, max_seconds=None,
                       num_threads=1, cold=True)
    assert result.iterations == 20 and result.stop_reason == "num_iters"
    assert result.latency_ms >= 0.3  # 300 us of spin plus a small BatchNorm
    assert result.cold_ms is not None and result.cold_ms > 0.29
    assert result.intraop_threads == 1 and result.batch_size == 4
    assert torch.get_num_threads() == threads
    assert gc.isenabled()
    assert training_flags(model) == before
    data = result.to_dict()
    assert data["iterations"] == 20 and len(data["samples_ms"]) == 20
    for key in ("latency_ms", "latency_p99_ms", "latency_ci_low_ms", "throughput", "hardware",
                "torch_version"):
        assert key in data


def test_known_latency_within_band():
    spin = Spin(400)

    def check() -> list[str]:
        result = benchmark(spin, torch.zeros(2), warmup_iters=5, warmup_seconds=0,
                           target_ci=0.01, max_seconds=2, num_threads=1)
        truth = 0.4 + isolated_ms(Spin(0), torch.zeros(2))
        if abs(rel_err(result.latency_ms, truth)) > 0.04:  # no hooks: only the noise
            return [f"median {result.latency_ms:.4f} ms vs {truth:.4f}"]
        if result.stop_reason != "target_ci":
            return [f"stopped on {result.stop_reason}"]
        return []

    within_attempts(check)


def test_validation():
    with pytest.raises(ValueError, match="drop_first"):
        benchmark(nn.Identity(), torch.zeros(1), num_iters=5, drop_first=5)
    with pytest.raises(ValueError, match="nothing would stop"):
        benchmark(nn.Identity(), torch.zeros(1), target_ci=None, max_seconds=None)
    with pytest.raises(TypeError):
        benchmark(lambda x: x, torch.zeros(1))  # type: ignore[arg-type]
    # batch_size=0 gave a throughput of 0 items/s and True one of 1 item a call; both are
    # refused before anything runs, as calls_per_sample=1.5 is
    for value, error in ((0, ValueError), (-2, ValueError), (True, TypeError), (2.5, TypeError)):
        with pytest.raises(error, match="batch_size must be"):
            benchmark(nn.Identity(), torch.zeros(1), num_iters=2, batch_size=value)
    with pytest.raises(TypeError, match="calls_per_sample must be an int"):
        benchmark(nn.Identity(), torch.zeros(1), num_iters=2, calls_per_sample=1.5)
    # cold="x" and no_grad="x" ran, read as True
    for flag in ("cold", "no_grad"):
        with pytest.raises(TypeError, match=f"{flag} must be True or False"):
            benchmark(nn.Identity(), torch.zeros(1), num_iters=2, **{flag: "x"})


def test_inputs_and_pred_fn():
    model = nn.Bilinear(3, 4, 2)
    x, y = torch.zeros(5, 3), torch.zeros(5, 4)
    common: dict[str, Any] = dict(warmup_iters=1, warmup_seconds=0, num_iters=3,
                                  target_ci=None)
    assert benchmark(model, (x, y), **common).iterations == 3
    assert benchmark(model, {"input1": x, "input2": y}, **common).iterations == 3
    calls = []
    assert benchmark(model, x, pred_fn=lambda a: calls.append(1) or model(a, y),
                     **common).iterations == 3
    assert len(calls) == 1 + 3  # one warm-up + three timed


def test_a_latency_result_round_trips_through_json(tmp_path: Any) -> None:
    from moduleprofiler.timing.latency import LatencyResult

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TimingWarning)
        result = benchmark(nn.Linear(8, 8), torch.randn(4, 8), num_iters=12)
    again = LatencyResult.from_json(result.to_json())
    # the same samples, so the same statistics; the settings, evidence and budget as written
    np.testing.assert_array_equal(again.samples_ms, result.samples_ms)
    assert again.stats == result.stats and again.batch_size == 4
    assert again.budget == result.budget and again.warnings == result.warnings
    assert again.environment == result.environment
    path = tmp_path / "latency.json"
    result.to_json(path)
    assert LatencyResult.from_json(path).latency_ms == result.latency_ms
    with pytest.raises(ValueError, match="not a latency result's JSON"):
        LatencyResult.from_json('{"document": "moduleprofiler.profile"}')


def _quick_result() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TimingWarning)
        return benchmark(nn.Linear(8, 8), torch.randn(4, 8), num_iters=12, target_ci=None,
                         warmup_seconds=0, progress=False)


def _same(a: Any, b: Any) -> bool:
    """Equal, or both NaN (a confidence interval too few samples cannot give)."""
    return bool(a == b) or (isinstance(a, float) and isinstance(b, float)
                            and math.isnan(a) and math.isnan(b))


def test_a_latency_dict_names_the_median_as_the_model_table_does() -> None:
    # to_dict() held the median as median_ms (and the kept count as n) where
    # profile.summary(latency=...) and a timing's hook-free latency call it latency_ms (and a
    # timing's kept count iterations): one number, two names
    from moduleprofiler import Profiler

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TimingWarning)
        model, x = nn.Linear(8, 8), torch.randn(4, 8)
        result = benchmark(model, x, num_iters=12, target_ci=None, warmup_seconds=0)
    data = result.to_dict()
    with warnings.catch_warnings():
        # the model table reads the latency by its name, not by a deprecated one
        warnings.simplefilter("error", DeprecationWarning)
        summary = Profiler().profile(model, x).summary(latency=result)
        repr(result)
    assert data["latency_ms"] == result.latency_ms == summary.loc[0, "latency_ms"]
    assert data["iterations"] == result.iterations == 12
    assert data["latency_p95_ms"] == result.latency_p95_ms and data["latency_ci_high_ms"] == \
        result.latency_ci_high_ms
    assert not {"median_ms", "n", "p95_ms", "mean_ms", "warmup_seconds", "warmup_iters"} & \
        set(data)
    # the old keys still read their value, each with a warning naming the release removing it
    for old, new in (("median_ms", "latency_ms"), ("n", "iterations"),
                     ("p99_ms", "latency_p99_ms"), ("warmup_seconds", "warmup_elapsed_s"),
                     ("warmup_iters", "warmup_iterations")):
        with pytest.warns(DeprecationWarning, match=f"'{old}'.*0\\.3\\.0.*'{new}'"):
            assert data[old] == data[new]
    with pytest.warns(DeprecationWarning, match="'mean_ms'"):
        assert data.get("mean_ms") == result.latency_mean_ms


def test_a_latency_results_attributes_have_its_dict_keys_names() -> None:
    # result.median_ms in Python was data["latency_ms"] in the dict and the JSON of the same
    # result (n was iterations, p95_ms latency_p95_ms...): every key is now the attribute of
    # the same name, holding the same value
    result = _quick_result()
    data = result.to_dict()
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # no key reads an old name
        for key, value in data.items():
            attribute = getattr(result, key)
            if key == "samples_ms":
                attribute = attribute.tolist()
            elif key == "budget":
                attribute = attribute.to_dict()
            elif isinstance(attribute, tuple):
                attribute = list(attribute)
            assert _same(attribute, value), key


def test_a_latency_results_old_attributes_warn_and_read_the_new_ones() -> None:
    # the names before 0.2 keep working until 0.3.0, each read with a warning naming the new
    # attribute; RENAMED_KEYS holds every renamed key and attribute
    from moduleprofiler.timing.latency import LatencyResult

    result = _quick_result()
    assert set(LatencyResult.RENAMED_KEYS) == {
        "n", "median_ms", "mean_ms", "std_ms", "min_ms", "max_ms", "p5_ms", "p25_ms", "p75_ms",
        "p95_ms", "p99_ms", "iqr_ms", "ci_low_ms", "ci_high_ms", "warmup_iters",
        "warmup_seconds"}
    for old, new in LatencyResult.RENAMED_KEYS.items():
        match = f"LatencyResult\\.{old} is deprecated.*0\\.3\\.0; use LatencyResult\\.{new}\\b"
        with pytest.warns(DeprecationWarning, match=match) as caught:
            value = getattr(result, old)
        assert _same(value, getattr(result, new)), old
        assert len(caught) == 1 and caught[0].filename == __file__  # the user's line
    assert result.iterations == 12 and result.latency_ms == float(np.median(result.samples_ms))


def test_a_latency_json_written_with_the_old_keys_still_loads() -> None:
    # tests/fixtures/latency_old_keys.json: benchmark(nn.Linear(4, 2), randn(3, 4),
    # num_iters=5) saved by the version whose to_dict() wrote median_ms, n, p95_ms...; its
    # statistics are derived again from its samples, so they equal what it wrote; its
    # measured warm-up, under the options' names warmup_iters and warmup_seconds there, reads
    # back under the result's own
    import json
    from pathlib import Path

    from moduleprofiler.timing.latency import LatencyResult

    path = Path(__file__).resolve().parents[1] / "fixtures" / "latency_old_keys.json"
    written = json.loads(path.read_text(encoding="utf-8"))
    result = LatencyResult.from_json(path)
    assert result.latency_ms == written["median_ms"]
    assert result.iterations == written["n"] == 5
    assert result.to_dict()["latency_ms"] == written["median_ms"]
    assert result.batch_size == written["batch_size"] == 3
    assert result.warmup_iterations == written["warmup_iters"] == 1
    assert result.warmup_elapsed_s == written["warmup_seconds"] == 0.001260226999875158
    again = json.loads(result.to_json() or "")
    assert again["warmup_elapsed_s"] == written["warmup_seconds"]
    assert "warmup_seconds" not in again and "warmup_iters" not in again


def test_a_latency_equals_its_copies() -> None:
    result = Profiler().benchmark(torch.nn.Linear(3, 3), torch.randn(2, 3),
                                  TimingOptions(num_iters=3, drop_first=0, warmup_seconds=0))
    # equality was identity: from_json's "the same result", a pickle, a deepcopy all differed
    assert LatencyResult.from_json(result.to_json()) == result
    assert pickle.loads(pickle.dumps(result)) == result
    assert copy.deepcopy(result) == result
    other = dataclasses.replace(result, samples_ms=result.samples_ms * 2)
    assert other != result and result != "latency"
