"""Backward time per module within 3 % on a chain of known-duration modules (CPU)."""

from __future__ import annotations

import time

import torch
from torch import nn

from moduleprofiler.timing import train_step_times
from tests.timing.helpers import Spin, module_row, rel_err, within_attempts

BACKWARD_US = (400, 800, 600, 1000)


def _node_cost_us(reps: int = 30) -> float:
    """What one more zero-length Spin adds to a hook-free backward (its Python autograd
    Function and the engine's step): the part of a Spin's backward that is not the spin.
    The fastest of ``reps`` runs of a chain of 1 and of 9, by difference."""
    x = torch.randn(16, requires_grad=True)
    best = {}
    for length in (1, 9):
        model = nn.Sequential(*[Spin(0, 0) for _ in range(length)])
        samples = []
        for _ in range(reps):
            loss = model(x).sum()
            start = time.perf_counter_ns()
            loss.backward()
            samples.append(time.perf_counter_ns() - start)
        best[length] = min(samples)
    return (best[9] - best[1]) / 8 / 1000


def test_every_layer_within_3_percent_first_with_a_leaf_input_and_last():
    def check() -> list[str]:
        model = nn.Sequential(*[Spin(50, us) for us in BACKWARD_US])
        x = torch.randn(16, requires_grad=True)  # a leaf: its .grad is the caller's, not layer 0's
        timing = train_step_times(model, x, num_iters=14, drop_first=2, num_threads=1,
                                  measure_overhead=False)
        extra = _node_cost_us()
        failures = []
        for index, us in enumerate(BACKWARD_US):
            measured_us = module_row(timing, str(index))["backward_time_median_ms"] * 1000
            error = rel_err(measured_us, us + extra)
            if abs(error) > 0.03:
                failures.append(f"layer {index}: {measured_us:.1f} us for {us} + {extra:.1f} "
                                f"({error:+.1%})")
        return failures

    # On a shared 2-core machine the whole machine has slow spells lasting seconds to tens of
    # seconds: a hook-free node then costs twice as much, and the hooked nodes read +20 to
    # +35 us each (+3 to +8 % here), in every attempt of the spell. Repeated checks in one
    # process alternate between such spells and quiet ones at about 1 %. One CI run saw a
    # spell outlast eight attempts three seconds apart (about 35 s), and a later one twelve
    # attempts five seconds apart (every layer +3 to +10 %, about 75 s, late in the full suite;
    # the same test alone passed at once): 24 attempts span about 150 s (the pauses cost
    # nothing when an attempt passes).
    within_attempts(check, tries=24, pause_s=5.0)
