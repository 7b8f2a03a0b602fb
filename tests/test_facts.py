"""A timing pass's facts (:mod:`moduleprofiler.facts`)."""

from __future__ import annotations

import dataclasses
import math
import pickle

import torch
from torch import nn

from moduleprofiler import Profiler, TimingOptions
from moduleprofiler.facts import HookFreeTrace, TimingFacts


def test_facts_with_an_unmeasured_figure_equal_their_pickled_copy() -> None:
    # a forward-only pass never measures the backward calibration: NaN, and nan != nan, so
    # the facts of a pickled copy (new NaN objects) compared unequal
    facts = TimingFacts("host", "cpu", calibration={"per_call_ns": 2.0,
                                                    "grad_per_call_ns": math.nan},
                        hooked_ms=(1.0, math.nan))
    assert pickle.loads(pickle.dumps(facts)) == facts
    assert facts != dataclasses.replace(facts, calibration={"per_call_ns": 2.0,
                                                     "grad_per_call_ns": 1.0})
    assert facts != dataclasses.replace(facts, hooked_ms=(1.0, 2.0))
    assert facts != "facts"


def test_a_timing_equals_its_pickled_copy() -> None:
    timing = Profiler().time_modules(nn.Linear(3, 3), torch.randn(2, 3),
                                     TimingOptions(num_iters=2, drop_first=0, warmup_seconds=0))
    assert math.isnan(timing.calibration.grad_per_call_ns)  # no backward: not measured
    assert pickle.loads(pickle.dumps(timing)) == timing


def test_nested_facts_compare_their_fields() -> None:
    trace = HookFreeTrace(host_ms=1.0, device_ms=math.nan, launches=3, latency_ms=2.0)
    facts = TimingFacts("kernel", "cuda", hook_free=trace)
    assert pickle.loads(pickle.dumps(facts)) == facts
    assert facts != dataclasses.replace(facts, hook_free=dataclasses.replace(trace, device_ms=1.0))
